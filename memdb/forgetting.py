"""forget(): the rows deleted (db/forget.py), then everything derived from them rewritten.

Scenarios that lost members are rewritten from the members left (or deleted) and the persona
card re-ranked, in the same transaction, so no forgotten word stays in either; after the
commit, a copy file another process wrote (index/copyfiles.py) holding the user's vectors goes.
"""

from __future__ import annotations

from pathlib import Path

import apsw

from .db import connection, forget as rows_forget, rows
from .index import copyfiles
from .layers import persona, store
from .settings import Settings


def forget(conn: apsw.Connection, copy_files: Path | None, settings: Settings, *, user: str,
           atom_id: int | None = None, turn_id: int | None = None) -> dict[str, int]:
    """Delete one of the user's atoms (atom_id), or turns (turn_id), with what derives only from
    it, or else everything of the user. The caller checked the ids are the user's and holds the
    Memory's lock. Returns how many turns and atoms went."""
    with connection.write(conn):
        before = rows.counts(conn)
        if atom_id is not None:
            rows_forget.delete_atoms(conn, [atom_id])
        elif turn_id is not None:
            rows_forget.delete_turns(conn, [turn_id])
        else:
            rows_forget.forget_user(conn, user)
            store.forget_user(conn, user)
        rewrite_layers(conn, user, settings)
        after = rows.counts(conn)
    # After the commit, and whatever the settings: a copy file another process wrote
    # holds the user's vectors too.
    copyfiles.remove_user(copy_files, user)
    return {"turns": before[0] - after[0], "atoms": before[1] - after[1]}


def rewrite_layers(conn: apsw.Connection, user: str, settings: Settings) -> None:
    """After a forget: scenarios that lost members rewritten from the members left (or
    deleted), and the persona card re-ranked. Call inside connection.write()."""
    for scenario_id in store.stale(conn, user):
        store.refresh(conn, scenario_id, settings)
    persona.update(conn, user, settings)
