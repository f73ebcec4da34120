"""Hosts: the machines agents run on, and their devices."""
