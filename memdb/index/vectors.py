"""Nearest vectors of one user: the one path every search and dedup takes.

A large user's vectors are ranked by an in-memory copy (copies.py); everyone else's by
sqlite-vec's KNN over the user's partition of the vec0 table. Either way the answer is the same
list of (id, cosine), best first.
"""

from __future__ import annotations

from collections.abc import Callable

import apsw
import numpy as np

from .. import codec
from ..db import connection
from ..vecmath import as_blob
from .copies import VectorCopies

# What a layer's vectors are keyed by in vec0, and the filter that leaves superseded atoms out.
_VEC0 = {"atoms": ("atoms_vec", "atom_id", " and active = 1"), "turns": ("turns_vec", "turn_id", "")}


def nearest(conn: apsw.Connection, layer: str, user: str, vector: np.ndarray, k: int, *,
            copies: VectorCopies | None = None, active_only: bool = True,
            rescore: int = 0) -> list[tuple[int, float | None]]:
    """The k nearest of user's vectors in layer ("atoms" | "turns") as (id, cosine), best first;
    superseded atoms left out unless active_only is False. [] when the file has no vectors.
    rescore (Settings.vector_rescore): a large user's copy shortlists by 1-bit codes first."""
    if not connection.has_vectors(conn):
        return []
    ranked = copies.top_k(conn, layer, user, vector, k, active_only=active_only, rescore=rescore) \
        if copies is not None else None
    if ranked is not None:
        return ranked
    table, key, active = _VEC0[layer]
    # A zero vector has no cosine distance (NULL): kept, unscored, as the fusion SQL expects.
    return [(row_id, None if distance is None else 1.0 - distance) for row_id, distance in conn.execute(
        f"select {key}, distance from {table} where embedding match ? and k = ? and user = ?"
        f"{active if active_only else ''}",
        (as_blob(vector), k, user),
    )]


def stored_cosine(conn: apsw.Connection, atom_id: int, vector: np.ndarray) -> float | None:
    """Cosine between vector and the stored vector of an atom (None if it has none)."""
    if not connection.has_vectors(conn):
        return None
    row = conn.execute("select embedding from atoms_vec where atom_id = ?", (atom_id,)).fetchone()
    if row is None:
        return None
    other = np.frombuffer(row[0], dtype=np.float32)
    return float(np.dot(other, vector) / ((np.linalg.norm(other) * np.linalg.norm(vector)) or 1.0))



def turn_text(speaker: str | None, content: str) -> str:
    """What a turn's vector is made from. The speaker's name goes first: questions name people
    ("when did Rosalind …") while turns say "I" (on LoCoMo dev this doubled vector MRR)."""
    return f"{speaker}: {content}" if speaker else content


def rebuild(conn: apsw.Connection, name: str, dim: int, embed: Callable[[list[str]], np.ndarray]) -> int:
    """Every vector of the file made again by another embedder, in one transaction (L0 and atom
    text untouched); returns how many were written. Embeds before taking the write lock."""
    turns = conn.execute('select "id", "user", "speaker", "content" from "turns" order by "id"').fetchall()
    atoms = conn.execute('select "id", "user", "text", "status" from "atoms" order by "id"').fetchall()
    turn_vectors = embed([turn_text(r[2], r[3]) for r in turns])
    atom_vectors = embed([r[2] for r in atoms])
    superseded = codec.STATUSES["superseded"]
    with connection.write(conn):
        connection.create_vectors(conn, name, dim)
        conn.executemany(
            'insert into "turns_vec" ("turn_id", "user", "embedding") values (?, ?, ?)',
            [(r[0], r[1], as_blob(v)) for r, v in zip(turns, turn_vectors)],
        )
        conn.executemany(
            'insert into "atoms_vec" ("atom_id", "user", "active", "embedding") values (?, ?, ?, ?)',
            [(r[0], r[1], int(r[3] != superseded), as_blob(v)) for r, v in zip(atoms, atom_vectors)],
        )
    return len(turns) + len(atoms)
