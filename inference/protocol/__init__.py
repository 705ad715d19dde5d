"""What crosses between the web process and a model worker: the wire messages, the
sampling parameters, the events a generation streams back. Plain data and msgpack: importing
it loads no MLX, mlx-lm, transformers or torch, so the web tier never does."""
