"""Strata's control plane server: jobs, hosts, placement and live streams."""
