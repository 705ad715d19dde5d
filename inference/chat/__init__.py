"""The chat path every surface shares: each surface's parser makes one ChatCall
(call.py) with the readers here, and plan.py prepares it for a model worker."""
