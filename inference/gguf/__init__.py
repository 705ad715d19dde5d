"""GGUF files into MLX model folders: the header reader, the tokenizer and the converter.

It converts, it does not serve, so it lives beside the engine, not inside it.
"""

# The engine package loads the optimized BLAS, which must come before mlx.core.
from .. import engine  # noqa: F401
