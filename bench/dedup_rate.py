"""Dedup rate of one memdb tree on a file bench/scale.py built: atoms/s through
lifecycle.absorb with the user's vector copy loaded, rolled back. Run with --tree pointing at
another checkout's package to time an older memdb on the same file in the same locked session
(bench/scale.py --insert-only times today's, batched and not).

--batch N ranks the atoms N at a time as extraction hands them over (copies.expect, as Memory
does before each batch's dedup; 0: one at a time); --commit-every N commits every N atoms, as
Memory writes each extraction batch in a transaction of its own (else one transaction for all,
in which the vector copies read every row written since it began); --set name=value overrides
a Settings field (layers=false: absorb without the L2/L3 upkeep, whose cost is the difference).
Prints the actions, the decisions (to compare trees or settings on the same records), the
persona card the run left and the card a full ranking gives at the end (lifecycle/persona.py
ranks a large user's card fully only when due), and the process's peak RSS.

    git archive BASE memdb | tar -x -C /tmp/base
    flock /tmp/memdb-cpu.lock .venv/bin/python bench/dedup_rate.py --db /tmp/memdb_scale_100k.db --tree /tmp/base
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import inspect
import json
import random
import resource
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


RECORDS = 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", required=True)
    parser.add_argument("--tree", type=Path, default=ROOT, help="the directory holding the memdb package to time")
    parser.add_argument("--atoms", type=int, default=300)
    parser.add_argument("--copy-mb", type=float, default=4096)
    parser.add_argument("--batch", type=int, default=0, help="atoms ranked together (copies.expect); 0: one at a time")
    parser.add_argument("--commit-every", type=int, default=0,
                        help="commit every N atoms, syncing the copies first, as Memory writes an extraction batch "
                             "(on a scratch copy of --db, deleted after); 0: one transaction, rolled back")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a Settings field for this run (JSON value, or a bare word)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(args.tree))
    import numpy as np

    from memdb.db import connection
    from memdb.index.copies import VectorCopies
    from memdb.index.fts import TermCounts
    from memdb.lifecycle import absorb
    from memdb.settings import Settings

    import synth  # after memdb: it puts this checkout first on sys.path

    assert Path(absorb.__file__).is_relative_to(args.tree), absorb.__file__
    # The L2/L3 upkeep timed where absorb calls it, so its cost per atom is read in the same run.
    upkeep = [0.0]

    def timed(fn):
        def run(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                upkeep[0] += time.perf_counter() - t
        return run

    try:  # the L2/L3 upkeep: in memdb.flow after absorb since the flow module; inside absorb before
        from memdb import flow
        upkept = flow
    except ImportError:
        flow, upkept = None, absorb
    upkept.scenarios.place = timed(upkept.scenarios.place)
    # A large user's persona card is ranked fully once every (ranked atoms / 100) updates
    # (layers/persona.py), and a run starts with one (the file has no card yet): its time is
    # also reported alone, and spread over the updates until the next, as a process writing
    # for a while pays it.
    full_rankings: list[tuple[float, int]] = []  # (seconds, updates until the next)
    updates = [0]

    def persona_timed(fn):
        def run(conn, user, settings, changed=None):
            key = f"persona_rank:{user}"
            before = conn.execute('select "value" from "meta" where "key" = ?', (key,)).fetchone()
            t = time.perf_counter()
            updates[0] += 1
            try:
                return fn(conn, user, settings, changed)
            finally:
                spent = time.perf_counter() - t
                upkeep[0] += spent
                after = conn.execute('select "value" from "meta" where "key" = ?', (key,)).fetchone()
                left_before = json.loads(before[0]).get("left", 0) if before else 0
                if changed is None or left_before <= 0:
                    full_rankings.append((spent, json.loads(after[0]).get("left", 0) if after else 0))
        return run

    upkept.persona.update = persona_timed(upkept.persona.update)
    db = args.db
    if args.commit_every:  # commits change the file: work on a scratch copy of it
        db = args.db + ".scratch"
        for suffix in ("", "-wal"):
            if Path(args.db + suffix).exists():
                shutil.copyfile(args.db + suffix, db + suffix)
    conn = connection.connect(db)
    settings = Settings(**dict(_setting(pair) for pair in args.set))
    user = conn.execute('select "user" from "atoms" limit 1').fetchone()[0]
    copies = VectorCopies(vector_copy_min=settings.vector_copy_min, vector_copy_mb=args.copy_mb)
    indexes = {"copies": copies, "term_counts": TermCounts(growth=settings.term_counts_growth)}
    keywords = None
    if hasattr(absorb, "KeywordCopies"):  # dedup ranks keyword candidates in the keyword copy since issue 29
        from memdb.index.keywords import KeywordCopies
        keywords = KeywordCopies(keyword_copy_min=settings.keyword_copy_min, keyword_copy_mb=settings.keyword_copy_mb,
                                 atom_columns=settings.atom_columns, turn_columns=settings.turn_columns,
                                 shared=settings.keyword_copy_shared)
        indexes["keywords"] = keywords
    pool_bases = synth.bases(synth.POOL)
    pool = synth.pool_vectors(pool_bases)
    rng, nrng = random.Random(9), np.random.default_rng(9)
    turn_id = conn.execute('select max("id") from "turns" where "user" = ?', (user,)).fetchone()[0]
    ts = conn.execute('select "ts" from "turns" where "id" = ?', (turn_id,)).fetchone()[0]
    # Records drawn for RECORDS atoms whatever --atoms is, so runs of different lengths absorb
    # the same first atoms and their decisions compare.
    ids = [rng.randrange(len(pool_bases)) for _ in range(max(args.atoms, RECORDS))]
    records = [synth.record_for(pool_bases[i], rng.choice(["Alice", "Bob", "小王"]), dt.date(2023, 5, 1), rng) for i in ids]
    vectors = synth.derive(pool, np.array(ids), nrng)
    every = args.commit_every or args.atoms
    layer_indexes = {}  # the scenario index, as Memory holds one, since issue 29
    if flow is not None and "index" in inspect.signature(flow.layers).parameters:
        from memdb.layers.index import ScenarioIndex
        layer_indexes["index"] = ScenarioIndex()
    # In extraction's batches the persona card is re-ranked once a batch, as Memory does since
    # flow.persona_after (one at a time: once an atom).
    deferred = {"card_changed": []} if args.batch and hasattr(flow, "persona_after") else {}

    def flush_card() -> None:
        flow.persona_after(conn, user, settings, deferred["card_changed"])
        deferred["card_changed"] = []

    copies.sync(conn, "atoms", user)  # the copies loaded before the clock starts, as in a warm process
    if keywords is not None:
        keywords.sync(conn, "atoms", user)
    decisions = []
    t0 = time.perf_counter()
    for start in range(0, args.atoms, every):
        copies.sync(conn, "atoms", user)  # as Memory does before each extraction batch
        if keywords is not None:
            keywords.sync(conn, "atoms", user)
        conn.execute("begin immediate")
        if "index" in layer_indexes and settings.layers:  # as Memory's batch does before it writes
            layer_indexes["index"].begin(conn, user)
        for i in range(start, min(args.atoms, start + every)):
            if args.batch and i % args.batch == 0 and hasattr(copies, "expect"):
                copies.expect(vectors[i:i + args.batch])
            if hasattr(absorb, "Incoming"):  # absorb(conn, Incoming, Engine) since issue 27; keywords before
                decision = absorb.absorb(conn, absorb.Incoming(user=user, record=records[i], confidence=0.8,
                                                               turn_ids=[turn_id], ts=ts, vector=vectors[i]),
                                         absorb.Engine(settings, **indexes))
            else:
                decision = absorb.absorb(conn, user=user, record=records[i], confidence=0.8, turn_ids=[turn_id],
                                         ts=ts, vector=vectors[i], settings=settings, **indexes)
            if flow is not None:
                flow.layers(conn, user=user, atom_id=decision[1], kind=records[i]["kind"], vector=vectors[i], ts=ts,
                            settings=settings, cosine_baseline=0.0, copies=copies, **layer_indexes, **deferred)
            decisions.append(decision)
            if deferred and ((i + 1) % args.batch == 0 or i + 1 == args.atoms):
                flush_card()
        if args.commit_every:
            conn.execute("commit")
    seconds = time.perf_counter() - t0
    # What the clock saw (the full ranking below, after it, is not upkeep).
    layers_seconds, ranked_fully, updated = upkeep[0], list(full_rankings), updates[0]
    if args.commit_every:
        conn.execute("begin immediate")
    card = full = placed = None
    if settings.layers:
        # Which atoms share a scenario, as a digest: placement must not change with how it ranks.
        groups = sorted(r[0] for r in conn.execute(
            'select group_concat("atom_id") from (select "scenario_id", "atom_id" from "scenario_atoms" '
            'order by "scenario_id", "atom_id") group by "scenario_id"'))
        placed = hashlib.sha1("\n".join(groups).encode()).hexdigest()[:16]
        persona = upkept.persona  # memdb.layers.persona since the L2/L3 package, lifecycle's before

        card = [r[0] for r in conn.execute('select "atom_id" from "persona" where "user" = ? order by "rank"', (user,))]
        persona.update(conn, user, settings)  # a full ranking, as when due
        full = [r[0] for r in conn.execute('select "atom_id" from "persona" where "user" = ? order by "rank"', (user,))]
    conn.execute("rollback")
    if args.commit_every:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            Path(db + suffix).unlink(missing_ok=True)
    print(json.dumps({"tree": str(args.tree), "db": args.db, "atoms": args.atoms, "batch": args.batch,
                      "commit_every": args.commit_every,
                      "settings": args.set, "absorb_atoms_per_s": round(args.atoms / seconds, 1),
                      "ms_per_atom": round(1000 * seconds / args.atoms, 2),
                      "layers_ms_per_atom": round(1000 * layers_seconds / args.atoms, 2),
                      # the same with each full persona ranking spread over the updates until the next
                      "layers_ms_per_atom_full_ranking_spread": round(1000 * (layers_seconds - sum(
                          spent - spent * min(updated, left) / max(left, 1) for spent, left in ranked_fully))
                          / args.atoms, 2),
                      "persona_full_rankings_ms": [round(1000 * spent, 1) for spent, _ in ranked_fully],
                      "persona_updates": updated,
                      "actions": {a: sum(d[0] == a for d in decisions) for a in {d[0] for d in decisions}},
                      "decisions": decisions, "persona_card": card, "persona_card_full": full,
                      "scenarios_digest": placed,
                      "maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))


def _setting(pair: str) -> tuple[str, object]:
    name, _, value = pair.partition("=")
    try:
        return name, json.loads(value)
    except ValueError:
        return name, value


if __name__ == "__main__":
    main()
