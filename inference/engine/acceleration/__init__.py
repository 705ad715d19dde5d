"""Loading a model and making it fast: mlx-lm's load, the CPU's dense and quantized-kernel
paths, fused layers, the CUDA decode step, adapters. Depends on nothing else in the engine."""
