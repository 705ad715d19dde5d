"""The lab's own REST API (/api): DRF views, their authentication and permissions."""
