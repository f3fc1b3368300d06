"""The relevance floor and the context block on a small invented memory (issue 26): which lines
search and context() give for related, loosely related and unrelated questions, with the floor
measured from each query's own baseline (the default) and, side by side, from the embedder's
constant (query_baseline=False, the floor at 0.2 as before).

Turns only (no extraction model): one user's thirteen turns, five of them the assistant's.

    .venv/bin/python bench/context_floor.py      # writes bench/results/context_floor.json
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from memdb.search import relevance  # noqa: E402
from tests.chats import TURNS  # noqa: E402 - the chat tests/test_context_block.py checks

QUERIES = ["what orchestration tool do we use?", "what data warehouse do we use?", "any food allergies?",
           "where does Signe live?", "what should I cook for Signe tonight?", "what sport does she do?",
           "what is the capital of France?", "how do I bake sourdough bread?", "zzzz qqq"]


def main() -> None:
    out: dict = {"command": ".venv/bin/python bench/context_floor.py",
                 "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "runs": {}}
    runs = {"query baseline, floor 0.1 (default)": memdb.Settings(),
            "constant baseline 0.75, floor 0.2 (before)": memdb.Settings(query_baseline=False, min_similarity=0.2,
                                                                        context_min_share=0.0)}
    with tempfile.TemporaryDirectory() as folder:
        for label, settings in runs.items():
            with memdb.open(Path(folder) / f"{len(out['runs'])}.db", user="signe", extract="defer",
                            settings=settings) as mem:
                mem.add([{"role": role, "content": content, "ts": f"2026-05-{i + 1:02d}T09:00:00",
                          **({"name": "Signe"} if role == "user" else {})} for i, (role, content) in enumerate(TURNS)])
                found = {}
                for query in QUERIES:
                    (vector,) = mem.embedder.embed_query([query])
                    block = mem.context(query, budget=400).splitlines()
                    found[query] = {
                        "baseline": round(relevance.baseline(mem.embedder, vector), 3),
                        "search": [[round(h.score, 3), h.text] for h in mem.search(query, k=10)],
                        "context_lines": len(block[1:]) if block else 0,
                        "context": block,
                    }
                out["runs"][label] = found
    path = ROOT / "bench" / "results" / "context_floor.json"
    path.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    for label, found in out["runs"].items():
        print(f"\n== {label}")
        for query, shown in found.items():
            print(f"{query:42} baseline {shown['baseline']:.3f}  hits {len(shown['search']):2}  "
                  f"context lines {shown['context_lines']:2}")


if __name__ == "__main__":
    main()
