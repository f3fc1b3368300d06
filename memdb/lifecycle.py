"""The memory lifecycle: what a new atom does to the atoms already held.

Placeholder until the lifecycle issue lands: every candidate becomes a new atom, except an
exact repeat of an active atom's line, which merges into it.
"""

from __future__ import annotations

import apsw
import numpy as np

from . import codec, store
from .settings import Settings


def absorb(
    conn: apsw.Connection,
    *,
    user: str,
    record: dict,
    confidence: float,
    turn_ids: list[int],
    ts: str,
    vector: np.ndarray | None,
    settings: Settings,
) -> tuple[str, int]:
    """Store one extracted atom for user; returns (action, atom_id), action "new" or "merged"."""
    line = codec.canonical_text(record)
    row = conn.execute(
        'select "id" from "atoms" where "user" = ? and "text" = ? and "status" != 1',
        (user, line),
    ).fetchone()
    if row:
        merge(conn, row[0], confidence=confidence, turn_ids=turn_ids, ts=ts)
        return "merged", row[0]
    atom_id = store.insert_atom(
        conn, user=user, record=record, confidence=confidence, turn_ids=turn_ids,
        first_seen=ts, last_seen=ts, vector=vector,
    )
    return "new", atom_id


def merge(conn: apsw.Connection, atom_id: int, *, confidence: float, turn_ids: list[int], ts: str) -> None:
    """Count one more statement of an atom: seen + 1, later last_seen, confidence up."""
    conn.execute(
        'update "atoms" set "seen" = "seen" + 1, "last_seen" = max("last_seen", ?), '
        '"confidence" = min(1.0, "confidence" + (1 - "confidence") * ?) where "id" = ?',
        (ts, 0.5 * confidence, atom_id),
    )
    store.add_sources(conn, atom_id, turn_ids)


# Every atom linked to ? through superseded_by, in either direction: one version chain.
CHAIN_CTE = """
with recursive chain("id") as (
    select ?
    union
    select a."id" from "atoms" a join chain c on a."superseded_by" = c."id"
    union
    select a."superseded_by" from "atoms" a join chain c on a."id" = c."id"
    where a."superseded_by" is not null
)"""
