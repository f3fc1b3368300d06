"""Several processes share one memdb file: writers add(), readers search(), for a bounded time.

First, all the processes open one new file at the same moment and add a turn, again and
again (--first-open-rounds): schema creation, the WAL switch and the vector tables race.
Then the timed run: every process opens one more new file at the same moment, with its own
Memory, the test suite's HashEmbedder and extract="defer". Writers add 1-3 messages at a time and now and then extract their own user's
pending turns with a scripted model, so atoms are written concurrently too; readers search
and build context for random users. Afterwards the file is checked:

- no error reached any caller (busy waits are absorbed by the busy timeout);
- every id add() returned is in the file, and the file holds exactly those turns;
- `pragma integrity_check` is ok and the FTS and vector indexes agree with their tables.

    .venv/bin/python bench/stress_concurrency.py --seconds 60      # writes bench/results/stress_concurrency.json
    .venv/bin/python bench/stress_concurrency.py --seconds 4 --first-open-rounds 0 --out /tmp/x.json  # the suite's

Also importable: `check_file(conn)` and `EchoLLM` are shared with bench/stress_kill.py.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import random
import re
import shlex
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import apsw  # noqa: E402

import memdb  # noqa: E402
from tests.conftest import HashEmbedder  # noqa: E402

WORDS = ("coffee tea lisbon piano garden python postgres hiking ferry violin cedar harbour "
         "quartz maple ember falcon lantern meadow orbit pebble").split()


class EchoLLM:
    """A scripted extraction model: one atom per line to extract from (marked "*", or numbered
    in older prompts), made of that line's last words, so every atom passes grounding and the
    pipeline writes real atoms."""

    name = "echo-llm"
    sha256 = "e" * 64
    _SOURCE_LINE = re.compile(r"^(?:\*|\d+) ([^:]+): (.*)$")

    def complete(self, messages: list[dict[str, str]], *, schema: dict, max_tokens: int) -> str:
        # The turns are in the last user message (a trailing assistant message is a prefill,
        # which the reply must repeat: the full compact JSON does).
        asked = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        atoms = []
        for line in asked.splitlines():
            found = self._SOURCE_LINE.match(line)
            if found:
                words = found.group(2).split()
                atoms.append({"kind": "fact", "subject": found.group(1), "predicate": "keeps",
                              "object": " ".join(words[-4:])})
        return json.dumps({"a": atoms}, separators=(",", ":"), ensure_ascii=False)


def check_file(conn: apsw.Connection) -> list[str]:
    """What is wrong with a memdb file: integrity, foreign keys, every FTS and vector index
    against its table (same count, same ids), and the vectors' active flags. An empty list
    when all is well."""
    problems = []
    integrity = [r[0] for r in conn.execute("pragma integrity_check")]
    if integrity != ["ok"]:
        problems.append(f"integrity_check: {integrity[:5]}")
    fk = conn.execute("pragma foreign_key_check").fetchall()
    if fk:
        problems.append(f"foreign_key_check: {fk[:5]}")
    pairs = [("turns", "turns_fts", "rowid"), ("turns", "turns_vec", "turn_id"),
             ("atoms", "atoms_fts", "rowid"), ("atoms", "atoms_vec", "atom_id")]
    for table, index, key in pairs:
        rows = [r[0] for r in conn.execute(f'select "id" from "{table}" order by 1')]
        indexed = sorted(r[0] for r in conn.execute(f'select {key} from "{index}"'))
        if rows != indexed:
            missing, extra = set(rows) - set(indexed), set(indexed) - set(rows)
            problems.append(f"{index} disagrees with {table}: {len(rows)} rows, {len(indexed)} indexed, "
                            f"missing {sorted(missing)[:5]}, extra {sorted(extra)[:5]}")
    # The vector's 'active' flag filters KNN: it must follow the atom's status (1 = superseded).
    flags = dict(conn.execute("select atom_id, active from atoms_vec").fetchall())
    stale = [i for i, status in conn.execute('select "id", "status" from "atoms"')
             if i in flags and flags[i] != int(status != 1)]
    if stale:
        problems.append(f"atoms_vec.active disagrees with atoms.status for atoms {stale[:5]}")
    return problems


NO_MODEL = "/nonexistent/no-model.gguf"


def _open(path: str, llm: Any = NO_MODEL) -> memdb.Memory:
    # No extraction model on disk: context() budgets with the token estimate instead of loading
    # a tokenizer in every process, so the CPU goes to SQLite; writers script the model (EchoLLM).
    return memdb.open(path, embedder=HashEmbedder(), llm=llm, extract="defer")


def _open_or_report(path: str, out: dict[str, Any], results: Any, llm: Any = NO_MODEL) -> memdb.Memory | None:
    """The worker's Memory, or None after reporting why it could not open (an error, not a hang)."""
    try:
        return _open(path, llm)
    except Exception:
        out["errors"].append(traceback.format_exc())
        results.put(out)
        return None


def _writer(path: str, n: int, deadline_s: float, start: Any, results: Any) -> None:
    rng = random.Random(n)
    out: dict[str, Any] = {"role": "writer", "n": n, "ids": [], "adds": 0, "extracts": 0, "errors": []}
    start.wait()
    deadline = time.monotonic() + deadline_s
    mem = _open_or_report(path, out, results, llm=EchoLLM())
    if mem is None:
        return
    while time.monotonic() < deadline:
        try:
            messages = [{"role": rng.choice(["user", "user", "assistant"]),
                         "content": f"I keep {' '.join(rng.sample(WORDS, 3))} w{n}x{out['adds']}y{i}"}
                        for i in range(rng.randint(1, 3))]
            out["ids"] += mem.add(messages, user=f"user{n}", session=f"s{rng.randint(1, 3)}")
            out["adds"] += 1
            if rng.random() < 0.1:  # one user per writer: two processes never extract the same turns
                mem.extract(user=f"user{n}", limit=6)
                out["extracts"] += 1
        except Exception:
            out["errors"].append(traceback.format_exc())
    mem.close()
    results.put(out)


def _reader(path: str, n: int, deadline_s: float, writers: int, start: Any, results: Any) -> None:
    rng = random.Random(1000 + n)
    out: dict[str, Any] = {"role": "reader", "n": n, "searches": 0, "hits": 0, "errors": []}
    start.wait()
    deadline = time.monotonic() + deadline_s
    mem = _open_or_report(path, out, results)
    if mem is None:
        return
    while time.monotonic() < deadline:
        try:
            user = f"user{rng.randrange(writers)}"
            query = " ".join(rng.sample(WORDS, 2))
            if rng.random() < 0.2:
                mem.context(query, user=user, budget=200)
            else:
                out["hits"] += len(mem.search(query, user=user, k=5))
            out["searches"] += 1
        except Exception:
            out["errors"].append(traceback.format_exc())
    mem.close()
    results.put(out)


def run(path: str, seconds: float, writers: int, readers: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    start, results = ctx.Barrier(writers + readers + 1), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, n, seconds, start, results)) for n in range(writers)]
    procs += [ctx.Process(target=_reader, args=(path, n, seconds, writers, start, results)) for n in range(readers)]
    for p in procs:
        p.start()
    start.wait(timeout=120)  # every interpreter has imported memdb: now all open the new file at once
    started = time.monotonic()
    outs = []
    for _ in procs:  # drain before join: a child with a full pipe cannot exit
        try:
            outs.append(results.get(timeout=seconds + 120))
        except queue.Empty:  # a child died without reporting (its exit code says how)
            outs.append({"role": "lost", "errors": ["a worker process exited without reporting"]})
    for p in procs:
        p.join(timeout=60)
    elapsed = time.monotonic() - started
    ids = [i for o in outs if o["role"] == "writer" for i in o["ids"]]
    with _open(path) as mem:
        held = {r[0] for r in mem.conn.execute('select "id" from "turns"')}
        problems = check_file(mem.conn)
        atoms = mem.conn.execute('select count(*) from "atoms"').fetchone()[0]
    errors = [e for o in outs for e in o["errors"]]
    return {
        "seconds": round(elapsed, 1),
        "writers": writers,
        "readers": readers,
        "adds": sum(o.get("adds", 0) for o in outs),
        "turns_added": len(ids),
        "extract_calls": sum(o.get("extracts", 0) for o in outs),
        "atoms_written": atoms,
        "searches": sum(o.get("searches", 0) for o in outs),
        "operations": sum(o.get("adds", 0) + o.get("extracts", 0) + o.get("searches", 0) for o in outs),
        "turns_in_file": len(held),
        "rows_lost": len(set(ids) - held),
        "rows_unexpected": len(held - set(ids)),
        "duplicate_ids": len(ids) - len(set(ids)),
        "errors": len(errors),
        "error_samples": errors[:3],
        "exit_codes": [p.exitcode for p in procs],
        "file_problems": problems,
    }


def _first_opener(folder: str, rounds: int, start: Any, results: Any) -> None:
    errors = []
    for r in range(rounds):
        start.wait(timeout=120)
        try:
            with _open(str(Path(folder) / f"new{r}.db")) as mem:
                mem.add([{"content": f"first words in file {r}"}], user=f"opener{os.getpid()}")
        except Exception:
            errors.append(traceback.format_exc())
    results.put(errors)


def first_opens(folder: str, rounds: int, processes: int) -> dict[str, Any]:
    """`processes` processes open the same new file at the same moment and add one turn each,
    `rounds` times: schema creation, the WAL switch and the vector tables all race."""
    if rounds == 0:
        return {"first_open_rounds": 0, "first_open_errors": 0, "first_open_bad_files": [],
                "first_open_error_samples": []}
    ctx = mp.get_context("spawn")
    start, results = ctx.Barrier(processes), ctx.Queue()
    procs = [ctx.Process(target=_first_opener, args=(folder, rounds, start, results)) for _ in range(processes)]
    for p in procs:
        p.start()
    errors = [e for _ in procs for e in results.get(timeout=120 + 10 * rounds)]
    for p in procs:
        p.join(timeout=60)
    bad = []
    for r in range(rounds):
        with _open(str(Path(folder) / f"new{r}.db")) as mem:
            turns = mem.conn.execute('select count(*) from "turns"').fetchone()[0]
            problems = check_file(mem.conn)
        if turns != processes or problems:
            bad.append({"round": r, "turns": turns, "problems": problems})
    return {"first_open_rounds": rounds, "first_open_processes": processes, "first_open_errors": len(errors),
            "first_open_bad_files": bad, "first_open_error_samples": errors[:3]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--first-open-rounds", type=int, default=40,
                        help="rounds of all processes opening one new file at once (before the timed run)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "stress_concurrency.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        opens = first_opens(tmp, args.first_open_rounds, args.writers + args.readers)
        report = {**run(str(Path(tmp) / "shared.db"), args.seconds, args.writers, args.readers), **opens}
    report = {"command": " ".join(shlex.quote(a) for a in [".venv/bin/python", "bench/stress_concurrency.py", *sys.argv[1:]]),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(), **report}
    ok = not (report["rows_lost"] or report["rows_unexpected"] or report["errors"] or report["file_problems"]
              or any(report["exit_codes"]) or report["first_open_errors"] or report["first_open_bad_files"])
    report["ok"] = ok
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if not k.endswith("error_samples")}, indent=2))
    for sample in report["error_samples"] + report["first_open_error_samples"]:
        print(sample, file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
