"""The OpenAPI description of the plain-Django endpoints (/v1, /health, /stats).

drf-spectacular describes the DRF views of /api by itself; `hooks.add_inference_api`
merges these hand-written paths into the same document at /api/schema/.
"""
