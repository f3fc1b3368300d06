"""In-memory copies of large users' vectors, kept exact against the committed file.

sqlite-vec 0.1.9's KNN scans every vector in the user's partition, without SIMD in the PyPI
wheel: 84 ms at 100k atoms on the 2-core bench machine, 6x numpy's brute force over the same
vectors (bench/scale.py). A user with at least `vector_copy_min` vectors gets a float32 copy in
memory, ranked by one matrix-vector product. vec0 stays the store of record and answers for
small users and when the copy would not fit in `vector_copy_mb` (vectors.py picks).

A copy is checked before each use: when neither `pragma data_version` (another connection
committed) nor the connection's total_changes (it wrote) moved, it is exact. Otherwise it is
brought up to date from the committed file: ids are never reused, so new rows are those above
the copy's highest id; the superseded flags are read again; and the file's 'vectors_epoch'
(bumped whenever vectors are deleted or rebuilt) forces a reload. Copies are only changed
outside transactions, so a rolled-back write never leaves a row behind; inside one
(deduplication during extraction) the rows written since are read beside it.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
from dataclasses import dataclass
from typing import Any

import apsw
import numpy as np

from .. import codec
from ..db import connection
from ..vecmath import unit

# What the copy of each layer is read from: the rows' table, its vec0 table and key column.
LAYERS = {"atoms": ("atoms", "atoms_vec", "atom_id"), "turns": ("turns", "turns_vec", "turn_id")}
READ_ROWS = 4096  # vectors read into a copy at a time


def stamp(conn: apsw.Connection) -> tuple[int, int]:
    """Moves whenever the file may have changed: another connection committed, or this one wrote."""
    return conn.execute("pragma data_version").fetchone()[0], conn.total_changes()


@dataclass
class VectorCopy:
    """One user's vectors of one layer, unit length, in id order, with room to grow."""

    ids: np.ndarray  # int64, capacity rows; the first n are used
    matrix: np.ndarray  # float32 (capacity, dim)
    n: int = 0
    active: np.ndarray | None = None  # atoms: False at superseded rows
    epoch: str | None = None
    stamp: tuple[int, int] = (0, 0)

    @classmethod
    def empty(cls, dim: int, capacity: int = 0, **fields: Any) -> VectorCopy:
        return cls(ids=np.empty(capacity, np.int64), matrix=np.empty((capacity, dim), np.float32), **fields)

    @property
    def nbytes(self) -> int:
        return self.matrix.nbytes + self.ids.nbytes

    @property
    def last_id(self) -> int:
        return int(self.ids[self.n - 1]) if self.n else 0

    def append(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        need = self.n + len(ids)
        if need > len(self.ids):  # double the room, so appends stay cheap
            capacity = max(need, 2 * len(self.ids))
            self.ids = _grown(self.ids, capacity)
            self.matrix = _grown(self.matrix, capacity)
        self.ids[self.n : need] = ids
        self.matrix[self.n : need] = vectors
        self.n = need

    def without(self, superseded: np.ndarray) -> np.ndarray:
        """Active flags for the rows: True except where the id is in superseded (sorted)."""
        active = np.ones(len(self.ids), bool)
        ids = self.ids[: self.n]
        at = np.searchsorted(ids, superseded)
        inside = at < self.n
        at, superseded = at[inside], superseded[inside]
        active[at[ids[at] == superseded]] = False
        return active

    def top_k(self, query: np.ndarray, k: int, active: np.ndarray | None) -> list[tuple[int, float]]:
        """(id, cosine) of the k nearest vectors (only active ones, given flags), best first."""
        scores = self.matrix[: self.n] @ query
        if active is not None:
            scores[~active[: self.n]] = -np.inf
        top = np.argpartition(-scores, k)[:k] if k < self.n else np.arange(self.n)
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(int(self.ids[i]), float(scores[i])) for i in top if scores[i] != -np.inf]


def _grown(array: np.ndarray, capacity: int) -> np.ndarray:
    out = np.empty((capacity,) + array.shape[1:], dtype=array.dtype)
    out[: len(array)] = array
    return out


class VectorCopies:
    """The vector copies of one connection. Not thread-safe: Memory holds its lock around
    every use, as it does for the connection."""

    def __init__(self, *, vector_copy_min: int, vector_copy_mb: float,
                 blas_limit: Any = contextlib.nullcontext) -> None:
        self.vector_copy_min = vector_copy_min
        self.vector_copy_bytes = int(vector_copy_mb * 2**20)
        self.blas_limit = blas_limit
        self.copies: collections.OrderedDict[tuple[str, str], VectorCopy] = collections.OrderedDict()
        self.small: dict[tuple[str, str], tuple[int, int]] = {}  # too few vectors, as of stamp

    def top_k(self, conn: apsw.Connection, layer: str, user: str, query: np.ndarray, k: int,
              *, active_only: bool = True) -> list[tuple[int, float]] | None:
        """The k nearest of user's vectors in layer as (id, cosine), or None when vec0 should
        answer instead (a small user, a copy too big for the budget)."""
        parts = self._parts(conn, layer, user)
        if parts is None:
            return None
        query = unit(query)
        with self.blas_limit():
            ranked = [hit for copy, active in parts for hit in copy.top_k(query, k, active if active_only else None)]
        return sorted(ranked, key=lambda hit: -hit[1])[:k] if len(parts) > 1 else ranked

    def sync(self, conn: apsw.Connection, layer: str, user: str) -> None:
        """Bring the user's copy up to date (loading it if the user is large enough) before a
        transaction that will rank against it, since inside one it cannot change."""
        if conn.getautocommit():
            self._parts(conn, layer, user)

    def _parts(self, conn: apsw.Connection, layer: str, user: str) -> list[tuple[VectorCopy, np.ndarray | None]] | None:
        """The copies to rank with their active flags: the user's copy brought up to date, or
        inside a transaction, the copy as it was plus the rows written since."""
        key = (layer, user)
        now = stamp(conn)
        copy = self.copies.get(key)
        if copy is not None and copy.stamp == now:
            self.copies.move_to_end(key)
            return [(copy, copy.active)]
        if self.small.get(key) == now or not connection.has_vectors(conn):
            return None
        epoch = connection.get_meta(conn, "vectors_epoch")
        if not conn.getautocommit():
            # The transaction's writes may yet roll back (and their ids be reused): read them
            # beside the copy, never into it.
            if copy is None or copy.epoch != epoch:
                return None
            since = VectorCopy.empty(copy.matrix.shape[1])
            self._read_rows(conn, layer, user, since, after=copy.last_id, held=copy.n)
            superseded = self._superseded(conn, layer, user)
            return [(copy, copy.without(superseded) if copy.active is not None else None),
                    (since, since.without(superseded) if copy.active is not None else None)]
        if copy is None or copy.epoch != epoch:
            self.copies.pop(key, None)
            copy = self._load(conn, layer, user, epoch, now)
            if copy is None:
                return None
        else:
            self._catch_up(conn, layer, user, copy)
        copy.stamp = now
        return [(copy, copy.active)]

    def _load(self, conn: apsw.Connection, layer: str, user: str, epoch: str | None,
              now: tuple[int, int]) -> VectorCopy | None:
        table, _, _ = LAYERS[layer]
        count = conn.execute(f'select count(*) from "{table}" where "user" = ?', (user,)).fetchone()[0]
        dim = int(connection.get_meta(conn, "embedder_dim") or 0)
        if count < self.vector_copy_min or not dim or count * dim * 4 > self.vector_copy_bytes:
            self.small[(layer, user)] = now
            return None
        copy = VectorCopy.empty(dim, capacity=count, epoch=epoch, stamp=now)
        self._catch_up(conn, layer, user, copy)
        self.copies[(layer, user)] = copy
        self._evict()
        return copy

    def _catch_up(self, conn: apsw.Connection, layer: str, user: str, copy: VectorCopy) -> None:
        self._read_rows(conn, layer, user, copy, after=copy.last_id, held=copy.n)
        if layer == "atoms":
            copy.active = copy.without(self._superseded(conn, layer, user))

    @staticmethod
    def _read_rows(conn: apsw.Connection, layer: str, user: str, into: VectorCopy, after: int,
                   held: int) -> None:
        """Append the user's vectors with ids above after (held: how many the user had)."""
        table, vec_table, key = LAYERS[layer]
        # Walk the ids above `after` when they are few (a file of one user, or a user who wrote
        # most of what came since); else the user's index, since other users' rows came
        # between ("+" keeps SQLite off the index in the first case). Then one vec0 point
        # lookup per row.
        last = conn.execute(f'select coalesce(max("id"), 0) from "{table}"').fetchone()[0]
        by_id = after > 0 and last - after <= 4 * held
        where = 't."id" > ?1 and +t."user" = ?2' if by_id else 't."user" = ?2 and t."id" > ?1'
        cursor = conn.execute(
            f'select t."id", v."embedding" from "{table}" t join "{vec_table}" v on v."{key}" = t."id" '
            f'where {where} order by t."id"',
            (after, user),
        )
        while rows := list(itertools.islice(cursor, READ_ROWS)):  # bounded: no second copy in memory
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
            into.append(ids, unit(vectors))

    @staticmethod
    def _superseded(conn: apsw.Connection, layer: str, user: str) -> np.ndarray:
        if layer != "atoms":
            return np.empty(0, np.int64)
        rows = conn.execute('select "id" from "atoms" where "user" = ? and "status" = ? order by "id"',
                            (user, codec.STATUSES["superseded"])).fetchall()
        return np.array([r[0] for r in rows], dtype=np.int64)

    def _evict(self) -> None:
        while sum(c.nbytes for c in self.copies.values()) > self.vector_copy_bytes and len(self.copies) > 1:
            self.copies.popitem(last=False)
