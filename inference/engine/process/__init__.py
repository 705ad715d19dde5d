"""The worker process around an engine: its ZeroMQ server, a distributed group of ranks,
the lifeline to its parent, and what a process does before MLX loads."""
