"""Teams: users, projects and each member's role in a project."""
