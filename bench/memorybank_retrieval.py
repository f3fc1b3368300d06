"""Chinese retrieval on MemoryBank-cn dev: R@5/R@10/MRR per layer and fusion, per embedder.

Each user's dialogue goes into a fresh memdb file (exchange j of day d = the user's words and
the companion's reply, both stamped with the day's date, evidence id "d#j"); every probing
question is asked as the user. A hit finds an exchange when one of its source turns is in it.
Atoms: with --atoms (JSON lines of {"user", "evidence", "record", "confidence"}) they go
through the lifecycle as the pipeline's would; without, the atoms and both layers hold only
what the turns give (no extraction), and the report says so.

    .venv/bin/python bench/memorybank_retrieval.py     # default and minilm -> bench/results/memorybank_retrieval.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from bench.locomo_retrieval import _mean, score  # noqa: E402
from memdb.db import connection  # noqa: E402
from memdb.lifecycle import absorb  # noqa: E402
from memdb.models import embedders  # noqa: E402
from memdb.search import fusion as search_fusion  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "memorybank_cn_dev.json"
CONFIGS = {  # name: (layer, alpha); alpha None: the query's intent picks it
    "bm25_turns": ("turns", 1.0),
    "vector_turns": ("turns", 0.0),
    "turns": ("turns", None),
    "atoms": ("atoms", None),
    "both": ("both", None),
}
SWEEP = (0.1, 0.2, 0.3, 0.4, 0.5)  # fixed alphas on turns, to see where the intent's choice stands


def load_user(mem: memdb.Memory, user: str, history: dict) -> dict[int, str]:
    """Add a user's days; returns turn id -> evidence id "d#j"."""
    turn_to_ev: dict[int, str] = {}
    for day, exchanges in history.items():
        for j, ex in enumerate(exchanges):
            ids = mem.add([{"role": "user", "name": user, "content": ex["query"], "ts": f"{day}T12:00:00"},
                           {"role": "assistant", "content": ex["response"], "ts": f"{day}T12:00:01"}],
                          user=user, session=day)
            turn_to_ev.update({i: f"{day}#{j}" for i in ids})
    return turn_to_ev


def load_atoms(mem: memdb.Memory, user: str, path: Path, ev_to_turns: dict[str, list[int]]) -> None:
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["user"] != user:
            continue
        vector = mem._embed([memdb.codec.canonical_text(row["record"])])
        with connection.write(mem.conn):
            absorb.absorb(mem.conn, user=user, record=row["record"], confidence=row.get("confidence", 0.8),
                          turn_ids=[t for e in row["evidence"] for t in ev_to_turns.get(e, [])],
                          ts=row["evidence"][0].split("#")[0] + "T12:00:00",
                          vector=None if vector is None else vector[0], settings=mem.settings,
                          multilingual=getattr(mem.embedder, "multilingual", True))


def run(embedder: str, atoms: Path | None) -> dict:
    data = json.loads(DATA.read_text(encoding="utf-8"))["users"]
    results: dict[str, list[dict]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for user, u in data.items():
            with memdb.open(Path(tmp) / "u.db", embedder=embedder, extract="defer") as mem:
                turn_to_ev = load_user(mem, user, u["history"])
                if atoms:
                    ev_to_turns: dict[str, list[int]] = defaultdict(list)
                    for t, e in turn_to_ev.items():
                        ev_to_turns[e].append(t)
                    load_atoms(mem, user, atoms, ev_to_turns)
                for qa in u["questions"]:
                    gold = set(qa["evidence"])
                    # As Memory.search does it: the query role, and no vector for a language
                    # the embedder cannot read.
                    readable = embedders.reads(mem.embedder, qa["q"])
                    qvec = embedders.query_vectors(mem.embedder, [qa["q"]])[0] if readable else None
                    sweep = {f"turns_alpha{a}": ("turns", a) for a in SWEEP}
                    for name, (layer, alpha) in {**CONFIGS, **sweep}.items():
                        hits = search_fusion.search(mem.conn, qa["q"], user=user, k=20, layer=layer,
                                                    settings=mem.settings, query_vector=qvec, alpha=alpha,
                                                    copies=mem.copies, term_counts=mem.term_counts)
                        results[name].append(score(hits, gold, turn_to_ev))
                name = mem.embedder.name
            Path(tmp, "u.db").unlink()
            for suffix in ("-wal", "-shm"):
                Path(tmp, "u.db" + suffix).unlink(missing_ok=True)
    return {"embedder": name, "atoms": str(atoms) if atoms else "none (no extraction: atoms/both hold turns only)",
            "summary": {k: _mean(v) for k, v in results.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedders", nargs="+", default=["default", "minilm"])
    parser.add_argument("--atoms", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "memorybank_retrieval.json")
    args = parser.parse_args()
    out = {"command": "python " + " ".join(sys.argv), "data": str(DATA.name),
           "runs": [run(e, args.atoms) for e in args.embedders]}
    args.out.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    for r in out["runs"]:
        for name, s in r["summary"].items():
            print(f"{r['embedder']:28s} {name:12s} R@5={s['recall@5']:.3f} R@10={s['recall@10']:.3f} MRR={s['mrr']:.3f}")


if __name__ == "__main__":
    main()
