"""The date side's weight (Settings.date_weight) on MemoryBank-cn dev, tuned on 3 users and
checked on the other 2: R@10 and MRR of layers turns and both per weight and split.

    .venv/bin/python bench/memorybank_date_weight.py --built /tmp/memorybank_cn_built
    # -> bench/results/memorybank_date_weight.json

15 of the 35 questions name a day ("在5月4日我向你咨询了…"); the files are the ones
bench/memorybank_retrieval.py extracts (default embedder), searched as that bench does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from bench.common import score  # noqa: E402
from bench.memorybank_retrieval import DATA, evidence_of  # noqa: E402
from memdb.models import embedders  # noqa: E402
from memdb.search import fusion as search_fusion  # noqa: E402

WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 1.0)
TUNE = 3  # the first users of the file tune, the rest check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--built", type=Path, required=True, help="folder of extracted files (bench/memorybank_retrieval.py)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "memorybank_date_weight.json")
    args = parser.parse_args()
    data = json.loads(DATA.read_text(encoding="utf-8"))["users"]
    tune = list(data)[:TUNE]
    scores: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for user, u in data.items():
            path = Path(tmp) / "u.db"
            shutil.copyfile(args.built / f"{user}.db", path)
            with memdb.open(path, extract="defer") as mem:
                turn_to_ev = evidence_of(mem, user, u["history"])
                for qa in u["questions"]:
                    qvec = embedders.query_vectors(mem.embedder, [qa["q"]])[0]
                    for w in WEIGHTS:
                        settings = dataclasses.replace(mem.settings, date_weight=w)
                        for layer in ("turns", "both"):
                            hits = search_fusion.search(mem.conn, search_fusion.Query(
                                qa["q"], user=user, k=20, layer=layer, vector=qvec,
                                cosine_baseline=mem.embedder.cosine_baseline),
                                search_fusion.Engine(settings, copies=mem.copies, term_counts=mem.term_counts))
                            s = score(hits, set(qa["evidence"]), turn_to_ev)
                            for split in ("tune" if user in tune else "check", "all"):
                                scores.setdefault(f"w{w} {layer} {split}", []).append((s["recall@10"], s["mrr"]))
            for f in Path(tmp).iterdir():
                f.unlink()
    summary = {k: {"n": len(v), "recall@10": round(statistics.fmean(r for r, _ in v), 3),
                   "mrr": round(statistics.fmean(m for _, m in v), 3)} for k, v in scores.items()}
    out = {"command": "python " + " ".join(sys.argv), "tune_users": tune, "check_users": list(data)[TUNE:],
           "summary": summary}
    args.out.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    for k, s in summary.items():
        print(f"{k:20s} n={s['n']:2d} R@10={s['recall@10']:.3f} MRR={s['mrr']:.3f}")


if __name__ == "__main__":
    main()
