"""Jobs: the spec users submit, the rows that track them, and their lifecycle."""

# Imported with the package, so that whatever loads the models has jobs and tasks written
# together under the same version check (both import the models first, whose own hook must
# mark a changed task's job before either writes).
from backend.jobs import task_writes as task_writes
from backend.jobs import versioning as versioning
