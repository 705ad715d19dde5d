"""What outlives a step: the quantized KV rows, the prompt cache (in memory and on disk),
sessions, and the checkpoints a resumed generation continues from."""
