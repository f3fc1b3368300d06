"""The SQLite file: connection and migrations (connection), the rows of turns and atoms
(rows), and deleting them without a trace (forget). Every byte layout lives in schema.sql."""
