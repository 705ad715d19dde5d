"""Who may call /api and /v1: API keys, DRF authentication and permissions, and /api's own
endpoints (me, keys, access settings, the schema and its docs).

Every other app (inference, lab, jobs, publishing) builds on this one, so it imports
none of them.
"""
