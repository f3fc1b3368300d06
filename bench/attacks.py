"""What the issue 25 fixes cost, and how often the privacy rules fire on real dialogue.

- query bound: search() and context() with a 10 MB query against a short one, on 2,000 turns
  (before the bound, the 10 MB query took 19 s on the bench machine; the bound searches its
  first recall.MAX_QUERY_CHARS characters);
- forget in place: forget(turn_id=) on a 10,000-turn file, median of 20, now that an in-place
  delete tokenizes the row and looks for a gone term's prefix in %_idx (forget.scrubbed_fts);
- privacy rules on the dev data (../shared/data): how many dialogue texts context() would
  withhold a sentence of, how many forge a role marker, how many gold atoms the filter drops.
  Only counts are written, never a line of the data.

    flock /tmp/memdb-cpu.lock .venv/bin/python bench/attacks.py [--shared ../shared]
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from memdb import privacy, recall  # noqa: E402
from tests.conftest import HashEmbedder  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "attacks.json"


def _median_ms(run, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1000, 2)


def query_bound(folder: str) -> dict:
    with memdb.open(f"{folder}/q.db", embedder=HashEmbedder(), extract="defer") as mem:
        mem.add([{"content": f"turn {i} about the garden and word{i}x"} for i in range(2000)], user="bob")
        short = "what about the garden"
        huge = (short + " ") * (10_000_000 // (len(short) + 1))
        out = {"max_query_chars": recall.MAX_QUERY_CHARS, "huge_query_chars": len(huge)}
        for name, query in (("short", short), ("huge", huge)):
            out[f"search_{name}_ms"] = _median_ms(lambda: mem.search(query, user="bob"), 5)
            out[f"context_{name}_ms"] = _median_ms(lambda: mem.context(query, user="bob"), 5)
    out["search_ratio_huge_to_short"] = round(out["search_huge_ms"] / out["search_short_ms"], 2)
    return out


def forget_in_place(folder: str) -> dict:
    """With the %_idx prefix check, and without it (the baseline: what forget cost before), on
    two copies of one file built alike."""
    from memdb.db import forget

    checked = _forgets(f"{folder}/f1.db")
    real_terms = forget._terms
    forget._terms = lambda conn, table, rowids: set()  # no terms: no prefix looked for
    try:
        baseline = _forgets(f"{folder}/f2.db")
    finally:
        forget._terms = real_terms
    return {"with_check": checked, "baseline": baseline,
            "ratio_median": round(checked["median_ms"] / baseline["median_ms"], 2)}


def _forgets(path: str) -> dict:
    with memdb.open(path, embedder=None, extract="defer") as mem:
        ids = []
        for block in range(10):
            ids += mem.add([{"content": f"turn {block} {i} about the garden and word{block * 1000 + i}x"}
                            for i in range(1000)], user="bob")
        times = []
        for turn_id in ids[::500]:
            start = time.perf_counter()
            mem.forget(user="bob", turn_id=turn_id)
            times.append(time.perf_counter() - start)
    return {"turns": len(ids), "forgets": len(times), "median_ms": round(statistics.median(times) * 1000, 2),
            "max_ms": round(max(times) * 1000, 2)}


def privacy_on_dev(data: Path) -> dict:
    texts = withheld = forged = 0

    def walk(value: object) -> None:
        nonlocal texts, withheld, forged
        if isinstance(value, dict):
            for key, inner in value.items():
                if key in ("text", "content", "query", "response") and isinstance(inner, str):
                    texts += 1
                    withheld += privacy.names_secret(inner)
                    forged += privacy.forges_role(inner)
                else:
                    walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    for name in ("locomo_dev.json", "memorybank_cn_dev.json"):
        walk(json.loads((data / name).read_text(encoding="utf-8")))
    atoms = dropped = 0
    for path in sorted(glob.glob(str(data / "atoms_gold" / "dev_*.json"))):
        for turn in json.loads(Path(path).read_text(encoding="utf-8"))["turns"]:
            for gold in turn.get("gold", []):
                words = [*gold.get("subject", []), *(w for alt in gold.get("keys", []) for w in alt)]
                atoms += 1
                dropped += privacy.names_secret(" ".join(map(str, words)))
    return {"dialogue_texts": texts, "texts_with_a_withheld_sentence": withheld, "texts_forging_a_role": forged,
            "gold_atoms": atoms, "gold_atoms_dropped": dropped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default=str(ROOT.parent / "shared"), help="the shared folder (dev data)")
    data = Path(parser.parse_args().shared) / "data"
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as folder:
        result = {"query_bound": query_bound(folder), "forget_in_place": forget_in_place(folder),
                  "privacy_on_dev": privacy_on_dev(data) if data.is_dir() else None,
                  "command": "flock /tmp/memdb-cpu.lock .venv/bin/python bench/attacks.py --shared ../shared"}
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
