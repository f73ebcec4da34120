"""Jobs: the spec users submit, the rows that track them, and their lifecycle."""
