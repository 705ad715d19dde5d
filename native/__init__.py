"""Native extensions of MLX Lab, built by `make setup` with the machine's compiler."""
