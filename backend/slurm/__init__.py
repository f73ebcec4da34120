"""Slurm as the place a job runs: one Slurm job per Strata job, agents bound to it inside."""
