"""The batch and its steps: the engine thread, the scheduler, the runner, the batch generator
(queued, prefilling and decoding rows), sampling, stops, speculative verification, KV lanes."""
