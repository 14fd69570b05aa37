"""qcluster: run one Django application as one unit on several nodes."""
