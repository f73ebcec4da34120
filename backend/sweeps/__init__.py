"""Sweeps: a hyperparameter search whose trials are ordinary jobs (Optuna searches and prunes)."""
