"""Code bundles: tar archives of a job's code dir, named by their SHA-256, kept as files."""
