"""The cluster view: hosts with the tasks they hold and their latest usage, as users see it."""
