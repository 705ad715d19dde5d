"""Where drafted tokens come from for speculative decoding: prompt lookup and draft models.
Plain Python but for a draft model's own forward pass."""
