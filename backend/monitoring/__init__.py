"""The server's own metrics for Prometheus (`GET /metrics`)."""
