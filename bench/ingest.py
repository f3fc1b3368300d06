"""Ingest cost: seconds per turn of `Memory.add()` end to end, split by stage.

A slice of a LoCoMo dev conversation (default: the first 60 turns of conv-26) is added one
turn per add() call, as an agent loop would, into a new file:

- extract="now": store the turn, embed it, run the extraction model on it (with the turns
  before it as context), embed the atoms, dedup them through lifecycle.absorb, write them;
- extract="defer": store and embed only (the model is not touched);
- the deferred file is then extracted in one `mem.extract()` call, which batches consecutive
  turns (Settings.extract_batch) per model call: the catch-up path.

Stages are timed by wrapping the functions that do the work (exclusive time: a stage called
inside another is not counted twice): the model call (LLM.complete), the rest of
extraction.extract (validation, grounding, time resolution), the embedder, lifecycle.absorb
(dedup: candidate KNN + FTS, the decision), db.rows.insert_atom, db.rows.insert_turn, and the
write transaction itself (begin/commit, fsync). "other" is what is left of add(): input
checks, pending-turn queries. The model is loaded before timing (its load time is reported
on its own). The model runs at ~1 s per turn here, so keep the slice bounded.

    .venv/bin/python bench/ingest.py                      # conv-26, 60 turns
    .venv/bin/python bench/ingest.py --conv conv-30 --turns 30
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from bench.common import LOCOMO_DEV, machine, parse_session_time, turn_text  # noqa: E402
from memdb import flow  # noqa: E402
from memdb.db import connection  # noqa: E402
from memdb.db import rows as db_rows  # noqa: E402
from memdb.extraction import pipeline  # noqa: E402
from memdb.lifecycle import absorb  # noqa: E402

DATA = LOCOMO_DEV
OTHER = "add (other)"


class Timers:
    """Exclusive time per stage: a wrapped call's time minus that of wrapped calls inside it."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[float] = []  # time spent in children of each open frame

    @contextlib.contextmanager
    def stage(self, name: str):
        self._stack.append(0.0)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - t0
            children = self._stack.pop()
            self.total[name] += elapsed - children
            self.calls[name] += 1
            if self._stack:
                self._stack[-1] += elapsed

    def wrap(self, name: str, fn: Callable) -> Callable:
        def wrapped(*args, **kwargs):
            with self.stage(name):
                return fn(*args, **kwargs)
        return wrapped

    def wrap_cm(self, name: str, cm_fn: Callable) -> Callable:
        """Wrap a context-manager factory (connection.write): its own time, not its body's."""
        @contextlib.contextmanager
        def wrapped(*args, **kwargs):
            with self.stage(name):
                with cm_fn(*args, **kwargs):
                    # The body is not the transaction's own time: it is excluded here, and
                    # what the body spends outside other wrapped stages counts as "other".
                    self._stack.append(0.0)
                    t0 = time.perf_counter()
                    try:
                        yield
                    finally:
                        body = time.perf_counter() - t0
                        self.total[OTHER] += body - self._stack.pop()
                        self._stack[-1] += body
        return wrapped

    def reset(self) -> None:
        self.total.clear()
        self.calls.clear()


def slice_messages(sample: dict, n: int) -> list[tuple[str, dict]]:
    """The first n turns of a conversation as (session, message) pairs, with LoCoMo's times."""
    conv, out, s = sample["conversation"], [], 1
    while f"session_{s}" in conv and len(out) < n:
        start = parse_session_time(conv[f"session_{s}_date_time"])
        for i, t in enumerate(conv[f"session_{s}"]):
            out.append((f"session_{s}", {"role": "user", "name": t["speaker"], "content": turn_text(t),
                                         "ts": (start + dt.timedelta(seconds=30 * i)).isoformat()}))
        s += 1
    return out[:n]


def instrument(mem: memdb.Memory, timers: Timers, llm) -> list[tuple]:
    """Patch the stage functions; returns what to restore.

    Each is patched where its caller looks it up: extract() is imported by name into
    extraction/pipeline.py, so a patch of its own module would go unseen; flow.py imports
    absorb() from its module at each call, and rows and connection functions are called
    through their modules."""
    patches = [
        (pipeline, "extract", timers.wrap("extract (parse, ground, time)", pipeline.extract)),
        (absorb, "absorb", timers.wrap("absorb (dedup)", absorb.absorb)),
        (flow, "layers", timers.wrap("layers (scenarios, persona)", flow.layers)),
        (db_rows, "insert_atom", timers.wrap("store atoms", db_rows.insert_atom)),
        (db_rows, "insert_turn", timers.wrap("store turns", db_rows.insert_turn)),
        (connection, "write", timers.wrap_cm("transaction (begin/commit)", connection.write)),
    ]
    if mem.embedder is not None:
        patches.append((mem.embedder, "embed", timers.wrap("embed", mem.embedder.embed)))
    if llm is not None:
        patches.append((llm, "complete", timers.wrap("model call", llm.complete)))
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    for obj, name, fn in patches:
        setattr(obj, name, fn)
    return saved


def restore(saved: list[tuple]) -> None:
    for obj, name, fn in saved:
        setattr(obj, name, fn)


def run_mode(path: Path, mode: str, messages: list[tuple[str, dict]], user: str) -> dict:
    mem = memdb.open(path, extract=mode)
    llm = None
    load_s = None
    if mode == "now":
        t0 = time.perf_counter()
        llm = mem.llm()
        llm.count_tokens("warm")  # vocab
        load_s = time.perf_counter() - t0
    mem.embedder.embed(["warm up"])  # first call pays one-off allocations
    timers = Timers()
    saved = instrument(mem, timers, llm)
    per_turn = []
    try:
        t_all = time.perf_counter()
        for session, message in messages:
            with timers.stage(OTHER):
                t0 = time.perf_counter()
                mem.add([message], user=user, session=session)
                per_turn.append(time.perf_counter() - t0)
        wall = time.perf_counter() - t_all
    finally:
        restore(saved)
    out = report(timers, wall, len(messages), per_turn)
    if load_s is not None:  # ~0 when an earlier mode of this run already loaded the model
        out["model_load_s"] = round(load_s, 2)
    out["stats"] = {k: v for k, v in mem.stats(user).items() if k in ("turns", "turns_by_state", "atoms", "atoms_by_status")}
    if mode == "defer":  # the catch-up path: one extract() over everything pending, batched
        t0 = time.perf_counter()
        llm = mem.llm()
        llm.count_tokens("warm")
        later_load_s = time.perf_counter() - t0
        timers = Timers()
        saved = instrument(mem, timers, llm)
        try:
            t0 = time.perf_counter()
            with timers.stage(OTHER):
                counts = mem.extract(user=user)
            wall = time.perf_counter() - t0
        finally:
            restore(saved)
        out["extract_later"] = report(timers, wall, len(messages), [])
        out["extract_later"]["counts"] = counts
        out["extract_later"]["batch_turns"] = mem.settings.extract_batch
        out["extract_later"]["model_load_s"] = round(later_load_s, 2)
    mem.close()
    return out


def report(timers: Timers, wall: float, turns: int, per_turn: list[float]) -> dict:
    stages = {name.replace(OTHER, "other"): {"s_per_turn": round(t / turns, 4), "share": round(t / wall, 3),
                                                     "calls": timers.calls[name]}
              for name, t in sorted(timers.total.items(), key=lambda kv: -kv[1])}
    out = {"turns": turns, "wall_s": round(wall, 2), "s_per_turn": round(wall / turns, 4), "stages": stages}
    if per_turn:
        out["add_s_per_call"] = {"median": round(statistics.median(per_turn), 4),
                                 "p95": round(sorted(per_turn)[int(0.95 * (len(per_turn) - 1))], 4),
                                 "max": round(max(per_turn), 4)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--conv", default="conv-26")
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--modes", default="now,defer")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ingest.json")
    args = parser.parse_args()
    sample = next(s for s in json.loads(args.data.read_text()) if s["sample_id"] == args.conv)
    messages = slice_messages(sample, args.turns)
    result: dict = {"command": "python bench/ingest.py " + " ".join(sys.argv[1:]), "machine": machine(),
                    "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "data": f"{args.data.name} {args.conv} first {len(messages)} turns, one add() per turn"}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes.split(","):
            print(f"[{mode}] adding {len(messages)} turns", file=sys.stderr)
            result[mode] = run_mode(Path(tmp) / f"{mode}.db", mode, messages, args.conv)
            r = result[mode]
            print(f"[{mode}] {r['s_per_turn']:.3f} s/turn: " + ", ".join(
                f"{k} {v['s_per_turn']:.3f}" for k, v in r["stages"].items()), file=sys.stderr)
            if "extract_later" in r:
                e = r["extract_later"]
                print(f"[{mode}] then extract(): {e['s_per_turn']:.3f} s/turn: " + ", ".join(
                    f"{k} {v['s_per_turn']:.3f}" for k, v in e["stages"].items()), file=sys.stderr)
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
