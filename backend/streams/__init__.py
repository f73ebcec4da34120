"""Live streams: metric and log ingest, and fan-out to subscribers."""
