"""Vision (and later audio) models through mlx-vlm: loading one, its prompts' media made model
inputs (the processor's pixels, the prompt's embeddings and positions), and the rows that carry them."""
