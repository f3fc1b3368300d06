"""Absorbing an extracted atom into what a user already holds.

People repeat themselves and change their minds. For every extracted atom, `absorb` looks at
the user's nearest active atoms (by vector and by keywords, through index/) and applies what
relation.py decides, pair by pair:

- duplicate   — the same statement again: no new row; the old atom is seen once more
                (`merge`: seen + 1, last_seen, confidence up, the new source turns linked);
- conflict    — the same slot with an incompatible value or the opposite polarity: the newer
                one holds now, the older is superseded (valid_to, superseded_by) and kept; when
                the two are comparable evidence (said close in time, with close confidence)
                both stay and are marked conflicting;
- distinct    — anything else: a new atom.

Nothing here deletes a row: the old stays reachable through its version chain (db.rows.history).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

import apsw
import numpy as np

from .. import codec
from ..db import rows
from ..index import fts, vectors
from ..index.copies import VectorCopies
from ..index.engine import Engine
from ..index.fts import TermCounts
from ..index.keywords import KeywordCopies
from ..settings import Settings
from .relation import keyword_similarity, relation

log = logging.getLogger("memdb")


@dataclass
class Held:
    """An active (or conflicting) atom that a new one is compared with."""

    id: int
    record: dict
    confidence: float
    first_seen: str
    last_seen: str
    similarity: float  # semantic similarity to the new atom (vector cosine, or keyword overlap)


@dataclass(frozen=True)
class Incoming:
    """One extracted atom on its way in: whose it is, the record, how sure the extraction was,
    the turns it came from, when it was said, and its vector (None: keyword-only)."""

    user: str
    record: dict
    confidence: float
    turn_ids: list[int]
    ts: str
    vector: np.ndarray | None = None


def absorb(conn: apsw.Connection, atom: Incoming, engine: Engine, *, multilingual: bool = False) -> tuple[str, int]:
    """Store one extracted atom, deduplicated against what its user holds (the layers above the
    atoms are kept current by the flow after this: flow.layers). engine: the settings and the
    connection's in-memory indexes the candidates are found through.

    Call inside connection.write(). Returns (action, atom_id): "merged" (no new row; atom_id is the
    atom it merged into), "new", "superseded" (new atom; older ones superseded by it, or it by
    a newer one already held) or "conflicting" (new atom; both marked conflicting).
    multilingual says the vectors read Chinese and English alike (lifecycle.relation).
    """
    record, settings = codec.validate(atom.record), engine.settings
    held = candidates(conn, atom.user, record, atom.vector, settings, copies=engine.copies,
                      term_counts=engine.term_counts, keywords=engine.keywords)
    judged = [(h, relation(record, h.record, h.similarity, settings, keyword_only=atom.vector is None,
                           multilingual=multilingual)) for h in held]
    duplicates = sorted((h for h, r in judged if r == "duplicate"), key=lambda h: -h.similarity)
    if duplicates:
        kept = duplicates[0]
        merge(conn, kept.id, confidence=atom.confidence, turn_ids=atom.turn_ids, ts=atom.ts, gain=settings.merge_gain)
        if engine.keywords is not None:  # its source words were re-indexed
            engine.keywords.wrote(conn, "atoms", atom.user, [kept.id])
        _resolve_conflicts(conn, kept.id, atom.ts, settings)
        return "merged", kept.id
    atom_id = rows.insert_atom(
        conn, user=atom.user, record=record, confidence=atom.confidence, turn_ids=atom.turn_ids,
        first_seen=atom.ts, last_seen=atom.ts, vector=atom.vector,
    )
    if engine.keywords is not None:
        engine.keywords.wrote(conn, "atoms", atom.user, [atom_id])
    explicit = record.get("polarity") == "ended"
    actions = [_settle(conn, atom_id, atom.confidence, atom.ts, h, settings, explicit=explicit)
               for h, r in judged if r == "conflict"]
    if "conflicting" in actions:
        return "conflicting", atom_id
    return ("superseded" if actions else "new"), atom_id


def merge(conn: apsw.Connection, atom_id: int, *, confidence: float, turn_ids: list[int], ts: str,
          gain: float = 0.5) -> None:
    """Count one more statement of an atom: seen + 1, wider first/last_seen, confidence up."""
    conn.execute(
        'update "atoms" set "seen" = "seen" + 1, "last_seen" = max("last_seen", :ts), '
        '"first_seen" = min("first_seen", :ts), '
        '"confidence" = min(1.0, "confidence" + (1 - "confidence") * :gain) where "id" = :id',
        {"ts": ts, "gain": gain * confidence, "id": atom_id},
    )
    rows.add_sources(conn, atom_id, turn_ids)


# ---------------------------------------------------------------- candidates


def candidates(
    conn: apsw.Connection, user: str, record: dict, vector: np.ndarray | None, settings: Settings, *,
    copies: VectorCopies | None = None, term_counts: TermCounts | None = None,
    keywords: KeywordCopies | None = None,
) -> list[Held]:
    """The user's held atoms nearest to record: a vector KNN plus an FTS match, merged, through
    the same index layer search uses (fast for large users with copies and term counts). A
    large user's keyword candidates come from their keyword copy when it ranks as FTS5 does
    (KeywordCopies.dedup: the same atoms, in a file of one user), else from FTS5."""
    line = codec.canonical_text(record)
    ids: dict[int, float | None] = {}
    if vector is not None:
        ids.update(vectors.nearest(conn, "atoms", user, vector, settings.dedup_candidates, copies=copies,
                                   rescore=settings.dedup_rescore))
    counter = None if keywords is None else lambda todo, cap: keywords.counts(conn, user, todo, cap)
    terms, sole = fts.match_terms(conn, "atoms", user, line, term_counts=term_counts, postings=settings.keyword_postings,
                                  counter=counter)
    found = keywords.dedup(conn, user, terms, settings.dedup_candidates) if keywords is not None and sole else None
    if found is None:
        match = fts.expression_for("atoms", user, terms, sole=sole)
        found = [] if not match else [r[0] for r in conn.execute(
            'select f."rowid" from "atoms_fts" f join "atoms" a on a."id" = f."rowid" '
            'where "atoms_fts" match ? and a."status" != ? order by f."rank" limit ?',
            (match, codec.STATUSES["superseded"], settings.dedup_candidates),
        )]
    for atom_id in found:
        ids.setdefault(atom_id, None)
    # One query for every candidate (a query each was ~15 an atom).
    held = {r[0]: r[1:] for r in conn.execute(
        f'select "id", "record", "confidence", "first_seen", "last_seen", "text" from "atoms" where "id" in {rows.EACH}',
        (rows.json_array(list(ids)),))}
    return [_held(conn, atom_id, held[atom_id], sim, line, vector) for atom_id, sim in ids.items()]


def _held(conn: apsw.Connection, atom_id: int, row: tuple, sim: float | None, line: str,
          vector: np.ndarray | None) -> Held:
    """The candidate atom_id from its row (record, confidence, first_seen, last_seen, text)."""
    record, confidence, first_seen, last_seen, other_line = row
    if sim is None:  # found by keywords only: measure it the same way the KNN would
        sim = vectors.stored_cosine(conn, atom_id, vector) if vector is not None else None
    if sim is None:
        sim = keyword_similarity(line, other_line)
    return Held(atom_id, codec.unpack(record), confidence, first_seen, last_seen, float(sim))


# ---------------------------------------------------------------- conflicts and supersession


def _settle(conn: apsw.Connection, atom_id: int, confidence: float, ts: str, old: Held, settings: Settings, *,
            explicit: bool = False) -> str:
    """Apply one conflict between the new atom and a held one; returns what it came to.
    explicit: the new atom says the old no longer holds ("no longer lives in …"), so it
    supersedes even when both were said close together."""
    if not explicit and comparable(ts, confidence, old.last_seen, old.confidence, settings):
        mark_conflict(conn, atom_id, old.id, ts)
        return "conflicting"
    if ts >= old.last_seen:
        supersede(conn, old.id, by=atom_id, at=ts)
    else:  # a statement older than what is held (a backfill): it is history at once
        supersede(conn, atom_id, by=old.id, at=old.first_seen if old.first_seen > ts else old.last_seen)
    return "superseded"


def comparable(ts_a: str, conf_a: float, ts_b: str, conf_b: float, settings: Settings) -> bool:
    """Two statements are comparable evidence when said close in time with close confidence."""
    hours = abs((_time(ts_a) - _time(ts_b)).total_seconds()) / 3600
    return hours <= settings.comparable_hours and abs(conf_a - conf_b) <= settings.comparable_confidence


def supersede(conn: apsw.Connection, old_id: int, *, by: int, at: str) -> None:
    """Mark old_id as no longer holding since at, replaced by `by`. The row stays."""
    conn.execute('update "atoms" set "valid_to" = ?, "superseded_by" = ? where "id" = ?', (at, by, old_id))
    rows.set_atom_status(conn, old_id, "superseded")
    log.debug("memdb: atom %d superseded by %d at %s", old_id, by, at)


def mark_conflict(conn: apsw.Connection, atom_id: int, other_id: int, at: str) -> None:
    """Keep both atoms active, marked conflicting, with a row saying they disagree."""
    conn.execute(
        'insert or ignore into "atom_conflicts" ("atom_id", "other_id", "detected_at") values (?, ?, ?)',
        (atom_id, other_id, at),
    )
    rows.set_atom_status(conn, atom_id, "conflicting")
    rows.set_atom_status(conn, other_id, "conflicting")


def _resolve_conflicts(conn: apsw.Connection, kept_id: int, ts: str, settings: Settings) -> None:
    # A later restatement of one side of a conflict settles it: that side holds now.
    partners = [conn.execute('select "id", "confidence", "last_seen" from "atoms" where "id" = ? and "status" = ?',
                             (other, codec.STATUSES["conflicting"])).fetchone()
                for other in rows.conflict_partners(conn, kept_id)]
    partners = [p for p in partners if p is not None]
    if not partners:
        return
    kept_conf = conn.execute('select "confidence" from "atoms" where "id" = ?', (kept_id,)).fetchone()[0]
    open_ = 0
    for other_id, conf, last_seen in partners:
        if ts > last_seen and not comparable(ts, kept_conf, last_seen, conf, settings):
            supersede(conn, other_id, by=kept_id, at=ts)
        else:
            open_ += 1
    if not open_:
        rows.set_atom_status(conn, kept_id, "active")


def _time(ts: str) -> dt.datetime:
    return dt.datetime.fromisoformat(ts[:19])
