"""Benchmarks of Strata on the machine at hand; see docs/benchmarks.md for what and how."""
