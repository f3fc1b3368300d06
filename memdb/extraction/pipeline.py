"""The extraction queue: pending L0 turns, in batches, through the model.

Turns are taken per user and session in order, `Settings.extract_batch` consecutive turns at a
time, with the turns of the session before them (`history`). `extract_batch` runs the model on
one batch and never raises for what the model says. Writing a batch's atoms and turn states (one
transaction, so a crash loses at most the batch in flight and the next run resumes there) is the
flow's: memdb/flow.py.
"""

from __future__ import annotations

import json
import logging

import apsw

from .. import codec
from ..db import rows
from ..errors import ModelError
from ..models.protocols import LLM
from ..settings import Settings
from .extract import extract
from .records import Candidate, Outcome, Turn

log = logging.getLogger("memdb")

_TURN_COLUMNS = '"id", "user", "session", "seq", "role", "speaker", "content", "ts"'
COUNTS = ("done", "skipped", "failed", "new", "merged", "superseded", "conflicting")


def pending(conn: apsw.Connection, user: str | None, turn_ids: list[int] | None, limit: int | None) -> list[tuple]:
    """The pending turns (of user, or of turn_ids), in the order they were said."""
    sql = f'select {_TURN_COLUMNS} from "turns" where "state" = ?'
    args: list = [codec.STATES["pending"]]
    if user is not None:
        sql += ' and "user" = ?'
        args.append(user)
    if turn_ids is not None:
        # One JSON array, not one parameter per id: SQLite binds at most 32,766 values.
        sql += ' and "id" in (select "value" from json_each(?))'
        args.append(json.dumps(list(turn_ids)))
    sql += ' order by "user", "session", "seq"'
    if limit is not None:
        sql += " limit ?"
        args.append(int(limit))
    return conn.execute(sql, args).fetchall()


def batches(pending: list[tuple], size: int) -> list[list[tuple]]:
    """Consecutive runs of one user's session, at most size turns each."""
    batches: list[list[tuple]] = []
    for row in pending:
        last = batches[-1] if batches else None
        if last and len(last) < size and last[-1][1:3] == row[1:3] and last[-1][3] + 1 == row[3]:
            last.append(row)
        else:
            batches.append([row])
    return batches


def history(conn: apsw.Connection, first: tuple, settings: Settings) -> list[Turn]:
    """The turns of the session before a batch's first: their speakers' names ground atoms, and
    the last extract_context of them are shown to the model."""
    found = conn.execute(
        f'select {_TURN_COLUMNS} from "turns" where "user" = ? and "session" = ? and "seq" < ? '
        'order by "seq" desc limit ?',
        (first[1], first[2], first[3], max(settings.extract_history, settings.extract_context)),
    ).fetchall()
    return [as_turn(row) for row in found[::-1]]


def as_turn(row: tuple) -> Turn:
    id_, user, session, _seq, role, speaker, content, ts = row
    return Turn(id=id_, user=user, session=session, role=codec.ROLE_NAMES[role],
                speaker=speaker, content=content, ts=ts)


def extract_batch(turns: list[Turn], history: list[Turn], llm: LLM,
                  settings: Settings) -> tuple[list[Candidate], dict[int, Outcome]]:
    """One batch through the model: its candidates, and an outcome for each turn. A model that
    cannot be reached at all raises ModelError (the turns stay pending); any other failure
    fails this batch's turns, never the caller."""
    try:
        return extract(turns, llm, history=history, context=settings.extract_context, settings=settings)
    except ModelError:
        raise
    except Exception as exc:
        log.warning("memdb: extraction of turns %s failed: %s", [t.id for t in turns], exc)
        return [], {t.id: Outcome("failed", f"model error: {exc}") for t in turns}


def still_pending(conn: apsw.Connection, turns: list[Turn]) -> set[int]:
    """The ids of turns still pending: while the model ran, another process may have extracted
    them or forget() may have removed them."""
    return {r[0] for r in conn.execute(f'select "id" from "turns" where "state" = ? and "id" in {rows.EACH}',
                                       (codec.STATES["pending"], rows.json_array(t.id for t in turns)))}


def settle(conn: apsw.Connection, turns: list[Turn], outcomes: dict[int, Outcome], pending: set[int],
           counts: dict[str, int]) -> None:
    """Record each still pending turn's outcome (done, skipped, failed) in its row and in counts."""
    for turn in turns:
        if turn.id not in pending:
            continue
        outcome = outcomes.get(turn.id)
        if outcome is None:  # extract() must account for every turn; say so if it did not
            outcome = Outcome("failed", "extraction returned no outcome for this turn")
        rows.set_turn_state(conn, turn.id, outcome.state, outcome.reason)
        counts[outcome.state] += 1
