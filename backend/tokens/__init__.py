"""API tokens made at run time (`strata tokens`), stored hashed."""
