"""Embedding models: an encoder through mlx-embeddings or a decoder through mlx-lm, inputs
batched by length, pooled as the model's sentence-transformers files say, normalized."""
