"""A large user's vectors read out of vec0's own tables in bulk, for a copy (copies.py).

vec0 keeps a partition's vectors in chunks of `chunk_size` rows (8 in memdb's schema): a row of
`<table>_chunks` holds the chunk's partition value, a validity bitmap and its rowids (int64), and
the row of `<table>_vector_chunks00` with the same id holds the float32 vectors of those slots.
A point lookup by id (`select embedding from turns_vec where turn_id = ?`) reads a whole chunk
for one vector: reading a 333k-turn user that way read 4 GB and was most of a 1M-atom user's
first search (bench/results/first_search_i29.json). Reading the user's chunks in order reads each
vector once, a chunk a row.

This reads tables sqlite-vec 0.1.9 creates, not its API: the layout is checked first (columns,
blob sizes), and anything unexpected (another layout, ids out of order, more rows than the user
holds) returns False so that the caller reads row by row as before.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import apsw
import numpy as np

# A user with fewer rows is read row by row: finding a partition's chunks scans the whole
# `_chunks` table (no index on the partition), about 12 bytes a row of every user.
MIN_ROWS = 20_000
READ_CHUNKS = 512  # chunks read at a time (4096 vectors at chunk_size 8): no second copy in memory
_CHUNK_COLUMNS = ["chunk_id", "size", "sequence_id", "partition00", "validity", "rowids"]


def _layout_known(conn: apsw.Connection, table: str) -> bool:
    """Whether table's shadow tables are the ones this module reads: one partition, one vector column."""
    columns = [r[1] for r in conn.execute(f'pragma table_info("{table}_chunks")')]
    vector = [r[1] for r in conn.execute(f'pragma table_info("{table}_vector_chunks00")')]
    return columns == _CHUNK_COLUMNS and vector == ["rowid", "vectors"]


def read(conn: apsw.Connection, table: str, user: str, dim: int, after: int, upto: int, most: int,
         append: Callable[[np.ndarray, np.ndarray], None]) -> int | None:
    """Pass the user's vectors in table (a vec0 table partitioned by user) with ids in
    (after, upto], in id order, to append(ids, vectors) a batch at a time; returns how many,
    or None when they could not be read this way (the layout is not the one known, the ids are
    not in order, more than most rows were found): then what was appended must be dropped."""
    if not _layout_known(conn, table):
        return None
    # "+": the vector chunks' key column is declared without a type, so a bare integer
    # comparison would not use its index (a scan of every chunk per chunk).
    cursor = conn.execute(
        f'select c."size", c."validity", c."rowids", v."vectors" from "{table}_chunks" c '
        f'join "{table}_vector_chunks00" v on v."rowid" = +c."chunk_id" '
        f'where c."partition00" = ? order by c."chunk_id"',
        (user,),
    )
    read_so_far, last = 0, after
    while batch := list(itertools.islice(cursor, READ_CHUNKS)):
        if any(len(rowids) != 8 * size or len(vectors) != 4 * dim * size or len(validity) != -(-size // 8)
               for size, validity, rowids, vectors in batch):
            return None
        sizes = {size for size, *_ in batch}
        if len(sizes) != 1:
            return None
        size = sizes.pop()
        valid = np.unpackbits(np.frombuffer(b"".join(r[1] for r in batch), np.uint8).reshape(len(batch), -1),
                              axis=1, bitorder="little")[:, :size].astype(bool).ravel()
        ids = np.frombuffer(b"".join(r[2] for r in batch), np.int64)
        keep = valid & (ids > after) & (ids <= upto)
        if not keep.any():
            continue
        ids = ids[keep]
        if ids[0] <= last or (len(ids) > 1 and not bool(np.all(ids[1:] > ids[:-1]))):
            return None  # out of id order (a vector stored after newer rows): row by row instead
        read_so_far += len(ids)
        if read_so_far > most:
            return None
        vectors = np.frombuffer(b"".join(r[3] for r in batch), np.float32).reshape(-1, dim)[keep]
        append(ids, vectors)
        last = int(ids[-1])
    return read_so_far

