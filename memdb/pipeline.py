"""The extraction queue: pending L0 turns → the model → atoms, one batch per transaction.

Turns are taken per user and session in order, a few consecutive turns per model call with
the turns before them as context. Each batch's atoms and turn states are written in one
transaction, so a crash loses at most the batch in flight and the next run resumes there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import codec, extract, lifecycle, store

if TYPE_CHECKING:
    from . import Memory

log = logging.getLogger("memdb")

_TURN_COLUMNS = '"id", "user", "session", "seq", "role", "speaker", "content", "ts"'


def run(mem: "Memory", *, user: str | None, turn_ids: list[int] | None, limit: int | None,
        progress: Callable[[int, int], None] | None) -> dict[str, int]:
    """Extract pending turns; returns counts of turn outcomes and atom actions."""
    pending = _pending(mem, user, turn_ids, limit)
    counts = dict.fromkeys(("done", "skipped", "failed", "new", "merged", "superseded", "conflicting"), 0)
    if not pending:
        return counts
    llm = mem.llm()
    finished = 0
    for batch in _batches(pending, mem.settings.extract_batch):
        history = _history(mem, batch[0])
        turns = [_as_turn(row) for row in batch]
        try:
            with mem._lock:
                candidates, outcomes = extract.extract(turns, llm, history=[_as_turn(r) for r in history])
        except Exception as exc:  # a model crash fails this batch, never the caller
            log.warning("memdb: extraction of turns %s failed: %s", [t.id for t in turns], exc)
            candidates, outcomes = [], {t.id: extract.Outcome("failed", f"model error: {exc}") for t in turns}
        _write(mem, turns, candidates, outcomes, counts)
        finished += len(batch)
        if progress:
            progress(finished, len(pending))
    return counts


def _pending(mem: "Memory", user: str | None, turn_ids: list[int] | None, limit: int | None) -> list[tuple]:
    sql = f'select {_TURN_COLUMNS} from "turns" where "state" = 0'
    args: list = []
    if user is not None:
        sql += ' and "user" = ?'
        args.append(store.check_name(user, "user"))
    if turn_ids is not None:
        sql += f' and "id" in ({",".join("?" * len(turn_ids))})'
        args += list(turn_ids)
    sql += ' order by "user", "session", "seq"'
    if limit is not None:
        sql += " limit ?"
        args.append(int(limit))
    with mem._lock:
        return mem.conn.execute(sql, args).fetchall()


def _batches(rows: list[tuple], size: int) -> list[list[tuple]]:
    """Consecutive runs of one user's session, at most size turns each."""
    batches: list[list[tuple]] = []
    for row in rows:
        last = batches[-1] if batches else None
        if last and len(last) < size and last[-1][1:3] == row[1:3] and last[-1][3] + 1 == row[3]:
            last.append(row)
        else:
            batches.append([row])
    return batches


def _history(mem: "Memory", first: tuple) -> list[tuple]:
    with mem._lock:
        rows = mem.conn.execute(
            f'select {_TURN_COLUMNS} from "turns" where "user" = ? and "session" = ? and "seq" < ? '
            'order by "seq" desc limit ?',
            (first[1], first[2], first[3], mem.settings.extract_history),
        ).fetchall()
    return rows[::-1]


def _as_turn(row: tuple) -> extract.Turn:
    id_, user, session, _seq, role, speaker, content, ts = row
    return extract.Turn(id=id_, user=user, session=session, role=codec.ROLE_NAMES[role],
                        speaker=speaker, content=content, ts=ts)


def _write(mem: "Memory", turns, candidates, outcomes, counts: dict[str, int]) -> None:
    vectors = mem._embed([codec.canonical_text(c.record) for c in candidates])
    ts_of = {t.id: t.ts for t in turns}
    with mem._lock:
        mem.cache.sync(mem.conn, "atoms", turns[0].user)  # dedup ranks against it below
    with mem._lock, store.write(mem.conn):
        # While the model ran, another process may have extracted these turns or forget() may
        # have removed them: write only for turns still pending, so nothing is absorbed twice
        # and no atom cites a turn that is gone.
        marks = ",".join("?" * len(turns))
        pending = {r[0] for r in mem.conn.execute(
            f'select "id" from "turns" where "state" = 0 and "id" in ({marks})', [t.id for t in turns])}
        for i, cand in enumerate(candidates):
            if not set(cand.turn_ids) <= pending:
                continue
            ts = max(ts_of.get(t, turns[-1].ts) for t in cand.turn_ids) if cand.turn_ids else turns[-1].ts
            action, _ = lifecycle.absorb(
                mem.conn, user=turns[0].user, record=cand.record, confidence=cand.confidence,
                turn_ids=cand.turn_ids, ts=ts, vector=None if vectors is None else vectors[i],
                settings=mem.settings, cache=mem.cache,
            )
            counts[action] = counts.get(action, 0) + 1
        for turn in turns:
            if turn.id not in pending:
                continue
            outcome = outcomes.get(turn.id)
            if outcome is None:  # extract() must account for every turn; say so if it did not
                outcome = extract.Outcome("failed", "extraction returned no outcome for this turn")
            store.set_turn_state(mem.conn, turn.id, outcome.state, outcome.reason)
            counts[outcome.state] += 1

