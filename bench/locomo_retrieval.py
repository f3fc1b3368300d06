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
import datetime as dt
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
from memdb import codec  # noqa: E402
from memdb.db import connection  # noqa: E402
from memdb.lifecycle import absorb  # noqa: E402
from memdb.models import embedders  # noqa: E402
from memdb.search import context as search_context  # noqa: E402
from memdb.search import fusion as search_fusion  # noqa: E402
from memdb.search import query as search_query  # noqa: E402

KS = (5, 10, 20)


def parse_session_time(value: str) -> dt.datetime:
    """LoCoMo's '1:56 pm on 8 May, 2023'."""
    return dt.datetime.strptime(value.replace(" on ", " ").replace(",", ""), "%I:%M %p %d %B %Y")


def turn_text(turn: dict) -> str:
    text = turn["text"]
    if turn.get("blip_caption"):
        text += f" [shares a photo: {turn['blip_caption']}]"
    return text


def load_conversation(mem: memdb.Memory, sample: dict) -> dict[str, int]:
    """Add every session of a LoCoMo sample; returns dia_id -> turn id."""
    conv, user = sample["conversation"], sample["sample_id"]
    dia_to_turn: dict[str, int] = {}
    n = 1
    while f"session_{n}" in conv:
        start = parse_session_time(conv[f"session_{n}_date_time"])
        turns = conv[f"session_{n}"]
        messages = [
            {"role": "user", "name": t["speaker"], "content": turn_text(t),
             "ts": (start + dt.timedelta(seconds=30 * i)).isoformat()}
            for i, t in enumerate(turns)
        ]
        ids = mem.add(messages, user=user, session=f"session_{n}")
        dia_to_turn.update({t["dia_id"]: i for t, i in zip(turns, ids)})
        n += 1
    return dia_to_turn


def load_atoms(mem: memdb.Memory, user: str, path: Path, dia_to_turn: dict[str, int]) -> int:
    """Absorb extracted atoms (one JSON object a line with record, confidence, dia_ids, conv)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("conv") == user]
    records = [codec.validate(r["record"]) for r in rows]
    vectors = mem.embedder.embed([codec.canonical_text(r) for r in records])
    ts_of = {t["id"]: t["ts"] for t in mem.turns(sorted(dia_to_turn.values()), user=user)}
    with connection.write(mem.conn):
        for row, record, vector in zip(rows, records, vectors):
            turn_ids = [dia_to_turn[d] for d in row["dia_ids"] if d in dia_to_turn]
            if not turn_ids:
                continue
            absorb.absorb(mem.conn, user=user, record=record, confidence=row.get("confidence", 0.8),
                          turn_ids=turn_ids, ts=max(ts_of[t] for t in turn_ids), vector=vector,
                          settings=mem.settings, multilingual=getattr(mem.embedder, "multilingual", True))
            mem.conn.execute('update "turns" set "state" = 1 where "id" in (%s)' % ",".join("?" * len(turn_ids)), turn_ids)
    return len(rows)


def evidence(qa: dict) -> set[str]:
    return {e.strip() for ev in qa["evidence"] for e in ev.split(";") if e.strip()}


def score(hits: list[memdb.Hit], gold: set[str], turn_to_dia: dict[int, str]) -> dict[str, float]:
    covered: list[set[str]] = [{turn_to_dia[t] for t in h.turn_ids if t in turn_to_dia} for h in hits]
    out = {}
    for k in KS:
        found = set().union(*covered[:k]) if covered[:k] else set()
        out[f"recall@{k}"] = len(found & gold) / len(gold)
    rank = next((i + 1 for i, c in enumerate(covered) if c & gold), None)
    out["mrr"] = 1.0 / rank if rank else 0.0
    return out


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


def built_file(mem: memdb.Memory, sample: dict) -> dict[str, int]:
    """dia_id -> turn id of a file built by bench/qa_prepare.py (the real pipeline: extraction,
    lifecycle, turn states): its turns were added in dialogue order, so ids ascend with dia_ids."""
    conv, dia_ids, n = sample["conversation"], [], 1
    while f"session_{n}" in conv:
        dia_ids += [t["dia_id"] for t in conv[f"session_{n}"]]
        n += 1
    ids = [t["id"] for t in mem.export(sample["sample_id"]) if t["type"] == "turn"]
    if len(ids) != len(dia_ids):
        raise SystemExit(f"{sample['sample_id']}: the file holds {len(ids)} turns, the data {len(dia_ids)}")
    return dict(zip(dia_ids, ids))


def run(data: Path, atoms: Path | None, sweep: bool, db_dir: Path | None = None, embedder: str = "default") -> dict:
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
                for name, (layer, fusion, alpha) in CONFIGS.items():
                    if layer != "turns" and not (atoms or db_dir):
                        continue
                    t0 = time.perf_counter()
                    hits = search_fusion.search(mem.conn, search_fusion.Query(
                        qa["question"], user=user, k=20, layer=layer, vector=qvec, fusion=fusion, alpha=alpha,
                        cosine_baseline=getattr(mem.embedder, "cosine_baseline", 0.0)), search_fusion.Engine(
                        mem.settings, copies=mem.copies, term_counts=mem.term_counts))
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
    summary = {name: _mean(rows) for name, rows in results.items()}
    by_intent = {name: {i: _mean([r for r in rows if r["intent"] == i]) for i in sorted({r["intent"] for r in rows})}
                 for name, rows in results.items()}
    sweep_out = defaultdict(dict)
    for (layer, intent, a), rows in sorted(sweep_rows.items()):
        sweep_out[f"{layer}/{intent}"][str(a)] = _mean(rows)
    return {"summary": summary, "by_intent": by_intent, "sweep": sweep_out,
            "search_ms_median": 1000 * statistics.median(latencies) if latencies else None}


def _mean(rows: list[dict]) -> dict:
    keys = [k for k in rows[0] if k != "intent"] if rows else []
    return {"n": len(rows), **{k: round(statistics.fmean(r[k] for r in rows), 4) for k in keys}}


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
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "locomo_dev.json")
    parser.add_argument("--atoms", type=Path, default=None, help="JSONL of extracted atoms")
    parser.add_argument("--db-dir", type=Path, default=None,
                        help="read the files bench/qa_prepare.py built (the real pipeline) instead of --atoms")
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--embedder", default="default", help="for new files: 'default' (e5) or 'minilm'")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "locomo_retrieval.json")
    args = parser.parse_args()
    result = run(args.data, args.atoms, not args.no_sweep, args.db_dir, args.embedder)
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
