"""Protocol adapters: wire formats in, one GenerationRequest through, wire formats out."""
