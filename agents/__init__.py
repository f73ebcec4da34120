"""Everything that runs on a training host: the agent daemon and the in-process runtime.

Nothing here imports from ``backend``: hosts install and run this package on its own terms.
"""
