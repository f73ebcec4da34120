"""Which server replica leads: a lease in the database, renewed continuously, with an epoch
that fences every write only the leader may make (PostgreSQL); one server, always the leader,
on SQLite, where a second server on the same file is refused at start."""
