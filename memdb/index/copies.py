"""In-memory copies of large users' vectors, kept exact against the committed file.

sqlite-vec 0.1.9's KNN scans every vector in the user's partition, without SIMD in the PyPI
wheel: several times slower than numpy's brute force over the same vectors
(bench/results/scale.json). A user with at least `vector_copy_min` vectors gets a float32 copy in
memory, ranked by one matrix-vector product. vec0 stays the store of record and answers for
small users and when the copy would not fit in `vector_copy_mb` (vectors.py picks).

A copy is checked before each use: when neither `pragma data_version` (another connection
committed) nor the connection's total_changes (it wrote) moved, it is exact. Otherwise it is
brought up to date from the committed file: ids are never reused, so new rows are those above
the copy's highest id; the superseded flags are read again; and the file's 'vectors_epoch'
(bumped whenever vectors are deleted or rebuilt) forces a reload. Copies are only changed
outside transactions, so a rolled-back write never leaves a row behind; inside one
(deduplication during extraction) the rows written since are read beside it, each look reading
only those new since the last, until the transaction ends (SQLite's commit and rollback hooks,
Held._watch, drop them).

With Settings.vector_copy_files, a user with at least vector_copy_file_min vectors has the copy
written to a file beside the database once (copyfiles.py) and memory-mapped by later opens: the
mapped rows are the copy's base, never appended to, and what came since is read into memory
beside it. A mapped base is not counted in vector_copy_mb: its pages are the OS's page cache.

Deduplication ranks an extraction batch's atoms one after another; given the batch's vectors
first (expect), the copy ranks them all in one matrix product and each lookup then scores
only the few rows that product found (bench/scale.py: same decisions, fewer passes), or, with
rescore (Settings.dedup_rescore) on a part large enough, each vector's shortlist by its 1-bit
codes, as when it is ranked alone. A vector ranked alone inside a write is kept the same way,
as a batch of one: scenario placement ranks it again right after deduplication
(bench/write_path.py).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from .. import codec
from ..db import connection
from ..vecmath import hamming, sign_codes, unit
from . import chunks, copyfiles

log = logging.getLogger("memdb")

# What the copy of each layer is read from: the rows' table, its vec0 table and key column.
LAYERS = {"atoms": ("atoms", "atoms_vec", "atom_id"), "turns": ("turns", "turns_vec", "turn_id")}
READ_ROWS = 4096  # vectors read into a copy at a time
# A batch ranking keeps k x this many rows per vector: rows superseded after it was made are
# dropped from them, and only if fewer than k are left is the vector ranked alone.
BATCH_MARGIN = 4
# A copy is loaded with an eighth of its rows to spare and grows by an eighth: growing copies
# the whole matrix while the old one is still held (doubling a 100k-atom copy on its first new
# row took a process to 380 MB; bench/results/write_path.json).
SPARE = 8
# A ranking with rescore reads the 1-bit codes of every row (32x less than their float32
# vectors) and the exact vectors of a shortlist of rescore x k rows, at least MIN_SHORTLIST;
# below SHORTLIST_SHARE x the shortlist's size a part is ranked by every vector instead (it is
# then a few MB, which is as fast to read).
MIN_SHORTLIST = 1024
SHORTLIST_SHARE = 8


def stamp(conn: apsw.Connection) -> tuple[int, int]:
    """Moves whenever the file may have changed: another connection committed, or this one wrote."""
    return conn.execute("pragma data_version").fetchone()[0], conn.total_changes()


class Held:
    """The in-memory copies of one connection by (layer, user), least recently used first, and
    the keys found too small to copy, each as of the stamp it was made or found at. The check
    before each use, and the copies being made in the background, for vector and keyword
    copies alike."""

    def __init__(self) -> None:
        self.copies: collections.OrderedDict[tuple[str, str], Any] = collections.OrderedDict()
        self.small: dict[tuple[str, str], tuple[int, int]] = {}  # too few rows, as of stamp
        # Threads making a copy on a connection of their own, started once the search that
        # asked is done (start_builds), so that they do not share the CPU with it.
        self.building: dict[tuple[str, str], threading.Thread] = {}
        self.stopping = threading.Event()
        # Transactions ended (committed or rolled back) on the connections watched: what a
        # transaction's own rows were read beside a copy for is over once this moves.
        self.transactions = 0
        self._watched: weakref.WeakSet[apsw.Connection] = weakref.WeakSet()

    def start_builds(self) -> None:
        """Start the background builds that searches asked for (Memory.search, after each)."""
        for thread in list(self.building.values()):
            if thread.ident is None:
                thread.start()

    def wait(self) -> None:
        """Until every copy being made in the background is ready (tests, benchmarks)."""
        self.start_builds()
        while self.building:
            for thread in list(self.building.values()):
                thread.join()

    def close(self) -> None:
        """Stop making copies in the background (within one batch of rows) and wait for it."""
        self.stopping.set()
        for key, thread in list(self.building.items()):
            if thread.ident is None:  # never started: nothing to stop
                del self.building[key]
        self.wait()

    def _watch(self, conn: apsw.Connection) -> None:
        """Hear of every commit and rollback of conn from now on (_committing, _rolled_back).
        A rollback to a savepoint is not heard: what absorb writes is never rolled back alone."""
        if conn not in self._watched:
            ref = weakref.ref(conn)  # the hooks are the connection's: no cycle through them
            conn.set_commit_hook(lambda: self._committing(ref()), id=("memdb-copies", id(self)))
            conn.set_rollback_hook(lambda: self._rolled_back(ref()), id=("memdb-copies", id(self)))
            self._watched.add(conn)

    def _committing(self, conn: apsw.Connection | None) -> bool:
        """SQLite's commit hook: a transaction of conn is about to commit (False lets it). No
        SQL may run here."""
        self.transactions += 1
        return False

    def _rolled_back(self, conn: apsw.Connection | None) -> None:
        self.transactions += 1

    def _held(self, conn: apsw.Connection, key: tuple[str, str]) -> tuple[Any, tuple[int, int], bool]:
        """(the copy held for key or None, the file's stamp now, whether that answer stands as
        it is): True for a copy still exact (it becomes the most recently used) and for None
        when key was found too small at this same stamp; False when it must be brought up to
        date or looked at again."""
        now = stamp(conn)
        copy = self.copies.get(key)
        if copy is not None and copy.stamp == now:
            self.copies.move_to_end(key)
            return copy, now, True
        if self.small.get(key) == now:
            return None, now, True
        return copy, now, False


@dataclass
class VectorCopy:
    """One user's vectors of one layer, unit length, in id order, with room to grow."""

    ids: np.ndarray  # int64, capacity rows; the first n are used
    matrix: np.ndarray  # float32 (capacity, dim)
    n: int = 0
    active: np.ndarray | None = None  # atoms: False at superseded rows
    epoch: str | None = None
    stamp: tuple[int, int] = (0, 0)
    base: VectorCopy | None = None  # the rows mapped from the copy's file, never appended to
    codes: np.ndarray | None = None  # uint64 1-bit codes of the first `coded` rows (vecmath.sign_codes)
    coded: int = 0
    center: np.ndarray | None = None  # what the codes' bits are taken against: the rows' mean when first coded

    @classmethod
    def empty(cls, dim: int, capacity: int = 0, **fields: Any) -> VectorCopy:
        return cls(ids=np.empty(capacity, np.int64), matrix=np.empty((capacity, dim), np.float32), **fields)

    @property
    def nbytes(self) -> int:
        """The memory it holds (a mapped base is the page cache's)."""
        return self.matrix.nbytes + self.ids.nbytes + (self.codes.nbytes if self.codes is not None else 0)

    @property
    def last_id(self) -> int:
        if self.n:
            return int(self.ids[self.n - 1])
        return self.base.last_id if self.base is not None else 0

    @property
    def rows(self) -> int:
        return self.n + (self.base.rows if self.base is not None else 0)

    def parts(self) -> list[VectorCopy]:
        """What is ranked: the mapped base, if any, then the rows held in memory."""
        return [self.base, self] if self.base is not None else [self]

    def append(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        need = self.n + len(ids)
        if need > len(self.ids):  # an eighth more room, so appends stay cheap
            capacity = max(need, len(self.ids) + len(self.ids) // SPARE + 64)
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

    def top_k(self, query: np.ndarray, k: int, active: np.ndarray | None,
              among: np.ndarray | None = None, rescore: int = 0) -> list[tuple[int, float]]:
        """(id, cosine) of the k nearest vectors (only active ones, given flags), best first.
        among: row indices known to hold the k nearest active rows (a batch ranking's), scored
        again alone, so the cosines are those of ranking every row. rescore: rank only the
        shortlist of rescore x k rows nearest by 1-bit code (at least MIN_SHORTLIST), by their
        exact cosines, when the part holds many times more rows than that; 0: every row."""
        shortlisted = False
        size = max(rescore * k, MIN_SHORTLIST)
        if among is None and rescore and self.n >= SHORTLIST_SHARE * size:
            among, shortlisted = self.shortlist(query, size, active), True
            active = None  # the shortlist holds active rows only
        if among is not None:
            among = np.sort(among if active is None else among[active[among]])
            if len(among) >= k or shortlisted:
                # einsum, not BLAS: on 2 shared cores a 2-thread product of a shortlist waited
                # for its second thread's time slice (p95 7.0 vs 5.4 ms beside a busy core;
                # as fast on an idle machine, bench/scale.py).
                scores = np.einsum("ij,j->i", np.asarray(self.matrix[among]), query)
                top = np.argsort(-scores, kind="stable")[:k]  # ties by row, as a full ranking breaks them
                return [(int(self.ids[among[i]]), float(scores[i])) for i in top]
        scores = np.asarray(self.matrix[: self.n]) @ query
        if active is not None:
            scores[~active[: self.n]] = -np.inf
        top = np.argpartition(-scores, k)[:k] if k < self.n else np.arange(self.n)
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(int(self.ids[i]), float(scores[i])) for i in top if scores[i] != -np.inf]

    def shortlist(self, query: np.ndarray, size: int, active: np.ndarray | None) -> np.ndarray:
        """Row indices of the size rows (active ones, given flags) whose 1-bit codes are nearest
        to the query's: where the k nearest by cosine almost always are, for size >> k."""
        codes = self._codes()
        distance = hamming(codes[:, : self.n], sign_codes(query, self.center))
        if active is not None:
            distance[~active[: self.n]] = np.iinfo(distance.dtype).max
        rows = _smallest(distance, size)
        return rows if active is None else rows[active[rows]]

    def _codes(self) -> np.ndarray:
        """The codes of every row, coding the rows appended since the last call."""
        if self.center is None:
            self.center = np.asarray(self.matrix[: self.n], np.float32).mean(axis=0)
        if self.codes is None or self.codes.shape[1] < self.n:  # as much room as the vectors have
            codes = np.empty((-(-self.matrix.shape[1] // 64), len(self.ids)), np.uint64)
            codes[:, : self.coded] = self.codes[:, : self.coded] if self.codes is not None else 0
            self.codes = codes
        for lo in range(self.coded, self.n, READ_ROWS * 16):  # bounded: a mapped base is read once
            hi = min(self.n, lo + READ_ROWS * 16)
            self.codes[:, lo:hi] = sign_codes(self.matrix[lo:hi], self.center)
        self.coded = self.n
        return self.codes


def _smallest(distance: np.ndarray, size: int) -> np.ndarray:
    """Row indices of the size smallest distances (small whole numbers), the lowest rows first
    among equals: a count of each distance finds the cut, which costs a fraction of sorting
    a million of them (argpartition: 10 ms at 1M rows; bench/results/dedup_1m.json)."""
    if size >= len(distance):
        return np.arange(len(distance))
    cut = int(np.searchsorted(np.bincount(distance).cumsum(), size))  # the distance the size-th row is at
    below = np.flatnonzero(distance < cut)
    return np.concatenate([below, np.flatnonzero(distance == cut)[: size - len(below)]])


def _grown(array: np.ndarray, capacity: int) -> np.ndarray:
    out = np.empty((capacity,) + array.shape[1:], dtype=array.dtype)
    out[: len(array)] = array
    return out


class VectorCopies(Held):
    """The vector copies of one connection. Not thread-safe: Memory holds its lock around
    every use, as it does for the connection."""

    def __init__(self, *, vector_copy_min: int, vector_copy_mb: float,
                 blas_limit: Any = contextlib.nullcontext, files: Path | None = None,
                 file_min: int = 0, background_rows: int = 0,
                 opener: Callable[[], apsw.Connection] | None = None) -> None:
        super().__init__()
        self.vector_copy_min = vector_copy_min
        self.files = files  # where copies are written to be mapped by later opens; None: never
        self.file_min = file_min
        self.vector_copy_bytes = int(vector_copy_mb * 2**20)
        self.blas_limit = blas_limit
        self.expected: dict[bytes, int] = {}  # vectors expect() was given -> their row in
        self.queries = np.empty((0, 0), np.float32)  # ... these, unit length
        # id of a part -> (the part, its rows then, each expected vector's nearest rows: one
        # array for all, or {vector's index: its shortlist} for a part ranked with rescore)
        self.batches: dict[int, tuple[VectorCopy, int, np.ndarray | dict[int, np.ndarray]]] = {}
        # A copy of at least background_rows rows is read by a thread on a connection of its
        # own (opener), vec0 answering meanwhile; ready holds it (None: none was made) until a
        # search adopts it.
        self.background_rows = background_rows if opener is not None else 0
        self.opener = opener
        self.ready: dict[tuple[str, str], VectorCopy | None] = {}
        # Inside a write, the rows of (layer, user) written since its copy was last brought up to
        # date, read as they come: (self.transactions then, the copy, those rows).
        self.pending: dict[tuple[str, str], tuple[int, VectorCopy, VectorCopy]] = {}
        # Inside a write, id of a part -> (the part, its rows, the superseded ids, its active
        # flags then): _without's, dropped with pending when the transaction ends.
        self.flags: dict[int, tuple[VectorCopy, int, bytes, np.ndarray]] = {}
        # id of a part -> (the part, what it was ranked for, its batch rows by exact cosine, those)
        self.orders: dict[int, tuple[VectorCopy, tuple, np.ndarray, np.ndarray]] = {}

    def expect(self, vectors: np.ndarray) -> None:
        """Vectors about to be ranked one after another (an extraction batch's atoms, each
        deduplicated against what the user holds). The first ranking of one of them ranks them
        all in one matrix product per part of the copy, which reads the part once for the batch
        instead of once per vector (with rescore, a large part shortlists each vector by its
        codes instead); each vector's answer stays the one ranking it alone gives."""
        vectors = [np.asarray(v, np.float32) for v in vectors]  # [] forgets the last batch
        self.expected = {v.tobytes(): i for i, v in enumerate(vectors)}
        self.orders = {}
        self.queries = np.stack([unit(v) for v in vectors]) if vectors else np.empty((0, 0), np.float32)
        self.batches = {}

    def top_k(self, conn: apsw.Connection, layer: str, user: str, query: np.ndarray, k: int,
              *, active_only: bool = True, rescore: int = 0) -> list[tuple[int, float]] | None:
        """The k nearest of user's vectors in layer as (id, cosine), or None when vec0 should
        answer instead (a small user, a copy too big for the budget). rescore: rank a large
        part by its 1-bit codes first (VectorCopy.top_k); 0: exactly."""
        parts = self._parts(conn, layer, user)
        if parts is None:
            return None
        raw = np.asarray(query, np.float32)
        batched = self.expected.get(raw.tobytes())
        if batched is None and layer == "atoms" and not conn.getautocommit() and len(self.expected) <= 1:
            # Inside a write, an atom's vector is ranked for deduplication, then again (k + 1)
            # for its scenario once stored: as a batch of one, the second scores only the rows
            # the first found (no extraction batch is pending, which this would replace).
            self.expect([raw])
            batched = 0
        query = unit(query)
        with self.blas_limit():
            ranked = [hit for part, active in parts for hit in self._among(
                part, query, k, active if active_only else None, self._batch_rows(part, k, batched, rescore), rescore)]
        return sorted(ranked, key=lambda hit: -hit[1])[:k] if len(parts) > 1 else ranked

    def _among(self, part: VectorCopy, query: np.ndarray, k: int, active: np.ndarray | None,
               among: np.ndarray | None, rescore: int) -> list[tuple[int, float]]:
        """part.top_k for query among a batch ranking's rows, those rows' exact order kept: dedup
        ranks an atom's vector for k neighbours, then scenario placement for k + 1 among the
        same rows, which then only drops the rows superseded since (the order of those left is
        the one ranking them again gives)."""
        if among is None:
            return part.top_k(query, k, active, rescore=rescore)
        key = (part.n, len(among), query.tobytes())
        made = self.orders.get(id(part))
        if made is None or made[0] is not part or made[1] != key:
            rows = np.sort(among)
            scores = np.asarray(part.matrix[rows]) @ query
            order = np.argsort(-scores, kind="stable")  # ties by row, as part.top_k breaks them
            self.orders[id(part)] = made = (part, key, rows[order], scores[order])
        rows, scores = made[2], made[3]
        if active is not None:
            keep = active[rows]
            rows, scores = rows[keep], scores[keep]
        if len(rows) < k:  # too many superseded since: every row, as part.top_k does
            return part.top_k(query, k, active)
        return [(int(part.ids[r]), float(c)) for r, c in zip(rows[:k], scores[:k])]

    def _batch_rows(self, part: VectorCopy, k: int, batched: int | None, rescore: int = 0) -> np.ndarray | None:
        """The rows of part nearest to the expected vector at index batched, from one ranking
        of every expected vector (made on first use); None to rank the vector alone. With
        rescore, a part large enough to be shortlisted keeps each vector's shortlist by 1-bit
        codes (VectorCopy.shortlist) instead of reading every vector: a write ranks each vector
        twice (dedup, then scenario placement), and both then score the same few rows exactly."""
        if batched is None or part.n <= k * BATCH_MARGIN:
            return None
        size = max(rescore * k, MIN_SHORTLIST)
        if rescore and part.n >= SHORTLIST_SHARE * size:
            # Each vector's own shortlist, made at its first ranking: a batch's one product
            # over every vector read the whole part for exact neighbours, several times the
            # cost of a shortlist per vector (bench/results/write_path.json), and the answer
            # is then the one the vector ranked alone gets. Kept for scenario placement's k + 1.
            made = self.batches.get(id(part))
            if made is None or made[0] is not part or made[1] != part.n or not isinstance(made[2], dict):
                self.batches[id(part)] = made = (part, part.n, {})
            rows = made[2].get(batched)
            if rows is None or len(rows) < k:
                rows = made[2][batched] = part.shortlist(self.queries[batched], size, None)
            return rows
        # One ranking serves every k up to the rows it kept (dedup asks for k, scenario
        # placement for k + 1 with the same vector): top_k checks that they hold k active rows.
        made = self.batches.get(id(part))
        if made is None or made[0] is not part or made[1] != part.n or isinstance(made[2], dict) \
                or made[2].shape[1] < k:  # new, the part grew since, or too few rows kept
            scores = self.queries @ np.asarray(part.matrix[: part.n]).T  # (vectors, rows): each row contiguous
            nearest = np.argpartition(-scores, k * BATCH_MARGIN, axis=1)[:, : k * BATCH_MARGIN]
            self.batches[id(part)] = made = (part, part.n, nearest)
        return made[2][batched]

    def sync(self, conn: apsw.Connection, layer: str, user: str) -> None:
        """Bring the user's copy up to date (loading it if the user is large enough) before a
        transaction that will rank against it, since inside one it cannot change. A part large
        enough to be shortlisted has its new rows' 1-bit codes made now too: coding a 100k-row
        copy's codes inside the write cost its first atom ~65 ms."""
        if conn.getautocommit():
            for part, _ in self._parts(conn, layer, user) or ():
                if part.n >= SHORTLIST_SHARE * MIN_SHORTLIST:
                    part._codes()

    def _parts(self, conn: apsw.Connection, layer: str, user: str) -> list[tuple[VectorCopy, np.ndarray | None]] | None:
        """The copies to rank with their active flags: the user's copy brought up to date, or
        inside a transaction, the copy as it was plus the rows written since."""
        key = (layer, user)
        copy, now, settled = self._held(conn, key)
        if settled:
            return None if copy is None else [(part, part.active) for part in copy.parts()]
        if copy is None and key in self.building:
            return None  # being read in the background: vec0 answers meanwhile
        if copy is None and key in self.ready:
            copy = self.ready.pop(key)
            if copy is None:  # none could be made: vec0's until the file changes
                self.small[key] = now
                return None
            self.copies[key] = copy  # brought up to date below, like any copy whose stamp moved
            self._evict()
        if not connection.has_vectors(conn):
            return None
        epoch = connection.get_meta(conn, "vectors_epoch")
        if not conn.getautocommit():
            # The transaction's writes may yet roll back (and their ids be reused): read them
            # beside the copy, never into it; only those new since the last look (re-reading
            # all of them at each look cost 2-4 ms an atom over a long transaction).
            if copy is None or copy.epoch != epoch:
                return None
            since = self._since(conn, key, copy)
            self._read_rows(conn, layer, user, since, after=since.last_id if since.n else copy.last_id,
                            held=copy.rows)
            superseded = self._superseded(conn, layer, user)
            return [(part, self._without(part, superseded) if layer == "atoms" else None)
                    for part in [*copy.parts(), since]]
        if copy is None or copy.epoch != epoch:
            self.copies.pop(key, None)
            copy = self._load(conn, layer, user, epoch, now)
            if copy is None:
                return None
        else:
            self._catch_up(conn, layer, user, copy)
        copy.stamp = now
        return [(part, part.active) for part in copy.parts()]

    def _since(self, conn: apsw.Connection, key: tuple[str, str], copy: VectorCopy) -> VectorCopy:
        """The rows of key read beside copy so far in this transaction (empty in a new one)."""
        found = self.pending.get(key)
        if found is not None and found[0] == self.transactions and found[1] is copy:
            return found[2]
        self._watch(conn)  # before the transaction ends: its end makes these rows stale
        since = VectorCopy.empty(copy.matrix.shape[1])
        self.pending[key] = (self.transactions, copy, since)
        return since

    def _without(self, part: VectorCopy, superseded: np.ndarray) -> np.ndarray:
        """part.without(superseded), kept while neither changes: inside a write each atom is
        ranked twice (dedup, then scenario placement) and few atoms supersede another, so the
        flags of a large part, built over all of its rows, are most often the last ones."""
        key = superseded.tobytes()
        made = self.flags.get(id(part))
        if made is None or made[0] is not part or made[1] != part.n or made[2] != key:
            self.flags[id(part)] = made = (part, part.n, key, part.without(superseded))
        return made[3]

    def _committing(self, conn: apsw.Connection | None) -> bool:
        self.pending.clear()
        self.flags.clear()
        return super()._committing(conn)

    def _rolled_back(self, conn: apsw.Connection | None) -> None:
        self.pending.clear()
        self.flags.clear()
        super()._rolled_back(conn)

    def _load(self, conn: apsw.Connection, layer: str, user: str, epoch: str | None,
              now: tuple[int, int]) -> VectorCopy | None:
        table, _, _ = LAYERS[layer]
        count, upto = conn.execute(f'select count(*), coalesce(max("id"), 0) from "{table}" where "user" = ?',
                                   (user,)).fetchone()
        dim = connection.embedder_dim(conn) or 0
        base = None
        if self.files is not None and self.vector_copy_bytes and count >= max(self.file_min, self.vector_copy_min, 1) \
                and dim:
            base = self._mapped(conn, layer, user, epoch, count, upto, dim)
        if base is None and (count < self.vector_copy_min or not dim or count * dim * 4 > self.vector_copy_bytes):
            self.small[(layer, user)] = now
            return None
        if base is None and self.background_rows and count >= self.background_rows:
            self._build_in_background((layer, user))
            return None
        copy = VectorCopy.empty(dim, capacity=0 if base else count + count // SPARE, epoch=epoch, stamp=now, base=base)
        self._catch_up(conn, layer, user, copy, held=0 if base else count)
        if base is not None and copy.n > max(self.file_min, base.n // 4):
            self._refresh_file(conn, layer, user, copy)
        self.copies[(layer, user)] = copy
        self._evict()
        return copy

    def _build_in_background(self, key: tuple[str, str]) -> None:
        """Read the copy of key on a connection of its own (self.ready when done). Reading a
        user's 333k turn vectors takes a second or more: the first search asks vec0 instead."""

        def build() -> None:
            helper = VectorCopies(vector_copy_min=self.vector_copy_min, vector_copy_mb=self.vector_copy_bytes / 2**20)
            helper.stopping = self.stopping
            try:
                conn = self.opener()
                try:
                    helper._parts(conn, *key)
                finally:
                    conn.close()
                built = helper.copies.get(key)
                if built is not None:
                    built.stamp = (-1, -1)  # another connection's stamp: never current here
                self.ready[key] = built
            except Exception as exc:  # stopped, the file gone: vec0 keeps answering
                log.debug("memdb: vector copy of %s not read: %s", key, exc)
                self.ready[key] = None
            finally:
                self.building.pop(key, None)

        self.building[key] = threading.Thread(target=build, name="memdb-vector-copy", daemon=True)

    def _catch_up(self, conn: apsw.Connection, layer: str, user: str, copy: VectorCopy,
                  held: int | None = None) -> None:
        self._read_rows(conn, layer, user, copy, after=copy.last_id, held=copy.rows if held is None else held)
        if layer == "atoms":
            superseded = self._superseded(conn, layer, user)
            for part in copy.parts():
                part.active = part.without(superseded)

    def _mapped(self, conn: apsw.Connection, layer: str, user: str, epoch: str | None, count: int, upto: int,
                dim: int) -> VectorCopy | None:
        """The user's copy mapped from its file, written first if there is none still valid."""
        path = copyfiles.path_for(self.files, layer, user)
        meant = self._meant(conn, epoch, dim)
        found = copyfiles.read(path)
        if found is not None:
            ids, matrix, header = found
            if {key: header.get(key) for key in meant} == meant and \
                    self._rows_upto(conn, layer, user, int(header.get("upto", -1))) == header.get("rows"):
                return VectorCopy(ids=ids, matrix=matrix, n=len(ids), epoch=epoch)
            copyfiles.remove(path)  # stale: it may hold what has since been forgotten

        def from_sqlite(writer: copyfiles.Writer) -> int:
            into = VectorCopy(ids=writer.ids, matrix=writer.matrix)
            self._read_rows(conn, layer, user, into, after=0, held=count, upto=upto)
            return into.n if into.ids is writer.ids else -1  # -1: it outgrew the file (cannot: ids grow)

        if not self._write_file(conn, path, meant, count, upto, from_sqlite):
            return None
        found = copyfiles.read(path)
        return None if found is None else VectorCopy(ids=found[0], matrix=found[1], n=len(found[0]), epoch=epoch)

    def _refresh_file(self, conn: apsw.Connection, layer: str, user: str, copy: VectorCopy) -> None:
        """Write the copy's file again with the rows read since it was written, once they are
        many: else every new process reads them out of SQLite again. This process keeps its copy."""
        upto = copy.last_id

        def from_copy(writer: copyfiles.Writer) -> int:
            at = 0
            for part in copy.parts():
                writer.ids[at : at + part.n] = part.ids[: part.n]
                writer.matrix[at : at + part.n] = part.matrix[: part.n]
                at += part.n
            return at

        path = copyfiles.path_for(self.files, layer, user)
        self._write_file(conn, path, self._meant(conn, copy.epoch, copy.matrix.shape[1]),
                         self._rows_upto(conn, layer, user, upto), upto, from_copy, rows=copy.rows)

    @staticmethod
    def _meant(conn: apsw.Connection, epoch: str | None, dim: int) -> dict:
        """What a copy file must have been written for to be used."""
        return {"epoch": epoch, "embedder": connection.get_meta(conn, "embedder_name"), "dim": dim}

    def _write_file(self, conn: apsw.Connection, path: Path, meant: dict, count: int, upto: int,
                    fill: Callable[[copyfiles.Writer], int], rows: int | None = None) -> bool:
        """Write the copy file of a user's count rows up to id upto, its vectors put in place by
        fill (which returns how many it put); whether it was written and is still valid."""
        # A row stored without a vector may get one later, below the copy's last id, where no
        # catch-up looks: a file is written only when every row has its vector (fill or rows
        # says how many have one).
        if rows is not None and rows != count:
            return False
        try:
            writer = copyfiles.Writer(path, count, int(meant["dim"]))
            try:
                if fill(writer) != count:
                    writer.abandon()
                    return False
                writer.commit(count, {**meant, "upto": upto, "rows": count})
            except BaseException:
                writer.abandon()
                raise
        except OSError as exc:  # a read-only directory, a full disk: the copy stays in memory
            log.debug("memdb: vector copy file %s not written: %s", path, exc)
            return False
        # A forget that committed while the file was written may have deleted it before the
        # rename: look again, and delete it if so (a forget after this look deletes it itself).
        if connection.get_meta(conn, "vectors_epoch") != meant["epoch"]:
            copyfiles.remove(path)
            return False
        return True

    @staticmethod
    def _rows_upto(conn: apsw.Connection, layer: str, user: str, upto: int) -> int:
        table, _, _ = LAYERS[layer]
        return conn.execute(f'select count(*) from "{table}" where "user" = ? and "id" <= ?', (user, upto)).fetchone()[0]

    def _read_rows(self, conn: apsw.Connection, layer: str, user: str, into: VectorCopy, after: int,
                   held: int, upto: int | None = None) -> None:
        """Append the user's vectors with ids above after, up to upto (held: how many the user had)."""
        table, vec_table, key = LAYERS[layer]
        last = conn.execute(f'select coalesce(max("id"), 0) from "{table}"').fetchone()[0]
        if held >= chunks.MIN_ROWS and into.n == 0 and after == 0:
            # A large user read whole: vec0's chunks in order, a chunk a row (chunks.py).
            found = chunks.read(conn, vec_table, user, into.matrix.shape[1], after, last if upto is None else upto,
                                held, lambda ids, vectors: self._append(into, ids, vectors))
            if found is not None:
                return
            into.n = 0  # not the layout chunks.py knows: row by row
        # Walk the ids above `after` when they are few (a file of one user, or a user who wrote
        # most of what came since); else the user's index, since other users' rows came
        # between ("+" keeps SQLite off the index in the first case). Then one vec0 point
        # lookup per row.
        by_id = after > 0 and last - after <= 4 * held
        where = 't."id" > ?1 and +t."user" = ?2' if by_id else 't."user" = ?2 and t."id" > ?1'
        cursor = conn.execute(
            f'select t."id", v."embedding" from "{table}" t join "{vec_table}" v on v."{key}" = t."id" '
            f'where {where} and t."id" <= ?3 order by t."id"',
            (after, user, last if upto is None else upto),
        )
        while rows := list(itertools.islice(cursor, READ_ROWS)):  # bounded: no second copy in memory
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
            self._append(into, ids, vectors)

    def _append(self, into: VectorCopy, ids: np.ndarray, vectors: np.ndarray) -> None:
        if self.stopping.is_set():  # the Memory is closing: a background read ends here
            raise RuntimeError("stopped")
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
