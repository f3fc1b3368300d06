"""In-memory keyword copies: a large user's FTS postings, scored by bm25 in numpy.

FTS5's bm25 first counts every posting of every query term: in a file of one user holding
100k atoms, a term in a fifth of the rows costs 20k postings read and scored through the
auxiliary-function interface (bench/results/scale_postings.json, budget 0); in a file of
many users it reads every user's postings of the term and of the user's tag. A user with at
least `keyword_copy_min` rows in a layer gets a copy of their postings in memory instead: per
term, the rows holding it and its column-weighted count there, and per row its length. A query
then costs a few array operations per term.
A posting is 6 bytes once sorted (a row index and a kind: the pair of counts it stands for,
kept once per copy; rows grouped per term), 10 in the unsorted tail: a 100k-atom user's copy
is ~20 MB, not the ~70 MB of flat (term, row, float counts) rows, and a build's peak about
twice that, as the tail is merged in as it grows rather than every posting sorted at once.

Scores are FTS5's bm25 (k1 1.2, b 0.75, the same column weights, idf floored at 1e-6), so in a
file of one user the ranking is the one FTS5 gives. The statistics (row count, average length,
rows per term) are the user's own: in a file of many users FTS5 uses the whole file's, so there
copies serve only when `shared` (Settings.keyword_copy_shared) asks for per-user statistics.
Text is tokenized by FTS5's own tokenizer over the table's stored content, so a row's tokens
are exactly those FTS5 indexed.

A copy is checked as the vector copies are (copies.Held): when the file may have changed, the
user's (id, version) pairs are read again, where an atom's version is its "seen" count (a merge,
the one path that rewrites an atom's FTS row besides forget, bumps it); a forgotten turn, which
rewrites the source words of the atoms it fed, forces a reload of the atoms' copy. New and
changed rows are tokenized into a tail that is folded into the sorted postings once it grows;
removed and rewritten rows are dropped by a live flag. Inside a transaction a search is FTS5's
(None), as it sees the uncommitted rows; deduplication's keyword candidates (dedup: FTS5's
rank, every column weighing 1) are the copy's, kept exact inside the write by the rows absorb
tells it of (wrote), undone by a rollback and kept by a commit (SQLite's hooks), so the next
write finds the copy exact without reading the user's rows again.

A copy of a user with at least `background_rows` rows (tokenizing 1M atoms takes ~45 s) is built
by a thread on a connection of its own, given an opener; FTS5 answers until it is ready. The
search that finds it ready adopts it (its term ids made this instance's) and brings it up to
date like any copy whose stamp moved: rows written, merged or forgotten meanwhile are read again
or dropped, so nothing forgotten survives in it.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import apsw
import numpy as np

from .. import codec, text
from ..db.rows import EACH, json_array
from . import fts
from .copies import Held, stamp

log = logging.getLogger("memdb")

K1, B = 1.2, 0.75  # FTS5's bm25 constants (fts5_aux.c)
# Per layer: the FTS table, the rows' table, and what moves when a row's FTS text is rewritten.
LAYERS = {"atoms": ("atoms_fts", "atoms", '"seen"'), "turns": ("turns_fts", "turns", "0")}
READ_ROWS = 4096  # rows tokenized at a time
TAIL_FRACTION = 0.125  # the unsorted tail is folded in when it holds this share of the postings
MARKER = "zqxjcellzqxj"  # ends each cell when rows are tokenized together (a token of its own)
DEAD_FRACTION = 0.25  # a copy is read afresh once this share of its rows were removed or rewritten
MAX_VOCABULARY = 2_000_000  # shared term ids kept before every copy is dropped and rebuilt
MAX_TOKENIZED = 100_000  # query terms whose tokens are remembered before they are all forgotten
KINDS_UINT16 = 2**16  # kinds of postings (count pairs) a copy's uint16 kinds can tell apart


@dataclass
class Postings:
    """Unsorted (term id, row index, kind) rows: a copy's tail, or rows just read. A kind
    stands for a (weighted count, plain count) pair in the copy's table (KeywordCopy.kinds):
    postings repeat a few hundred pairs, so a posting costs 10 bytes, not 20."""

    terms: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    kinds: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint16))

    FIELDS = ("terms", "rows", "kinds")

    def __len__(self) -> int:
        return len(self.terms)

    def extend(self, other: Postings) -> None:
        if not len(self):
            for name in self.FIELDS:
                setattr(self, name, getattr(other, name))
            return
        for name in self.FIELDS:  # a kind past uint16's range makes the tail's kinds uint32
            setattr(self, name, np.concatenate([getattr(self, name), getattr(other, name)]))

    def truncate(self, n: int) -> None:
        """Keep the first n (a rolled-back transaction's rows leave the tail)."""
        for name in self.FIELDS:
            setattr(self, name, getattr(self, name)[:n])

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, name).nbytes for name in self.FIELDS)


@dataclass
class Sorted:
    """Postings grouped by term (compressed sparse rows): the rows and kinds of terms[i] are
    rows[starts[i]:starts[i + 1]], in the order they were added. Only the terms a copy holds
    have an entry, as the vocabulary is shared by every copy (a file of many users' words).
    6 bytes a posting: the term ids a flat array would repeat per posting are kept per term."""

    terms: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))  # ascending
    starts: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    kinds: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint16))

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def nbytes(self) -> int:
        return self.terms.nbytes + self.starts.nbytes + self.rows.nbytes + self.kinds.nbytes

    def block(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows holding term and their kinds (views)."""
        i = int(np.searchsorted(self.terms, term))
        if i == len(self.terms) or self.terms[i] != term:
            return self.rows[:0], self.kinds[:0]
        lo, hi = self.starts[i], self.starts[i + 1]
        return self.rows[lo:hi], self.kinds[lo:hi]

    def merged(self, tail: Postings) -> Sorted:
        """These postings with the tail's, each term's after its own (one pass over the arrays:
        the peak is the old and the new arrays, not a sort of them all)."""
        order = np.argsort(tail.terms, kind="stable")
        terms = tail.terms[order]
        # A tail posting's place: after every old posting of a term up to its own, and after the
        # tail postings before it.
        at = self.starts[np.searchsorted(self.terms, terms, side="right")] + np.arange(len(terms))
        united = np.union1d(self.terms, terms).astype(np.int32)
        starts = self.starts[np.searchsorted(self.terms, united)] + np.searchsorted(terms, united)
        n = len(self.rows) + len(terms)
        old = np.ones(n, bool)
        old[at] = False
        rows = np.empty(n, np.int32)
        rows[at], rows[old] = tail.rows[order], self.rows
        kinds = np.empty(n, np.result_type(self.kinds, tail.kinds))
        kinds[at], kinds[old] = tail.kinds[order], self.kinds
        return Sorted(united, np.append(starts, n).astype(np.int64), rows, kinds)

    def flat_terms(self) -> np.ndarray:
        """Each posting's term id (a renumbering of the terms needs them per posting)."""
        return np.repeat(self.terms, np.diff(self.starts))


@dataclass
class KeywordCopy:
    """One user's postings of one layer: rows in the order read, each with its id, version,
    token count and a live flag (False once removed or rewritten). The rows' arrays keep room
    to grow (an eighth), so a write appending a row does not copy them all."""

    _ids: np.ndarray
    _versions: np.ndarray
    _lengths: np.ndarray  # float64: tokens in the row, every column
    _live: np.ndarray
    sorted: Sorted
    tail: Postings
    n: int = 0  # rows used
    top: int = 0  # the highest id ever added
    stamp: tuple[int, int] = (0, 0)
    turns: tuple[int, int] = (0, 0)  # the user's turns when last read: how many, the highest id
    _norm: tuple[int, float] | None = None  # _statistics(), kept as rows come and go
    # The postings' kinds: kind i is a row holding the term weighted[i] times with the column
    # weights (float64, summed as FTS5 sums), plain[i] times with every column weighing 1.
    weighted: np.ndarray = field(default_factory=lambda: np.empty(0))
    plain: np.ndarray = field(default_factory=lambda: np.empty(0))
    _kind_of: dict[tuple[float, float], int] = field(default_factory=dict)

    @classmethod
    def empty(cls, **fields: Any) -> KeywordCopy:
        return cls(_ids=np.empty(0, np.int64), _versions=np.empty(0, np.int64), _lengths=np.empty(0),
                   _live=np.empty(0, bool), sorted=Sorted(), tail=Postings(), **fields)

    @property
    def ids(self) -> np.ndarray:
        return self._ids[: self.n]

    @property
    def versions(self) -> np.ndarray:
        return self._versions[: self.n]

    @property
    def lengths(self) -> np.ndarray:
        return self._lengths[: self.n]

    @property
    def live(self) -> np.ndarray:
        return self._live[: self.n]

    @property
    def nbytes(self) -> int:
        rows = self._ids.nbytes + self._versions.nbytes + self._lengths.nbytes + self._live.nbytes
        return rows + self.sorted.nbytes + self.tail.nbytes + self.weighted.nbytes + self.plain.nbytes

    def kinds(self, weighted: np.ndarray, plain: np.ndarray) -> np.ndarray:
        """The kind of each (weighted count, plain count) pair, new pairs added to the table;
        uint16 while the table fits it (it holds a few hundred pairs), else uint32."""
        pairs, inverse = np.unique(weighted + 1j * plain, return_inverse=True)  # complex: both exact
        known = len(self._kind_of)
        ids = np.array([self._kind_of.setdefault((p.real, p.imag), len(self._kind_of)) for p in pairs.tolist()],
                       np.int64)
        if len(self._kind_of) > known:
            added = sorted(self._kind_of.items(), key=lambda item: item[1])[known:]
            self.weighted = np.append(self.weighted, [w for (w, _), _ in added])
            self.plain = np.append(self.plain, [c for (_, c), _ in added])
        return ids[inverse.reshape(-1)].astype(np.uint16 if len(self._kind_of) <= KINDS_UINT16 else np.uint32)

    def add(self, ids: np.ndarray, versions: np.ndarray, lengths: np.ndarray, postings: Postings) -> None:
        """Append rows (postings' row indices counted from 0 for the first of them)."""
        postings.rows = postings.rows + self.n
        need = self.n + len(ids)
        if need > len(self._ids):
            capacity = need + need // 8 + 64
            for name in ("_ids", "_versions", "_lengths", "_live"):
                old = getattr(self, name)
                grown = np.zeros(capacity, old.dtype)
                grown[: self.n] = old[: self.n]
                setattr(self, name, grown)
        self._ids[self.n : need], self._versions[self.n : need] = ids, versions
        self._lengths[self.n : need], self._live[self.n : need] = lengths, True
        self.n = need
        if len(ids):
            self.top = max(self.top, int(ids.max()))
        if self._norm is not None:
            self._norm = (self._norm[0] + len(ids), self._norm[1] + float(lengths.sum()))
        self.tail.extend(postings)

    def kill(self, rows: np.ndarray) -> None:
        """Mark live rows dead (removed, or rewritten and added again)."""
        rows = rows[self.live[rows]]
        self._live[rows] = False
        if self._norm is not None:
            self._norm = (self._norm[0] - len(rows), self._norm[1] - float(self.lengths[rows].sum()))

    def truncate(self, n: int) -> None:
        """Keep the first n rows (a rolled-back transaction's rows leave)."""
        self.n = n
        self._norm = None

    def fold(self, *, whole: bool = False) -> None:
        """Merge the tail into the sorted postings once it is too long to scan per term (whole:
        any tail, as a new copy's last rows: each query term scans the tail)."""
        if len(self.tail) > (0 if whole else TAIL_FRACTION * len(self.sorted)):
            self.sorted = self.sorted.merged(self.tail)
            self.tail = Postings()

    def postings(self, term: int, plain: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The live rows holding term and its weighted count in each (plain: every column 1)."""
        rows, kinds = self.sorted.block(term)
        if len(self.tail):
            at = self.tail.terms == term
            rows = np.concatenate([rows, self.tail.rows[at]])
            kinds = np.concatenate([kinds, self.tail.kinds[at]])
        keep = self._live[rows]
        return rows[keep], (self.plain if plain else self.weighted)[kinds[keep]]

    def _statistics(self) -> tuple[int, float]:
        """Live rows and the average row length (bm25's avgdl)."""
        if self._norm is None:
            live = self.live
            self._norm = (int(live.sum()), float(self.lengths[live].sum()))
        count, total = self._norm
        return count, (total / count if count else 1.0)

    def common(self, terms: list[int | None], share: float, least_rows: int) -> set[int]:
        """The terms held by more than share of the live rows, once there are least_rows of them
        (fts.common_terms' rule, without a count query per term)."""
        live, _ = self._statistics()
        if share >= 1 or live < least_rows:
            return set()
        return {t for t in terms if t is not None and len(self.postings(t)[0]) > int(share * live)}

    def top_k(self, terms: list[int | None], k: int, *, plain: bool = False) -> list[tuple[int, float]]:
        """(id, bm25) of the k best-scoring live rows holding any term, best first; ties by id.
        A term is counted as often as it is given, as FTS5 scores each phrase of an OR.
        plain: every column weighs 1 (FTS5's rank), not the search's column weights."""
        live, average = self._statistics()
        if not live:
            return []
        # Only the matched rows are scored (an array over every row cost more at 1M rows); each
        # row's terms are summed in the order given, as FTS5 sums its phrases.
        matched, parts = [], []
        for term in terms:
            if term is None:
                continue
            rows, counts = self.postings(term, plain)
            if not len(rows):
                continue
            idf = math.log((live - len(rows) + 0.5) / (len(rows) + 0.5))
            idf = idf if idf > 0 else 1e-6
            norm = K1 * (1 - B + B * self._lengths[rows] / average)  # bm25's k1 (1 - b + b dl/avgdl)
            matched.append(rows)
            parts.append(idf * (K1 + 1) * counts / (counts + norm))  # a row once per term
        if not matched:
            return []
        found, at = np.unique(np.concatenate(matched), return_inverse=True)
        scores = np.bincount(at, weights=np.concatenate(parts), minlength=len(found))
        if len(found) > k:
            best = np.argpartition(-scores, k - 1)[:k]
            found, scores = found[best], scores[best]
        # By score, then id, for a stable answer (a rewritten row comes again at a later index).
        order = np.lexsort((self._ids[found], -scores))
        return [(int(self._ids[found[i]]), float(scores[i])) for i in order]


@dataclass
class Overlay:
    """What a write transaction changed in a copy (KeywordCopies.wrote), so that a rollback
    takes it out again: the copy's rows and tail postings when it began, and the rows it marked
    dead since. committed: the stamp the copy has once the commit went through, and probe:
    the (id, version) of the last row written, which is in the file only if it did."""

    copy: KeywordCopy
    conn: weakref.ref[apsw.Connection]
    rows: int
    tail: int
    killed: list[int] = field(default_factory=list)
    committed: tuple[int, int] | None = None
    probe: tuple[int, int] | None = None

    def undo(self) -> None:
        copy = self.copy
        copy.truncate(self.rows)
        copy.live[[i for i in self.killed if i < self.rows]] = True
        copy.tail.truncate(self.tail)


def _turns_held(conn: apsw.Connection, user: str) -> tuple[int, int]:
    return conn.execute('select count(*), coalesce(max("id"), 0) from "turns" where "user" = ?', (user,)).fetchone()


def _turn_forgotten(conn: apsw.Connection, user: str, then: tuple[int, int], now: tuple[int, int]) -> bool:
    # Turn ids are never reused: fewer turns than were held plus those written since means
    # some were deleted.
    since = conn.execute('select count(*) from "turns" where "user" = ? and "id" > ?', (user, then[1])).fetchone()[0]
    return then[0] + since != now[0]


class KeywordCopies(Held):
    """The keyword copies of one connection, with one vocabulary (term -> id) they share. Not
    thread-safe: Memory holds its lock around every use, as it does for the connection."""

    def __init__(self, *, keyword_copy_min: int, keyword_copy_mb: float,
                 atom_columns: tuple[float, ...], turn_columns: tuple[float, ...], shared: bool = False,
                 background_rows: int = 0, opener: Callable[[], apsw.Connection] | None = None) -> None:
        super().__init__()
        self.keyword_copy_min = keyword_copy_min
        self.shared = shared
        self.keyword_copy_mb = keyword_copy_mb
        self.keyword_copy_bytes = int(keyword_copy_mb * 2**20)
        self.weights = {"atoms": np.array(atom_columns), "turns": np.array(turn_columns)}
        self.vocabulary: dict[str, int] = {}
        self._tokenizer: Any = None
        self._tokenized: dict[str, list[str]] = {}  # query term -> its tokens (_query_tokens)
        self.background_rows = background_rows if opener is not None else 0
        self.opener = opener  # a new connection to the same file, for building in the background
        # Built in the background, not yet adopted: the copy (None: none could be made) and the
        # vocabulary its term ids are of.
        self.ready: dict[tuple[str, str], tuple[KeywordCopy | None, dict[str, int]]] = {}
        self.overlays: dict[tuple[str, str], Overlay] = {}  # copies a write transaction changes

    def sync(self, conn: apsw.Connection, layer: str, user: str) -> None:
        """Bring the user's copy up to date before a write transaction whose deduplication will
        rank against it (dedup), as a search would; outside a transaction only."""
        if conn.getautocommit() and self.keyword_copy_bytes and fts.sole_user(conn, layer, user):
            self._load_tokenizer(conn)
            self._current(conn, layer, user)

    def dedup(self, conn: apsw.Connection, user: str, terms: list[str], k: int) -> list[int] | None:
        """The ids of the user's k best atoms for terms by FTS5's rank (bm25 with every column
        weighing 1), superseded ones left out, best first: the keyword candidates of
        deduplication (lifecycle/absorb.py), or None when FTS5 must answer (another user in
        the file, whose rows count in FTS5's statistics; no copy; a phrase).

        Inside a write transaction the copy is used only if it was exact when the transaction
        began; the rows absorb writes then reach it through wrote(), and a rollback takes them
        out again. FTS5's query took 6-9 ms an atom at 100k atoms (bench/results/write_path.json)."""
        if not self.keyword_copy_bytes or not fts.sole_user(conn, "atoms", user):
            return None
        self._load_tokenizer(conn)
        key = ("atoms", user)
        # Taken before looking at the terms: inside a write, the copy follows the rows written
        # only from its first use, and an atom whose terms FTS5 must rank (none left after the
        # postings budget, a phrase), written first, left the copy behind for the rest of the
        # transaction and read again in full after it.
        copy = self._current(conn, *key) if conn.getautocommit() else self._in_transaction(conn, key)
        if copy is None or not terms:
            return None
        tokens = self._query_tokens(terms)
        if any(len(t) > 1 for t in tokens):
            return None
        ids = [self.vocabulary.get(t[0]) for t in tokens if t]
        want = 4 * k
        while True:  # superseded atoms count in the statistics but are not candidates
            ranked = copy.top_k(ids, want, plain=True)
            found = [i for i, _ in ranked]
            gone = {r[0] for r in conn.execute(
                f'select "id" from "atoms" where "id" in {EACH} and "status" = ?',
                (json_array(found), codec.STATUSES["superseded"]))}
            kept = [i for i in found if i not in gone]
            if len(kept) >= k or len(ranked) < want:
                return kept[:k]
            want *= 4

    def counts(self, conn: apsw.Connection, user: str, terms: list[str], cap: int) -> list[int] | None:
        """How many of the user's atoms hold each term, up to cap + 1: what fts.TermCounts counts
        with FTS5 (every row of the file's FTS table) when the user is the file's only one; None
        when FTS5 must count (another user, no exact copy, a term of several tokens)."""
        if not self.keyword_copy_bytes or not fts.sole_user(conn, "atoms", user):
            return None
        self._load_tokenizer(conn)
        tokens = self._query_tokens(terms)
        if any(len(t) != 1 for t in tokens):
            return None
        key = ("atoms", user)
        copy = self._current(conn, *key) if conn.getautocommit() else self._in_transaction(conn, key)
        if copy is None:
            return None
        ids = [self.vocabulary.get(t[0]) for t in tokens]
        return [0 if i is None else min(len(copy.postings(i)[0]), cap + 1) for i in ids]

    def wrote(self, conn: apsw.Connection, layer: str, user: str, ids: list[int]) -> None:
        """Rows of user that absorb inserted or rewrote (a merge) inside the write transaction:
        into the copy the transaction ranks against, if it has one (dedup began one)."""
        overlay = self.overlays.get((layer, user))
        if overlay is None or overlay.committed is not None or conn.getautocommit():
            return
        copy = overlay.copy
        _, table, version = LAYERS[layer]
        found = conn.execute(f'select "id", {version} from "{table}" where "id" in {EACH} order by "id"',
                             (json_array(ids),)).fetchall()
        if not found:
            return
        ids_now = np.fromiter((r[0] for r in found), np.int64, len(found))
        versions = np.fromiter((r[1] for r in found), np.int64, len(found))
        held = ids_now[ids_now <= copy.top]  # rewritten (a merge): their old postings die; new ids were never held
        # A merge rewrites one atom: its rows found by comparing ids (np.isin sorted all 100k
        # ids of the copy: ~1 ms a merge).
        old = np.flatnonzero(copy.live & (copy.ids[:, None] == held).any(axis=1)) if 0 < len(held) <= 4 else \
            np.flatnonzero(copy.live & np.isin(copy.ids, held)) if len(held) else np.empty(0, np.int64)
        copy.kill(old)
        overlay.killed.extend(old.tolist())
        copy.add(*self._read(conn, layer, copy, ids_now, versions))  # not folded: a rollback truncates the tail
        overlay.probe = (int(ids_now[-1]), int(versions[-1]))

    def _in_transaction(self, conn: apsw.Connection, key: tuple[str, str]) -> KeywordCopy | None:
        """The copy of key inside a write transaction: the one this transaction changes, or one
        exact at this transaction's start (its stamp has not moved), which it begins changing."""
        overlay = self.overlays.get(key)
        if overlay is not None and overlay.committed is None:
            return overlay.copy if self.copies.get(key) is overlay.copy else None
        self._settle(conn)
        copy = self.copies.get(key)
        if copy is None or copy.stamp != stamp(conn):
            return None
        self._watch(conn)
        self.overlays[key] = Overlay(copy, weakref.ref(conn), copy.n, len(copy.tail))
        return copy

    def _committing(self, conn: apsw.Connection | None) -> bool:
        # Inside SQLite's commit: no SQL here. The copy's stamp after this commit is its own
        # (this connection's commits do not move its data_version) with the changes counted
        # now; _settle confirms the commit went through before the copy takes it.
        for overlay in self.overlays.values():
            if overlay.committed is None and conn is not None and overlay.conn() is conn:
                overlay.committed = (overlay.copy.stamp[0], conn.total_changes())
        return super()._committing(conn)

    def _rolled_back(self, conn: apsw.Connection | None) -> None:
        for key, overlay in list(self.overlays.items()):
            if overlay.committed is None and overlay.conn() is conn:
                overlay.undo()
                del self.overlays[key]
        super()._rolled_back(conn)

    def _settle(self, conn: apsw.Connection) -> None:
        """Copies a committed transaction changed: exact as of its commit if the last row it
        wrote is in the file as written (else the commit failed: its changes are undone)."""
        for key, overlay in list(self.overlays.items()):
            owner = overlay.conn()
            if owner is not None and (owner is not conn or overlay.committed is None and not conn.getautocommit()):
                continue  # another connection's, or this transaction's own
            del self.overlays[key]
            if owner is None:  # its connection is gone: what it committed is read again
                overlay.undo()
                continue
            _, table, version = LAYERS[key[0]]
            held = None if overlay.probe is None else conn.execute(
                f'select {version} from "{table}" where "id" = ?', (overlay.probe[0],)).fetchone()
            if overlay.committed is not None and held is not None and held[0] == overlay.probe[1]:
                overlay.copy.stamp = overlay.committed
                overlay.copy.fold()
            else:
                overlay.undo()

    def top_k(self, conn: apsw.Connection, layer: str, user: str, terms: list[str],
              k: int, *, common: tuple[float, int] | None = None) -> list[tuple[int, float]] | None:
        """(id, bm25) of the user's k best rows in layer for the query terms (as fts.query_terms
        gives them), or None when FTS5 should answer (a small user, a copy over budget, inside
        a transaction, a term that FTS5 would read as a phrase of several tokens, another user
        in the file unless shared). common = (share, least_rows): terms in more than share of
        the user's rows are left out, as fts.common_terms leaves them, counted in the copy."""
        if not self.keyword_copy_bytes or not conn.getautocommit():
            return None
        if not self.shared and not fts.sole_user(conn, layer, user):
            self.copies.pop((layer, user), None)  # others came, or the user was forgotten
            return None
        self._load_tokenizer(conn)
        tokens = self._query_tokens(terms)
        if any(len(t) > 1 for t in tokens):
            return None  # a phrase: FTS5 checks positions, which a copy does not keep
        copy = self._current(conn, layer, user)  # first: it may bring the terms' ids
        if copy is None:
            return None
        ids = [self.vocabulary.get(t[0]) for t in tokens if t]
        skip = copy.common(ids, *common) if common is not None else set()
        return copy.top_k([t for t in ids if t not in skip], k)

    def _query_tokens(self, terms: list[str]) -> list[list[str]]:
        """Each query term's tokens as FTS5 reads it, remembered: an absorbed atom's terms are
        tokenized for its counts and again for its candidates, and recur across atoms."""
        out = []
        for term in terms:
            found = self._tokenized.get(term)
            if found is None:
                if len(self._tokenized) >= MAX_TOKENIZED:
                    self._tokenized.clear()
                found = self._tokenized[term] = self._tokenizer(
                    text.quote(term).encode(), apsw.FTS5_TOKENIZE_QUERY, None, include_offsets=False,
                    include_colocated=False)
            out.append(found)
        return out

    def _load_tokenizer(self, conn: apsw.Connection) -> None:
        if self._tokenizer is None:  # the tokenizer schema.sql declares for both FTS tables
            self._tokenizer = conn.fts5_tokenizer("porter", ["unicode61", "remove_diacritics", "2"])

    def _current(self, conn: apsw.Connection, layer: str, user: str) -> KeywordCopy | None:
        key = (layer, user)
        if self.overlays:
            self._settle(conn)
        copy, now, settled = self._held(conn, key)
        if settled:
            return copy
        if copy is None and key in self.ready:
            copy = self._adopt(key)
            if copy is None:  # none could be made (over budget): FTS5's until the file changes
                self.small[key] = now
                return None
        elif key in self.building:
            return None
        turns = _turns_held(conn, user)
        if copy is not None and layer == "atoms" and _turn_forgotten(conn, user, copy.turns, turns):
            self.copies.pop(key, None)  # its atoms' source words were re-indexed without the turn
            copy = None
        _, table, version = LAYERS[layer]
        if copy is None and self.background_rows and conn.execute(  # counted: reading 1M ids took ~1 s
                f'select count(*) from "{table}" where "user" = ?', (user,)).fetchone()[0] >= self.background_rows:
            self._build_in_background(key)
            return None
        rows = conn.execute(f'select "id", {version} from "{table}" where "user" = ? order by "id"', (user,)).fetchall()
        if len(rows) < self.keyword_copy_min:  # also a user forgotten: their words leave memory
            self.copies.pop(key, None)
            self.small[key] = now
            return None
        if len(self.vocabulary) > MAX_VOCABULARY:
            self.vocabulary.clear()
            self.copies.clear()
            copy = None
        copy = copy or KeywordCopy.empty()
        self._catch_up(conn, layer, copy, rows)
        if (~copy.live).sum() > DEAD_FRACTION * len(copy.live):  # old postings of rewritten rows piled up
            copy = KeywordCopy.empty()
            self._catch_up(conn, layer, copy, rows)
        copy.stamp, copy.turns = now, turns
        self.copies[key] = copy
        self.copies.move_to_end(key)
        return self._evict(key, now)

    def _build_in_background(self, key: tuple[str, str]) -> None:
        """Start building the copy of key on a connection of its own (self.ready when done)."""
        start = dict(self.vocabulary)  # the ids this instance has: kept, so adopting needs no re-sort

        def build() -> None:
            helper = KeywordCopies(keyword_copy_min=self.keyword_copy_min, keyword_copy_mb=self.keyword_copy_mb,
                                   atom_columns=tuple(self.weights["atoms"]), turn_columns=tuple(self.weights["turns"]),
                                   shared=self.shared)
            helper.vocabulary, helper.stopping = start, self.stopping
            try:
                conn = self.opener()
                try:
                    helper._load_tokenizer(conn)
                    built = helper._current(conn, *key)
                finally:
                    conn.close()
                self.ready[key] = (built, helper.vocabulary)
            except Exception as exc:  # stopped, the file gone: FTS5 keeps answering
                log.debug("memdb: keyword copy of %s not built: %s", key, exc)
                self.ready[key] = (None, {})
            finally:
                self.building.pop(key, None)

        # Started by start_builds, once the search that asked is done: a thread tokenizing holds
        # the GIL most of the time, and started at once it slowed that search 10-fold (1M atoms).
        self.building[key] = threading.Thread(target=build, name="memdb-keyword-copy", daemon=True)

    def _adopt(self, key: tuple[str, str]) -> KeywordCopy | None:
        """The copy built in the background for key, its term ids made this instance's; its
        stamp is none, so the caller brings it up to date."""
        copy, vocabulary = self.ready.pop(key)
        if copy is None:
            return None
        words = sorted(vocabulary, key=vocabulary.__getitem__)
        if words[: len(self.vocabulary)] == list(self.vocabulary):  # the same ids, and more
            self.vocabulary.update(vocabulary)
        else:  # another copy added words meanwhile: renumber and sort again
            mapping = self._term_ids(words).astype(np.int32)
            old = copy.sorted
            copy.sorted = Sorted().merged(Postings(mapping[old.flat_terms()], old.rows, old.kinds))
            copy.tail.terms = mapping[copy.tail.terms]
        copy.stamp = (-1, -1)
        return copy

    def _catch_up(self, conn: apsw.Connection, layer: str, copy: KeywordCopy, rows: list[tuple[int, int]]) -> None:
        """Drop rows gone or rewritten since the copy was made, and read the new versions."""
        ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
        versions = np.fromiter((r[1] for r in rows), np.int64, len(rows))
        held = np.flatnonzero(copy.live)
        at = np.searchsorted(ids, copy.ids[held])
        inside = at < len(ids)
        same = np.zeros(len(held), bool)
        same[inside] = (ids[at[inside]] == copy.ids[held][inside]) & (versions[at[inside]] == copy.versions[held][inside])
        copy.kill(held[~same])
        fresh = np.ones(len(ids), bool)
        fresh[at[inside][same[inside]]] = False
        fresh = np.flatnonzero(fresh)
        new = copy.n == 0
        for lo in range(0, len(fresh), READ_ROWS):
            # Folded as it grows (a merge copies the postings once; the tail it folds is an
            # eighth of them), so a build's peak is about twice the copy, not a sort of it all.
            copy.add(*self._read(conn, layer, copy, ids[fresh[lo:lo + READ_ROWS]], versions[fresh[lo:lo + READ_ROWS]]))
            copy.fold()
        copy.fold(whole=new)

    def _read(self, conn: apsw.Connection, layer: str, copy: KeywordCopy, ids: np.ndarray,
              versions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, Postings]:
        """(ids, versions, lengths, postings) of the rows with these ids, as the FTS table holds
        them, their postings' kinds copy's; a row without its FTS row is left out (unsearchable,
        as it is for FTS5)."""
        if self.stopping.is_set():
            raise RuntimeError("stopped")  # a background build, asked to stop
        fts_table, _, _ = LAYERS[layer]
        found = conn.execute(f'select "rowid", * from "{fts_table}" where "rowid" in {EACH} '
                             'order by "rowid"', (json_array(ids.tolist()),)).fetchall()
        got = np.fromiter((r[0] for r in found), np.int64, len(found))
        lengths, postings = self._postings([r[1:] for r in found], self.weights[layer], copy)
        return got, versions[np.searchsorted(ids, got)], lengths, postings

    def _postings(self, found: list[tuple], weights: np.ndarray, copy: KeywordCopy) -> tuple[np.ndarray, Postings]:
        """Row lengths and (term, row, kind) of rows of FTS content."""
        n, width = len(found), len(weights)
        term, cell = self._tokens([cell or "" for r in found for cell in r])
        column, row = cell % width, cell // width
        pairs, inverse = np.unique(term * n + row, return_inverse=True)  # sorted by term, then row
        counts = np.bincount(inverse, weights=weights[column], minlength=len(pairs))
        plain = np.bincount(inverse, minlength=len(pairs)).astype(float)
        lengths = np.bincount(row, minlength=n).astype(float)
        return lengths, Postings((pairs // n).astype(np.int32), (pairs % n).astype(np.int32), copy.kinds(counts, plain))

    def _tokens(self, cells: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The term id of every token of the cells, and the cell it is in. One tokenizer call
        for all of them, cells told apart by a marker word after each (each call has a fixed
        cost that dwarfs a short cell's); a call per cell only when some text holds the marker."""
        def tokenize(utf8: bytes) -> list[str]:
            return self._tokenizer(utf8, apsw.FTS5_TOKENIZE_DOCUMENT, None, include_offsets=False,
                                   include_colocated=False)

        if not cells:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        words = tokenize(f" {MARKER} ".join(cells + [""]).encode())
        term = self._term_ids(words)
        marks = np.flatnonzero(term == self.vocabulary[MARKER])
        if len(marks) == len(cells):
            return np.delete(term, marks), np.repeat(np.arange(len(cells)), np.diff(marks, prepend=-1) - 1)
        per_cell = [tokenize(c.encode()) for c in cells]
        sizes = np.fromiter(map(len, per_cell), np.int64, len(cells))
        return self._term_ids(list(itertools.chain.from_iterable(per_cell))), np.repeat(np.arange(len(cells)), sizes)

    def _term_ids(self, words: list[str]) -> np.ndarray:
        # Per distinct word only, each looked up: a difference of key views walks the whole
        # vocabulary, at every row absorb writes.
        for word in [w for w in dict.fromkeys(words) if w not in self.vocabulary]:
            self.vocabulary[word] = len(self.vocabulary)
        return np.fromiter(map(self.vocabulary.__getitem__, words), np.int64, len(words))

    def _evict(self, key: tuple[str, str], now: tuple[int, int]) -> KeywordCopy | None:
        """Drop the least recently used copies over budget; None if key's own copy did not fit."""
        while self.copies and sum(c.nbytes for c in self.copies.values()) > self.keyword_copy_bytes:
            dropped, _ = self.copies.popitem(last=False)
            if dropped == key:
                self.small[key] = now
        return self.copies.get(key)
