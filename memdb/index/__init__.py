"""The two indexes every search and every dedup reads: FTS5 keywords (fts) and vectors, from
vec0 or from an in-memory copy for large users (vectors, copies)."""
