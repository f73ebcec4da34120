"""Jobs: the spec users submit, the rows that track them, and their lifecycle."""

# Imported with the package, so that whatever loads the models has jobs written together
# under the same version check (versioning imports the models first).
from backend.jobs import versioning as versioning
