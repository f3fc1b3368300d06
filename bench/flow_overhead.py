"""What memdb's orchestration costs per call with no extraction model time: add() with
extract="now" (store, extract, absorb, layers) and context() with scenario blocks and the persona
card, each the median of --turns calls, on invented turns of one user, with a scripted model (one
note per turn, from the turn's words) and MiniLM on one thread (the cheapest real embedder).

For comparing two trees in the same run (issue 27: moving the flow into flow.py and recall.py
must cost nothing): run each tree with its own PYTHONPATH, alternating, and compare the medians.
"held" (turns, atoms, scenarios, persona lines) must be equal across trees, since the same turns
give the same memory; so must the SQL statements run per call (counted by an apsw exec tracer):
the same work, whatever the timing noise of a shared machine.

    for r in 1 2 3; do for t in /tmp/base .; do
      PYTHONPATH=$t flock /tmp/memdb-cpu.lock .venv/bin/python bench/flow_overhead.py --turns 200; done; done
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import memdb

THINGS = ["green tea", "sourdough bread", "the harbour ferry", "chess openings", "rock climbing", "old maps",
          "jazz records", "the night market", "paper cranes", "mountain trails", "violin lessons", "tomato soup"]
OPENERS = ["I really like", "These days I enjoy", "I stopped liking", "My friend showed me", "I keep thinking about"]


class EchoLLM:
    """One note per turn: the speaker likes the turn's last two longer words."""

    name, sha256 = "echo", "e" * 64

    def complete(self, messages: list[dict], *, schema: dict, max_tokens: int) -> str:
        words = [w for w in messages[-1]["content"].replace(".", " ").split() if w.isalpha() and len(w) > 3][-2:]
        return json.dumps({"a": [f"Mira | likes | {' '.join(words) or 'tea'}"]})


def measure(turns: int) -> dict:
    adds, contexts = [], []
    statements = {"add": 0, "context": 0}
    phase = "add"

    def count(cursor: object, sql: str, bindings: object) -> bool:
        statements[phase] += 1
        return True

    with tempfile.TemporaryDirectory() as tmp:
        settings = memdb.Settings(model_worker=False, extract_rules_cover=1.0)  # the model reads every turn
        with memdb.open(Path(tmp) / "flow.db", embedder="minilm", llm=EchoLLM(), user="mira", threads=1,
                        settings=settings) as mem:
            mem.conn.exec_trace = count
            for i in range(turns):
                line = f"{OPENERS[i % len(OPENERS)]} {THINGS[(i * 7) % len(THINGS)]} since week {i}."
                start = time.perf_counter()
                mem.add([{"role": "user", "name": "Mira", "content": line,
                          "ts": f"2026-03-{1 + i % 28:02d}T10:{i % 60:02d}:00"}], session=f"s{i // 20}")
                adds.append(time.perf_counter() - start)
            phase = "context"
            for i in range(turns):
                start = time.perf_counter()
                mem.context(f"what does Mira think of {THINGS[i % len(THINGS)]}?", scenarios=True, persona=True)
                contexts.append(time.perf_counter() - start)
            held = mem.stats()
            shown = (held["turns"], held["atoms"], len(mem.scenarios(limit=1000)), len(mem.persona().splitlines()))
    return {"add_ms_median": round(1000 * statistics.median(adds), 3),
            "context_ms_median": round(1000 * statistics.median(contexts), 3), "held": list(shown),
            "sql_per_add": round(statements["add"] / turns, 2), "sql_per_context": round(statements["context"] / turns, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    print(json.dumps({"tree": str(Path(memdb.__file__).parent.parent), **measure(parser.parse_args().turns)}))


if __name__ == "__main__":
    main()
