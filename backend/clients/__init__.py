"""The client coordinator: the user's own process that coordinates a parameter_server job
whose spec says ``coordinator: client`` (runtime.connect), attached to it one at a time."""
