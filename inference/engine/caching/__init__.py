"""What outlives a step: the prompt cache (in memory and on disk), sessions, and the
checkpoints a resumed generation continues from."""
