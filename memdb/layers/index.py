"""A user's scenarios held in memory for placing atoms (layers/scenarios.py).

Placing an atom scores it against the user's scenarios that share a content term with it (or a
source turn), weighing each term by how many scenarios hold it, and then merges the scenario it
joined with its nearest one if they are close enough. Read from the file, that is a read of
every scenario of the user twice per atom, plus a vec0 lookup for each one-atom scenario (they
keep no centroid of their own): fine for a few hundred scenarios, most of an atom's upkeep for
tens of thousands. This index holds, per scenario, its stored centroid, the vector it is
compared by (the centroid, or its one atom's vector), its keywords and member count, and per
keyword the scenarios holding it; the nearest scenario is then one matrix product away.

It stays exact the way the vector copies do (index/copies.py): an index is used inside a write
transaction only if it was exact when the transaction began (its stamp is the file's), or read
afresh then. Inside, placement rereads every scenario it writes (reread); a commit of this
connection moves the index's stamp along (SQLite's commit hook), a rollback drops it, and any
other change (another connection's commit, a forget, a rebuild) leaves its stamp behind, so it is
read again, once. Every scenario write inside a transaction that placed with the index must go
through placement (layers/scenarios.py); forget and rebuild write in transactions of their own.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field

import apsw
import numpy as np

from ..db import connection
from ..db.rows import EACH, json_array
from ..index.copies import Held, stamp
from . import store as layers

_GROW = 64  # rows added to a full matrix at a time, plus an eighth of what it holds


@dataclass
class Scenario:
    centroid: np.ndarray | None  # as stored: None for a one-atom scenario
    vector: np.ndarray | None  # what it is compared by: the centroid, or its one atom's vector
    keywords: frozenset[str]
    members: int
    atom: int | None = None  # a one-atom scenario's atom
    row: int = -1  # its row in UserScenarios.matrix, when it has a vector


@dataclass
class UserScenarios:
    """One user's scenarios by id, the scenarios holding each keyword, and the vectors as rows
    of one matrix (free rows are not live)."""

    found: dict[int, Scenario] = field(default_factory=dict)
    by_term: dict[str, set[int]] = field(default_factory=dict)
    matrix: np.ndarray = field(default_factory=lambda: np.empty((0, 0), np.float32))
    live: np.ndarray = field(default_factory=lambda: np.empty(0, bool))
    ids: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # the scenario at each row
    stamp: tuple[int, int] = (0, 0)
    epoch: str | None = None  # the file's vectors_epoch when read
    transaction: int = -1  # Held.transactions while it is this transaction's own
    conn: weakref.ref[apsw.Connection] | None = None
    # Member atoms' vectors placement read (store.atom_vectors' cache): a scenario's members
    # are read again at each join. Dropped with the index (a rollback, another epoch).
    vectors: dict[int, np.ndarray] = field(default_factory=dict)

    def put(self, sid: int, scenario: Scenario | None) -> None:
        """Set (None: remove) scenario sid."""
        old = self.found.pop(sid, None)
        if old is not None:
            for term in old.keywords:
                holders = self.by_term.get(term)
                if holders is not None:
                    holders.discard(sid)
                    if not holders:
                        del self.by_term[term]
            if old.row >= 0:
                self.live[old.row] = False
        if scenario is None:
            return
        for term in scenario.keywords:
            self.by_term.setdefault(term, set()).add(sid)
        if scenario.vector is not None:
            scenario.row = self._free_row(len(scenario.vector))
            self.matrix[scenario.row] = scenario.vector
            self.live[scenario.row] = True
            self.ids[scenario.row] = sid
        self.found[sid] = scenario

    def _free_row(self, dim: int) -> int:
        free = np.flatnonzero(~self.live)
        if len(free):
            return int(free[0])
        n = len(self.live)
        capacity = n + n // 8 + _GROW
        matrix = np.zeros((capacity, dim), np.float32)
        matrix[:n] = self.matrix[:n] if self.matrix.size else 0
        self.matrix = matrix
        self.live = np.concatenate([self.live, np.zeros(capacity - n, bool)])
        self.ids = np.concatenate([self.ids, np.zeros(capacity - n, np.int64)])
        return n

    def sharing(self, terms: set[str]) -> set[int]:
        """The scenarios whose keywords hold any of terms."""
        return set().union(*(self.by_term.get(t, ()) for t in terms))

    def holding(self, term: str) -> int:
        return len(self.by_term.get(term, ()))

    def nearest(self, sid: int) -> int | None:
        """The other scenario whose vector has the largest dot product with sid's, the lowest
        id among equals (as a scan in id order finds it); None when there is none."""
        mine = self.found.get(sid)
        if mine is None or mine.vector is None:
            return None
        live = self.live.copy()
        live[mine.row] = False
        rows = np.flatnonzero(live)
        if not len(rows):
            return None
        scores = self.matrix[rows] @ mine.vector
        # The product rounds otherwise than one np.dot per pair: the best few are scored again
        # the way the scan scores them, so the same scenario wins.
        close = rows[scores >= scores.max() - 1e-4]
        best = max(((float(np.dot(self.found[int(self.ids[r])].vector, mine.vector)), -int(self.ids[r]))
                    for r in close))
        return -best[1]


class ScenarioIndex(Held):
    """The scenario indexes of one connection, by user. Not thread-safe: Memory holds its lock
    around every use, as it does for the connection."""


    def begin(self, conn: apsw.Connection, user: str) -> None:
        """At the start of a write transaction that will place user's atoms, before it writes:
        the index held is this transaction's if it is still exact (its stamp is the file's),
        else it is read again now."""
        if conn.getautocommit():
            return
        held = self.copies.get(user)
        now = stamp(conn)
        if held is None or held.stamp != now or held.epoch != connection.get_meta(conn, "vectors_epoch"):
            held = self._load(conn, user)
            held.stamp = now
        self._own(conn, user, held)

    def get(self, conn: apsw.Connection, user: str) -> UserScenarios | None:
        """User's scenarios for placement inside the current write transaction (None outside
        one: placement then reads the file). Without begin() at the transaction's start they
        are read here, once per transaction: after the transaction's own writes, the file's
        stamp no longer says whether an index held from before is exact."""
        if conn.getautocommit():
            return None
        held = self.copies.get(user)
        if held is not None and held.transaction == self.transactions and held.conn is not None \
                and held.conn() is conn:
            return held  # this transaction's own: placement keeps it exact
        held = self._load(conn, user)
        held.stamp = (-1, -1)  # exact now, but since when is unknown: nothing to carry past the commit
        self._own(conn, user, held)
        return held

    def _own(self, conn: apsw.Connection, user: str, held: UserScenarios) -> None:
        self._watch(conn)  # the transaction's end decides what becomes of what it writes
        held.transaction, held.conn = self.transactions, weakref.ref(conn)
        self.copies[user] = held

    def _load(self, conn: apsw.Connection, user: str) -> UserScenarios:
        # A one-atom scenario's vector is its atom's, which changes only when the file's
        # vectors_epoch moves: read again after a turn was stored, say, an index keeps them.
        epoch = connection.get_meta(conn, "vectors_epoch")
        before = self.copies.get(user)
        held = UserScenarios(epoch=epoch)
        if before is not None and before.epoch == epoch:
            held.vectors = dict(before.vectors)  # an atom's vector changes only with the epoch
        for sid, scenario in _scenarios(conn, layers.candidates(conn, user),
                                        before if before is not None and before.epoch == epoch else None, held.vectors):
            held.put(sid, scenario)
        return held

    def reread(self, conn: apsw.Connection, held: UserScenarios | None, sids: Iterable[int]) -> None:
        """Read again the scenarios placement wrote (a deleted one leaves the index)."""
        if held is None:
            return
        sids = sorted(set(sids))
        if not sids:
            return
        found = [(sid, None if blob is None else np.frombuffer(blob, dtype=np.float32), set(words.split()), members)
                 for sid, blob, words, members in conn.execute(
                     f'select "id", "centroid", "keywords", "members" from "scenarios" where "id" in {EACH}',
                     (json_array(sids),))]
        for sid, scenario in _scenarios(conn, found, held, held.vectors):
            held.put(sid, scenario)
        for sid in set(sids) - {sid for sid, *_ in found}:
            held.put(sid, None)  # deleted

    def _committing(self, conn: apsw.Connection | None) -> bool:
        # No SQL inside a commit: this connection's own commit leaves its data_version as it was.
        for held in self.copies.values():
            if held.transaction == self.transactions and held.conn is not None and held.conn() is conn \
                    and conn is not None and held.stamp != (-1, -1):
                held.stamp = (held.stamp[0], conn.total_changes())
        return super()._committing(conn)

    def _rolled_back(self, conn: apsw.Connection | None) -> None:
        for user, held in list(self.copies.items()):
            if held.transaction == self.transactions and held.conn is not None and held.conn() is conn:
                del self.copies[user]
        super()._rolled_back(conn)


def _scenarios(conn: apsw.Connection, found: list[tuple], before: UserScenarios | None,
               cache: dict[int, np.ndarray] | None = None) -> list[tuple[int, Scenario]]:
    """(id, Scenario) of candidates rows (layers.candidates), one-atom ones with their atom's
    vector (as before held it for the same atom, else read, through cache: UserScenarios.vectors)."""
    alone = layers.single_members(conn, [sid for sid, c, _, n in found if c is None and n == 1])
    vectors = {}
    for sid, atom in alone.items():
        prior = None if before is None else before.found.get(sid)
        if prior is not None and prior.atom == atom and prior.vector is not None:
            vectors[atom] = prior.vector
    vectors.update(layers.atom_vectors(conn, [a for a in alone.values() if a not in vectors], cache))
    return [(sid, Scenario(centroid=c, vector=c if c is not None else vectors.get(alone.get(sid, -1)),
                           keywords=frozenset(words), members=n, atom=alone.get(sid))) for sid, c, words, n in found]
