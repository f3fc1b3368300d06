"""What sharing one file costs tenants: bm25's term statistics are file-wide (issue 15, item 7).

FTS5 computes bm25 from counts over the whole table, so what other users say moves a user's
scores (never their rows). Two measurements, keyword-only so that only bm25 is compared:

1. The leak: Mallory stores a turn with "hunter2" and one about her dog; Alice says "hunter2"
   n times. The scores of Mallory's two hits for the query "hunter2 dog", in one shared file
   and in a file of her own (each side of fusion is normalised by its best hit, so the top
   score stays put; the others, and the order, move with the file-wide counts).
2. What each choice costs in recall and speed, on the LoCoMo dev conversations: each
   conversation in a file of its own, against all of them in one file beside `--copies` more
   tenants (copies of the dev conversations under other names, so the shared statistics move
   the way many similar tenants move them). MRR and recall@10 of layer="turns", and search
   latency (median, interleaved per question so machine noise falls on both alike).

    .venv/bin/python bench/tenants.py            # writes bench/results/tenants.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from bench.common import LOCOMO_DEV, evidence, load_conversation, score  # noqa: E402

DATA = LOCOMO_DEV
RESULTS = ROOT / "bench" / "results" / "tenants.json"


def leak(tmp: Path, repeats: tuple[int, ...] = (0, 1, 10, 100)) -> list[dict]:
    out = []
    for n in repeats:
        scores = {}
        for layout in ("shared", "own file"):
            with memdb.open(tmp / f"leak_{n}_{layout}.db", embedder=None, extract="defer") as mem:
                mem.add([{"content": "my old router password was hunter2"}, {"content": "I walk the dog at six"}],
                        user="mallory")
                if layout == "shared":  # other tenants' everyday words, then Alice's
                    mem.add([{"content": f"the weather today, note {i}"} for i in range(50)], user="bob")
                if layout == "shared" and n:
                    mem.add([{"content": f"hunter2 hunter2 is what alice types, time {i}"} for i in range(n)],
                            user="alice")
                hits = mem.search("hunter2 dog", user="mallory", layer="turns")
                scores[layout] = {h.text.split()[-1]: round(h.score, 3) for h in hits}
        out.append({"alice_says_hunter2": n, "mallory_score": scores})
    return out


def recall(tmp: Path, copies: int) -> dict:
    samples = json.loads(DATA.read_text())
    shared = memdb.open(tmp / "shared.db", embedder=None, extract="defer")
    own, maps = {}, {}
    for sample in samples:
        user = sample["sample_id"]
        own[user] = memdb.open(tmp / f"{user}.db", embedder=None, extract="defer")
        maps[user] = {"own": load_conversation(own[user], sample), "shared": load_conversation(shared, sample)}
        for c in range(copies):
            load_conversation(shared, {**sample, "sample_id": f"{user}-tenant{c}"})
    rows: dict[str, list[dict]] = {"own": [], "shared": []}
    times: dict[str, list[float]] = {"own": [], "shared": []}
    for sample in samples:
        user = sample["sample_id"]
        for qa in (q for q in sample["qa"] if q.get("category") != 5 and evidence(q)):
            for layout, mem in (("own", own[user]), ("shared", shared)):
                start = time.perf_counter()
                hits = mem.search(qa["question"], user=user, k=20, layer="turns")
                times[layout].append(time.perf_counter() - start)
                turn_to_dia = {t: d for d, t in maps[user][layout].items()}
                rows[layout].append(score(hits, evidence(qa), turn_to_dia))
    for mem in (shared, *own.values()):
        mem.close()
    out = {}
    for layout in rows:
        out[layout] = {"mrr": round(statistics.mean(r["mrr"] for r in rows[layout]), 4),
                       "recall@10": round(statistics.mean(r["recall@10"] for r in rows[layout]), 4),
                       "search_ms_p50": round(statistics.median(times[layout]) * 1000, 2),
                       "questions": len(rows[layout])}
    out["shared_tenants"] = len(samples) * (copies + 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=9, help="extra tenants per dev conversation in the shared file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = {"command": "bench/tenants.py " + " ".join(sys.argv[1:]), "leak": leak(Path(tmp)),
               "recall": recall(Path(tmp), args.copies)}
    print(json.dumps(out, indent=1))
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
