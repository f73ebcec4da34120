"""Scheduling: placing jobs on hosts, launching their tasks, and reconciling what runs."""
