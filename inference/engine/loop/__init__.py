"""The batch and its steps: the engine thread, the scheduler, the runner over the batch,
sampling, stops, the first token, speculative verification and KV lanes."""
