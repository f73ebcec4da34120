"""The audit trail: who changed what through the API, when and from where."""
