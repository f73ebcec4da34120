"""TensorBoard for jobs: processes started on demand, served behind Strata's authentication."""
