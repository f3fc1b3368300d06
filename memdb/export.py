"""What a file's rows read as outside memdb: export() (everything held for a user, JSON-ready),
pairs() (training pairs for a future extractor) and stats() (what the file holds). The
generators take the Memory's lock per part, so a large user's export never holds it for long."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import apsw

from .db import connection, rows


def export(conn: apsw.Connection, lock: threading.RLock, user: str) -> Iterator[dict[str, Any]]:
    """Everything held for user as JSON-ready dicts: turns first, then atoms."""
    with lock:
        ids = rows.user_turn_ids(conn, user)
    for i in range(0, len(ids), 500):
        with lock:
            part = rows.read_turns(conn, ids[i:i + 500], user)
        for row in part:
            yield {"type": "turn", **row}
    with lock:
        atoms = rows.user_atoms(conn, user)
    for atom in atoms:
        yield {"type": "atom", **atom.__dict__}


def pairs(conn: apsw.Connection, lock: threading.RLock, user: str, shown: int) -> Iterator[dict[str, Any]]:
    """Each extracted turn of user with the (at most shown) turns before it in its session and
    the atoms extraction kept from it (any status since). Pending and failed turns are left out:
    they have no validated answer yet."""
    with lock:
        turns = rows.session_turns(conn, user)  # in time order: a dataset reads as it was said
    said: dict[str, list[dict]] = {}  # each session's turns so far
    for turn in turns:
        earlier = said.setdefault(turn["session"], [])
        before = earlier[-shown:] if shown else []
        earlier.append(turn)
        if turn["state"] not in ("done", "skipped"):
            continue
        with lock:
            atoms = rows.atoms_from_turn(conn, turn["id"])
        yield {"type": "pair", "turn": turn,
               "context": [{k: t[k] for k in ("id", "role", "speaker", "content", "ts")} for t in before],
               "atoms": [{k: a.__dict__[k] for k in ("id", "kind", "text", "record", "confidence", "status")}
                         for a in atoms]}


def stats(conn: apsw.Connection, user: str | None) -> dict[str, Any]:
    """Counts by state and sizes (of user, or of the whole file), the vectors still missing, and
    the embedder and extraction model the file records."""
    return {**rows.stats(conn, user), "vectors_missing": rows.count_missing_vectors(conn, user),
            "embedder": connection.get_meta(conn, "embedder_name"), "llm": connection.get_meta(conn, "llm_name")}
