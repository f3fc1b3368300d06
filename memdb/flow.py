"""A turn's way through memdb, top-down in the order its data flows:

1. store: the checked turns embedded, then inserted verbatim (L0) in one transaction;
2. extract: the pending turns in batches through the model (extraction/pipeline.py);
3. absorb: each batch's candidates deduplicated against what the user holds (lifecycle/absorb.py),
   in one write transaction per batch with the batch's turn states, opened here;
4. layers: each absorbed atom's scenario placed and the persona card re-ranked (layers/);
5. backfill: vectors a keyword-only writer (or a failing embedder) left out, filled in.

Memory.add, Memory.extract and Memory.build_layers check their arguments and call `add`,
`extract` and `build_layers`. Locking: the Memory's lock guards the connection and is never
held over a model call; the model lock keeps one model call at a time per Memory, so reads go
on while the model runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import apsw
import numpy as np

from . import codec, privacy
from .db import connection, rows
from .index.copies import VectorCopies
from .index.engine import Engine
from .ingest import embed_turns, insert_turns
from .layers import persona, scenarios
from .layers.index import ScenarioIndex
from .settings import Settings

if TYPE_CHECKING:  # for the annotations only: memory.py imports this module
    from .extraction.records import Candidate, Outcome, Turn
    from .memory import Memory


def add(mem: Memory, turns: list[dict], *, user: str, session: str) -> list[int]:
    """Store checked turns (ingest.check_messages) and, in extract="now" mode, extract them.
    Returns their L0 ids in order; extraction problems never raise here (the turns stay pending
    or are marked failed)."""
    if not turns:  # every message was skipped (an image alone): nothing to store
        return []
    ids = store(mem, turns, user=user, session=session)
    backfill(mem)
    if mem.extract_mode == "now":
        try:
            extract(mem, user=user, turn_ids=ids)
        except Exception as exc:  # the agent loop never crashes because of memdb
            mem.warn_once(f"memdb: turns stay pending, extraction failed: {exc}")
    return ids


def store(mem: Memory, turns: list[dict], *, user: str, session: str) -> list[int]:
    """Embed the turns (outside the transaction: the embedder's time must not hold the write
    lock), then insert them after the session's last turn in one transaction."""
    with mem.lock:
        mem.embedding.follow(mem.path)
    found = embed_turns(turns, mem.embedding.embed)
    with mem.lock, connection.write(mem.conn):
        if mem.embedding.moved():  # reembedded by another connection while these were embedded
            found = None
        return insert_turns(mem.conn, user=user, session=session, turns=turns, vectors=found)


def extract(mem: Memory, *, user: str | None, turn_ids: list[int] | None = None, limit: int | None = None,
            progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Extract pending turns (of user, or of turn_ids), one batch at a time; returns counts of
    turn outcomes and atom actions. Raises ModelError if the model cannot load."""
    # Imported here: a process that only searches (the CLI) never needs extraction, and its
    # modules compile a hundred patterns at import (bench/cli_latency.py).
    from .extraction import pipeline

    with mem.lock:
        mem.embedding.follow(mem.path)
        pending = pipeline.pending(mem.conn, user, turn_ids, limit)
    counts = dict.fromkeys(pipeline.COUNTS, 0)
    if pending:
        if progress:  # at once: loading the model and the first batch take a while
            progress(0, len(pending))
        llm = mem.llm()
        finished = 0
        for batch in pipeline.batches(pending, mem.settings.extract_batch):
            turns = [pipeline.as_turn(row) for row in batch]
            with mem.lock:
                history = pipeline.history(mem.conn, batch[0], mem.settings)
            with mem.model_lock:
                candidates, outcomes = pipeline.extract_batch(turns, history, llm, mem.settings)
            write(mem, turns, candidates, outcomes, counts)
            finished += len(batch)
            if progress:
                progress(finished, len(pending))
    backfill(mem)
    return counts


def write(mem: Memory, turns: list[Turn], candidates: list[Candidate], outcomes: dict[int, Outcome],
          counts: dict[str, int]) -> None:
    """One batch's atoms absorbed and its turns' states written, in one transaction: a crash
    loses at most this batch, and the next run extracts it again."""
    from .extraction import pipeline

    found = embed_atoms(mem, [codec.canonical_text(c.record) for c in candidates])
    ts_of = {t.id: t.ts for t in turns}
    user = turns[0].user
    with mem.lock:
        mem.copies.sync(mem.conn, "atoms", user)  # outside the transaction: a large user's catch-up
        mem.keywords.sync(mem.conn, "atoms", user)  # (dedup ranks its keyword candidates there)
    with mem.lock, connection.write(mem.conn):
        # While the model ran, another process may have extracted these turns or forget() may
        # have removed them: write only for turns still pending, so nothing is absorbed twice
        # and no atom cites a turn that is gone.
        pending = pipeline.still_pending(mem.conn, turns)
        if mem.settings.layers and mem.scenario_index is not None:  # before the batch writes (its docstring)
            mem.scenario_index.begin(mem.conn, user)
        card_changed: list[int] = []  # the batch's atoms for the persona card, re-ranked once for all
        for i, candidate in enumerate(candidates):
            if not set(candidate.turn_ids) <= pending:
                continue
            ts = max(ts_of.get(t, turns[-1].ts) for t in candidate.turn_ids) if candidate.turn_ids else turns[-1].ts
            action, _ = absorb(mem, candidate, user=user, ts=ts, vector=None if found is None else found[i],
                               card_changed=card_changed)
            counts[action] = counts.get(action, 0) + 1
        persona_after(mem.conn, user, mem.settings, card_changed)
        pipeline.settle(mem.conn, turns, outcomes, pending, counts)
    with mem.lock:  # a large user's keyword copy, if sync asked for one, built from now
        mem.keywords.start_builds()


def embed_atoms(mem: Memory, lines: list[str]) -> np.ndarray | None:
    """A batch's atom lines, embedded. Their vectors are handed to the copies (expect), which
    rank them all against a large user's vectors in one pass when dedup asks for their
    neighbours one by one; a vector not expected is ranked alone."""
    found = mem.embedding.embed(lines)
    if found is not None:
        with mem.lock:
            mem.copies.expect(found)
    return found


def absorb(mem: Memory, candidate: Candidate, *, user: str, ts: str, vector: np.ndarray | None,
           card_changed: list[int] | None = None) -> tuple[str, int | None]:
    """One extracted candidate into the user's atoms, then into the layers: (action, atom id),
    or ("withheld", None) for one that must not become an atom. Call inside connection.write().
    card_changed: see layers."""
    from .lifecycle.absorb import Incoming, absorb as deduplicate

    if withheld(mem.conn, candidate):
        return "withheld", None
    if vector is not None and mem.embedding.moved():
        vector = None  # the file moved to another embedder since it was made: the next writer fills it
    action, atom_id = deduplicate(mem.conn,
                                  Incoming(user=user, record=candidate.record,
                                           confidence=candidate.confidence, turn_ids=candidate.turn_ids,
                                           ts=ts, vector=vector),
                                  Engine(mem.settings, copies=mem.copies, term_counts=mem.term_counts,
                                         keywords=mem.keywords),
                                  multilingual=getattr(mem.embedding.embedder, "multilingual", True))
    layers(mem.conn, user=user, atom_id=atom_id, kind=candidate.record["kind"], vector=vector, ts=ts,
           settings=mem.settings, cosine_baseline=mem.embedding.cosine_baseline(), copies=mem.copies,
           index=mem.scenario_index, card_changed=card_changed)
    return action, atom_id


def withheld(conn: apsw.Connection, candidate: Candidate) -> bool:
    """Whether a candidate must not become an atom, whatever extraction made of it: it names a
    credential, or a source turn forges a role marker or tells the memory what to store (an
    instruction inside a turn is its speaker's claim at most). The boundary filter of
    privacy.py; called inside the batch's transaction."""
    said = " ".join(str(candidate.record.get(k) or "") for k in ("subject", "predicate", "object", "outcome", "domain"))
    if privacy.names_secret(said):
        return True
    sources = conn.execute('select "content" from "turns" where "id" in (select "value" from json_each(?))',
                           (json.dumps(list(candidate.turn_ids)),)).fetchall()
    return any(privacy.forges_role(content) for content, in sources)


def layers(conn: apsw.Connection, *, user: str, atom_id: int, kind: str, vector: np.ndarray | None, ts: str,
           settings: Settings, cosine_baseline: float, copies: VectorCopies | None = None,
           index: ScenarioIndex | None = None, card_changed: list[int] | None = None) -> None:
    """Keep the user's L2 and L3 current after absorb stored or merged atom_id (settings.layers):
    its scenario placed (through the in-RAM vector copies and scenario index when there are
    some), and the persona card re-ranked for a fact, preference or constraint. card_changed:
    a batch's list the atom joins instead, for one re-ranking after the batch's last atom
    (persona_after), in the same transaction. Call inside connection.write()."""
    if not settings.layers:
        return
    scenarios.place(conn, user=user, atom_id=atom_id, vector=vector, ts=ts, settings=settings,
                    cosine_baseline=cosine_baseline, copies=copies, index=index)
    if kind == "event":  # the card holds facts, preferences and constraints
        return
    if card_changed is not None:
        card_changed.append(atom_id)
    else:
        persona.update(conn, user, settings, changed=[atom_id])


def persona_after(conn: apsw.Connection, user: str, settings: Settings, changed: list[int]) -> None:
    """The persona card re-ranked once for a batch's atoms (layers' card_changed), before its
    transaction commits: the card's atoms and all of the batch's scored together, where a
    re-ranking per atom scored each with the card the one before left (so an atom that one
    pushed off the card and a later supersession made room for again is kept here, as a full
    ranking keeps it). Call inside connection.write()."""
    if settings.layers and changed:
        persona.update(conn, user, settings, changed=changed)


def build_layers(mem: Memory, user: str | None) -> dict[str, int]:
    """The layers step for the atoms in no scenario yet (a file made before scenarios existed),
    of user or of every user: each placed in the order they were stored, then the persona card
    ranked. Returns how many users and atoms."""
    with mem.lock:
        users = [user] if user is not None else rows.atom_users(mem.conn)
    placed = 0
    for name in users:
        with mem.lock, connection.write(mem.conn):
            placed += scenarios.rebuild(mem.conn, name, mem.settings, mem.embedding.cosine_baseline())
            persona.update(mem.conn, name, mem.settings)
    return {"users": len(users), "atoms_placed": placed}


def backfill(mem: Memory) -> None:
    """Embed up to settings.vector_backfill turns and atoms that were stored without a vector
    (by a keyword-only writer, or while the embedder failed), so search finds them by meaning."""
    budget = mem.settings.vector_backfill
    if mem.embedding.embedder is None or not budget or mem.read_only:
        return
    with mem.lock:
        if connection.get_meta(mem.conn, "vectors_missing") != "1" or not connection.has_vectors(mem.conn):
            return
    filled_all = True
    for table in ("turns", "atoms"):
        with mem.lock:
            todo = rows.missing_vectors(mem.conn, table, budget)
        filled_all = filled_all and len(todo) < budget
        if not todo:
            continue
        found = mem.embedding.embed([line for _, _, line in todo])
        if found is None:
            return
        with mem.lock, connection.write(mem.conn):
            if mem.embedding.moved():
                return
            # Look again under the write lock: another writer may have filled or forgotten some.
            still = {row[0] for row in rows.missing_vectors(mem.conn, table, budget)}
            for (row_id, user, _), vector in zip(todo, found):
                if row_id in still:
                    rows.add_vector(mem.conn, table, row_id, user, vector)
    if filled_all:
        with mem.lock, connection.write(mem.conn):
            if not any(rows.missing_vectors(mem.conn, t, 1) for t in ("turns", "atoms")):
                connection.set_meta(mem.conn, "vectors_missing", "0")
