"""The extraction queue: pending L0 turns → the model → atoms, one batch per transaction.

Turns are taken per user and session in order, `Settings.extract_batch` consecutive turns at a
time. Each batch's atoms and turn states are written in one transaction, so a crash loses at
most the batch in flight and the next run resumes there. What the queue needs from the rest of
memdb is handed to it (`Needs`): the connection and its lock, the model, the embedder, and
`absorb`, the lifecycle step that stores a candidate deduplicated against what is held.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import apsw
import numpy as np

from .. import codec
from ..db import connection, rows
from ..errors import ModelError
from ..models.protocols import LLM
from ..settings import Settings
from .extract import extract
from .records import Candidate, Outcome, Turn

log = logging.getLogger("memdb")

_TURN_COLUMNS = '"id", "user", "session", "seq", "role", "speaker", "content", "ts"'
COUNTS = ("done", "skipped", "failed", "new", "merged", "superseded", "conflicting")


@dataclass
class Needs:
    """What the queue works with, handed in by Memory."""

    conn: apsw.Connection
    lock: threading.RLock
    settings: Settings
    llm: Callable[[], LLM]  # the model, loaded on first use (raises ModelError)
    embed: Callable[[list[str]], np.ndarray | None]
    # absorb(candidate, user, ts, vector) -> action; called inside the batch's transaction
    absorb: Callable[[Candidate, str, str, np.ndarray | None], str]
    before_batch: Callable[[str], None] = lambda user: None  # outside the transaction
    # held over each batch's model calls instead of `lock`, so reads go on while the model runs
    model_lock: threading.Lock = field(default_factory=threading.Lock)


def run(needs: Needs, *, user: str | None, turn_ids: list[int] | None, limit: int | None,
        progress: Callable[[int, int], None] | None) -> dict[str, int]:
    """Extract pending turns; returns counts of turn outcomes and atom actions."""
    pending = _pending(needs, user, turn_ids, limit)
    counts = dict.fromkeys(COUNTS, 0)
    if not pending:
        return counts
    if progress:  # at once: loading the model and the first batch take a while
        progress(0, len(pending))
    llm = needs.llm()
    finished = 0
    for batch in _batches(pending, needs.settings.extract_batch):
        turns = [_as_turn(row) for row in batch]
        history = [_as_turn(r) for r in _history(needs, batch[0])]
        try:
            with needs.model_lock:
                candidates, outcomes = extract(turns, llm, history=history, context=needs.settings.extract_context,
                                               settings=needs.settings)
        except ModelError:  # the model cannot be reached at all: the turns stay pending
            raise
        except Exception as exc:  # a model crash fails this batch, never the caller
            log.warning("memdb: extraction of turns %s failed: %s", [t.id for t in turns], exc)
            candidates, outcomes = [], {t.id: Outcome("failed", f"model error: {exc}") for t in turns}
        _write(needs, turns, candidates, outcomes, counts)
        finished += len(batch)
        if progress:
            progress(finished, len(pending))
    return counts


def _pending(needs: Needs, user: str | None, turn_ids: list[int] | None, limit: int | None) -> list[tuple]:
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
    with needs.lock:
        return needs.conn.execute(sql, args).fetchall()


def _batches(pending: list[tuple], size: int) -> list[list[tuple]]:
    """Consecutive runs of one user's session, at most size turns each."""
    batches: list[list[tuple]] = []
    for row in pending:
        last = batches[-1] if batches else None
        if last and len(last) < size and last[-1][1:3] == row[1:3] and last[-1][3] + 1 == row[3]:
            last.append(row)
        else:
            batches.append([row])
    return batches


def _history(needs: Needs, first: tuple) -> list[tuple]:
    """The turns of the session before a batch's first: their speakers' names ground atoms, and
    the last extract_context of them are shown to the model."""
    with needs.lock:
        found = needs.conn.execute(
            f'select {_TURN_COLUMNS} from "turns" where "user" = ? and "session" = ? and "seq" < ? '
            'order by "seq" desc limit ?',
            (first[1], first[2], first[3], max(needs.settings.extract_history, needs.settings.extract_context)),
        ).fetchall()
    return found[::-1]


def _as_turn(row: tuple) -> Turn:
    id_, user, session, _seq, role, speaker, content, ts = row
    return Turn(id=id_, user=user, session=session, role=codec.ROLE_NAMES[role],
                speaker=speaker, content=content, ts=ts)


def _write(needs: Needs, turns: list[Turn], candidates: list[Candidate], outcomes: dict[int, Outcome],
           counts: dict[str, int]) -> None:
    vectors = needs.embed([codec.canonical_text(c.record) for c in candidates])
    ts_of = {t.id: t.ts for t in turns}
    with needs.lock:
        needs.before_batch(turns[0].user)
    with needs.lock, connection.write(needs.conn):
        # While the model ran, another process may have extracted these turns or forget() may
        # have removed them: write only for turns still pending, so nothing is absorbed twice
        # and no atom cites a turn that is gone.
        marks = ",".join("?" * len(turns))
        pending = {r[0] for r in needs.conn.execute(
            f'select "id" from "turns" where "state" = ? and "id" in ({marks})',
            [codec.STATES["pending"], *(t.id for t in turns)])}
        for i, cand in enumerate(candidates):
            if not set(cand.turn_ids) <= pending:
                continue
            ts = max(ts_of.get(t, turns[-1].ts) for t in cand.turn_ids) if cand.turn_ids else turns[-1].ts
            action = needs.absorb(cand, turns[0].user, ts, None if vectors is None else vectors[i])
            counts[action] = counts.get(action, 0) + 1
        for turn in turns:
            if turn.id not in pending:
                continue
            outcome = outcomes.get(turn.id)
            if outcome is None:  # extract() must account for every turn; say so if it did not
                outcome = Outcome("failed", "extraction returned no outcome for this turn")
            rows.set_turn_state(needs.conn, turn.id, outcome.state, outcome.reason)
            counts[outcome.state] += 1
