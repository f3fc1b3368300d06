"""The relevance floor and the common-term share, chosen on the LoCoMo dev split.

For each setting, every dev question with evidence is asked of its own conversation's file
(recall@5/10/20 and MRR must not fall against the setting that keeps everything) and of the
other conversation's file, where nothing answers it (how many hits are noise: fewer is better).
The files are the real pipeline's (bench/qa_prepare.py: extraction, lifecycle); they are only
read, through copies.

    cp -r bench/results/qa/db /tmp/qa_db     # the files qa_prepare.py built; searched, never changed
    .venv/bin/python bench/relevance_floor.py --db-dir /tmp/qa_db

The result (bench/results/relevance_floor.json): recall@5/10/20 stay exactly as without a floor
up to a cosine of 0.3 in every layer and fall from 0.35 on; the shares 0.3 and 0.5 change
nothing on LoCoMo (two speakers, neither name in more than half the rows of a file). The
default floor is 0.2, not 0.3: the bundled sample's "Any good space opera to recommend?" finds
"Bob loves sci-fi movies" at a cosine of 0.25 (MiniLM), which 0.3 drops.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from bench.common import LOCOMO_DEV, built_file, evidence, score  # noqa: E402
from memdb.search import fusion as search_fusion  # noqa: E402

K = 20
LAYERS = ("both", "atoms", "turns")
# (min_similarity, common_term_share): -1 and 1.0 keep everything, as before the floor.
SETTINGS = [(-1.0, 1.0), (0.1, 1.0), (0.2, 1.0), (0.3, 1.0), (0.35, 1.0), (0.4, 1.0), (0.45, 1.0),
            (-1.0, 0.3), (-1.0, 0.5), (0.3, 0.5), (0.35, 0.5)]


def run(data: Path, db_dir: Path) -> dict:
    samples = json.loads(data.read_text())
    files = {}
    for sample in samples:
        mem = memdb.open(db_dir / f"{sample['sample_id']}.db", extract="defer")
        dia_to_turn = built_file(mem, sample)
        qas = [q for q in sample["qa"] if q.get("category") != 5 and evidence(q)]
        files[sample["sample_id"]] = (mem, {t: d for d, t in dia_to_turn.items()}, qas,
                                      mem.embedder.embed([q["question"] for q in qas]))
    out = {}
    for floor, share in SETTINGS:
        for layer in LAYERS:
            own, noise = [], []
            for user, (mem, turn_to_dia, qas, qvecs) in files.items():
                settings = dataclasses.replace(mem.settings, min_similarity=floor, common_term_share=share)
                others = [(u, f) for u, f in files.items() if u != user]
                for qa, qvec in zip(qas, qvecs):
                    hits = _search(mem, user, qa["question"], qvec, layer, settings)
                    own.append({**score(hits, evidence(qa), turn_to_dia), "hits": len(hits)})
                    for other, (other_mem, *_rest) in others:  # no answer there: every hit is noise
                        noise.append(len(_search(other_mem, other, qa["question"], qvec, layer, settings)))
            key = f"floor={floor} share={share} layer={layer}"
            out[key] = {**{k: round(statistics.fmean(r[k] for r in own), 4) for k in own[0]},
                        "n": len(own), "noise_hits": round(statistics.fmean(noise), 2)}
            print(key, out[key], file=sys.stderr)
    for mem, *_ in files.values():
        mem.close()
    return out


def _search(mem, user, question, qvec, layer, settings):
    return search_fusion.search(mem.conn, search_fusion.Query(
        question, user=user, k=K, layer=layer, vector=qvec, cosine_baseline=getattr(mem.embedder, "cosine_baseline", 0.0)),
        search_fusion.Engine(settings, copies=mem.copies, term_counts=mem.term_counts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=LOCOMO_DEV)
    parser.add_argument("--db-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "relevance_floor.json")
    args = parser.parse_args()
    result = {"command": "python " + " ".join(sys.argv), "data": args.data.name, "k": K,
              "results": run(args.data, args.db_dir)}
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
