"""Model workers: one process per loaded model, and the supervisor that runs them.

The web process keeps no MLX state: it sends each validated request to the
worker of its model (`inference/protocol/wire.py` is the protocol) and renders the events that
come back. Nothing here imports Django.
"""
