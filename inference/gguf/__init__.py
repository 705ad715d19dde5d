"""GGUF files into MLX model folders: the header reader, the tokenizer and the converter.

It converts, it does not serve, so it lives beside the engine, not inside it. A process
calls `inference.engine.process.startup.prepare_mlx_process()` before importing convert.py, which
brings in mlx.core.
"""
