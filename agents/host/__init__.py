"""The agent daemon that runs on every training host (`strata agent`)."""
