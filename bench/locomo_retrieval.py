"""LoCoMo retrieval evaluation: recall@5/10/20, MRR and tokens per query, per layer and fusion.

Loads the conversations of a LoCoMo file into memdb files (one user per conversation), adds
extracted atoms from a JSONL file (bench/extract_locomo.py writes one) through the lifecycle,
then asks every question with evidence (category 5, adversarial, is skipped). Hits map to
dia_ids through their source turns. Baselines computed in the same run: plain BM25 and plain
vector search over raw turns. Also sweeps alpha from 0 to 1 per intent class and plots it.

    .venv/bin/python bench/locomo_retrieval.py --atoms /tmp/locomo_dev_atoms.jsonl
    .venv/bin/python bench/locomo_retrieval.py --db-dir bench/results/qa/db   # files qa_prepare.py built
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from memdb.models import embedders  # noqa: E402
from memdb.search import context as search_context  # noqa: E402
from memdb.search import fusion as search_fusion  # noqa: E402
from memdb.search import query as search_query  # noqa: E402
from bench.common import (LOCOMO_DEV, built_file, evidence, load_atoms, load_conversation,  # noqa: E402
                          mean_scores, score)

CONFIGS = {
    # name: (layer, fusion, alpha) — alpha None: chosen by the query's intent
    "bm25_turns": ("turns", "weighted", 1.0),
    "vector_turns": ("turns", "weighted", 0.0),
    "turns_weighted": ("turns", "weighted", None),
    "turns_rrf": ("turns", "rrf", None),
    "atoms_weighted": ("atoms", "weighted", None),
    "atoms_rrf": ("atoms", "rrf", None),
    "both_weighted": ("both", "weighted", None),
    "both_rrf": ("both", "rrf", None),
}


def run(data: Path, atoms: Path | None, sweep: bool, db_dir: Path | None = None, embedder: str = "default",
        atom_weights: tuple[float, ...] = ()) -> dict:
    samples = json.loads(data.read_text())
    results: dict[str, list[dict]] = defaultdict(list)
    sweep_rows: dict[tuple, list[dict]] = defaultdict(list)
    latencies: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for sample in samples:
            user = sample["sample_id"]
            if db_dir:  # extracted by the real pipeline: atoms as memdb keeps them
                mem = memdb.open(db_dir / f"{user}.db", extract="defer")  # the embedder the file records
                dia_to_turn = built_file(mem, sample)
                n_atoms = mem.stats()["atoms"]
            else:
                mem = memdb.open(Path(tmp) / f"{user}.db", embedder=embedder, extract="defer")
                dia_to_turn = load_conversation(mem, sample)
                n_atoms = load_atoms(mem, user, atoms, dia_to_turn) if atoms else 0
            turn_to_dia = {t: d for d, t in dia_to_turn.items()}
            qas = [q for q in sample["qa"] if q.get("category") != 5 and evidence(q)]
            qvecs = embedders.query_vectors(mem.embedder, [q["question"] for q in qas])  # the query role
            print(f"{user}: {len(dia_to_turn)} turns, {n_atoms} atoms read, "
                  f"{mem.stats()['atoms']} atoms after dedup, {len(qas)} questions", file=sys.stderr)
            for qa, qvec in zip(qas, qvecs):
                gold, intent = evidence(qa), search_query.intent(qa["question"])
                weights = {f"both_atom_weight{w}": ("both", "weighted", None, w) for w in atom_weights}
                configs = {name: (*config, None) for name, config in CONFIGS.items()}
                for name, (layer, fusion, alpha, weight) in {**configs, **weights}.items():
                    if layer != "turns" and not (atoms or db_dir):
                        continue
                    settings = dataclasses.replace(mem.settings, atom_weight=weight) if weight else mem.settings
                    t0 = time.perf_counter()
                    hits = search_fusion.search(mem.conn, search_fusion.Query(
                        qa["question"], user=user, k=20, layer=layer, vector=qvec, fusion=fusion, alpha=alpha,
                        cosine_baseline=getattr(mem.embedder, "cosine_baseline", 0.0)), search_fusion.Engine(
                        settings, copies=mem.copies, term_counts=mem.term_counts))
                    latencies.append(time.perf_counter() - t0)
                    row = score(hits, gold, turn_to_dia)
                    # Tokens of what search returns (the hits' text) and of the same hits
                    # rendered as context lines (date · kind/speaker · text).
                    row["text_tokens@10"] = sum(mem.count_tokens(h.text) for h in hits[:10])
                    row["tokens@10"] = sum(mem.count_tokens(search_context.render_line(h) + "\n") for h in hits[:10])
                    row["intent"] = intent
                    results[name].append(row)
                if sweep:
                    for layer in (("atoms", "both", "turns") if atoms or db_dir else ("turns",)):
                        for a in np.round(np.linspace(0, 1, 11), 1):
                            hits = search_fusion.search(mem.conn, search_fusion.Query(
                                qa["question"], user=user, k=20, layer=layer, vector=qvec, fusion="weighted",
                                alpha=float(a), cosine_baseline=getattr(mem.embedder, "cosine_baseline", 0.0)),
                                search_fusion.Engine(mem.settings, copies=mem.copies, term_counts=mem.term_counts))
                            sweep_rows[(layer, intent, float(a))].append(score(hits, gold, turn_to_dia))
            mem.close()
    summary = {name: mean_scores(rows) for name, rows in results.items()}
    by_intent = {name: {i: mean_scores([r for r in rows if r["intent"] == i]) for i in sorted({r["intent"] for r in rows})}
                 for name, rows in results.items()}
    sweep_out = defaultdict(dict)
    for (layer, intent, a), rows in sorted(sweep_rows.items()):
        sweep_out[f"{layer}/{intent}"][str(a)] = mean_scores(rows)
    return {"summary": summary, "by_intent": by_intent, "sweep": sweep_out,
            "search_ms_median": 1000 * statistics.median(latencies) if latencies else None}


def plot(sweep: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = sorted({k.split("/")[0] for k in sweep})
    fig, axes = plt.subplots(1, len(layers), figsize=(5 * len(layers), 4), squeeze=False)
    for ax, layer in zip(axes[0], layers):
        for key, points in sweep.items():
            if key.startswith(layer + "/"):
                xs = [float(a) for a in points]
                ax.plot(xs, [points[a]["mrr"] for a in points], marker="o", label=f"{key.split('/')[1]} (n={next(iter(points.values()))['n']})")
        ax.set_title(f"layer={layer}: MRR vs alpha (1 = keyword only)")
        ax.set_xlabel("alpha")
        ax.set_ylabel("MRR")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=LOCOMO_DEV)
    parser.add_argument("--atoms", type=Path, default=None, help="JSONL of extracted atoms")
    parser.add_argument("--db-dir", type=Path, default=None,
                        help="read the files bench/qa_prepare.py built (the real pipeline) instead of --atoms")
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--embedder", default="default", help="for new files: 'default' (e5) or 'minilm'")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "locomo_retrieval.json")
    parser.add_argument("--atom-weights", type=float, nargs="*", default=[],
                        help="also rank `both` with these atom weights (Settings.atom_weight)")
    args = parser.parse_args()
    result = run(args.data, args.atoms, not args.no_sweep, args.db_dir, args.embedder, tuple(args.atom_weights))
    result["command"] = "python " + " ".join(sys.argv)
    result["data"] = args.data.name
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    if result["sweep"]:
        plot(result["sweep"], args.out.with_suffix(".png"))
    print(f"{'config':16} {'R@5':>6} {'R@10':>6} {'R@20':>6} {'MRR':>6} {'text@10':>7} {'lines@10':>8}")
    for name, m in result["summary"].items():
        print(f"{name:16} {m['recall@5']:6.3f} {m['recall@10']:6.3f} {m['recall@20']:6.3f} {m['mrr']:6.3f} "
              f"{m['text_tokens@10']:7.0f} {m['tokens@10']:8.0f}")


if __name__ == "__main__":
    main()
