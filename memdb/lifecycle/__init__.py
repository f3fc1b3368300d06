"""The memory lifecycle: what a new atom does to the atoms a user holds — the rules (relation)
and their application to the file (absorb)."""
