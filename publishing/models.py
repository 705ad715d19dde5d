"""Hub credentials and pushes arrive with the publishing issue."""
