"""qprint: deliver print jobs from a Django application to print-agent devices."""
