"""Chinese retrieval on MemoryBank-cn dev: R@5/R@10/MRR per layer and fusion, per embedder.

Each user's dialogue goes into a fresh memdb file (exchange j of day d = the user's words and
the companion's reply, both stamped with the day's date, evidence id "d#j"); every probing
question is asked as the user. A hit finds an exchange when one of its source turns is in it.
Atoms: with --built DIR, each user's file is extracted once by the real pipeline (bundled
model, threads=1, about 2 s a turn) into DIR/<user>.db with the default embedder, and reused:
each run copies it and, for another embedder, reembeds the copy (dedup was done with e5's
vectors). Without it the atoms and both layers hold only what the turns give (no extraction).

    .venv/bin/python bench/memorybank_retrieval.py --built /tmp/memorybank_cn_built

--replay FILE keeps the model's replies by prompt (atom_quality.ReplayLLM), so a rebuild after a
change past the model costs no model time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import memdb  # noqa: E402
from bench.common import MEMORYBANK_DEV, mean_scores, score  # noqa: E402
from memdb.models import embedders  # noqa: E402
from memdb.search import fusion as search_fusion  # noqa: E402

DATA = MEMORYBANK_DEV
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


def built_copy(built: Path, user: str, history: dict, tmp: Path, llm=None) -> Path:
    """A copy of the user's extracted file, extracting it first if DIR has none (llm: None for
    the bundled model)."""
    source = built / f"{user}.db"
    if not source.exists():
        built.mkdir(parents=True, exist_ok=True)
        with memdb.open(built / "partial.db", extract="defer", threads=1, llm=llm) as mem:
            load_user(mem, user, history)
            print(f"{user}: extracting", mem.extract(), file=sys.stderr)
            mem.conn.execute("pragma wal_checkpoint(truncate)")
        (built / "partial.db").rename(source)
    target = tmp / "u.db"
    shutil.copyfile(source, target)
    return target


def evidence_of(mem: memdb.Memory, user: str, history: dict) -> dict[int, str]:
    """turn id -> "d#j" of a built file: its turns were added in dialogue order, two an exchange."""
    ids = [t["id"] for t in mem.export(user) if t["type"] == "turn"]
    order = [f"{day}#{j}" for day, exchanges in history.items() for j in range(len(exchanges)) for _ in (0, 1)]
    if len(ids) != len(order):
        raise SystemExit(f"{user}: the built file holds {len(ids)} turns, the data {len(order)}")
    return dict(zip(ids, order))


def run(embedder: str, built: Path | None, atom_weights: tuple[float, ...] = (), llm=None) -> dict:
    data = json.loads(DATA.read_text(encoding="utf-8"))["users"]
    results: dict[str, list[dict]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for user, u in data.items():
            if built:
                path = built_copy(built, user, u["history"], Path(tmp), llm)
                if llm is not None:
                    llm.save()
                with memdb.open(path, embedder=None, extract="defer") as mem:
                    mem.reembed(embedder)
            with memdb.open(Path(tmp) / "u.db", embedder=embedder, extract="defer") as mem:
                turn_to_ev = evidence_of(mem, user, u["history"]) if built else load_user(mem, user, u["history"])
                for qa in u["questions"]:
                    gold = set(qa["evidence"])
                    # As Memory.search does it: the query role, and no vector for a language
                    # the embedder cannot read.
                    readable = embedders.reads(mem.embedder, qa["q"])
                    qvec = embedders.query_vectors(mem.embedder, [qa["q"]])[0] if readable else None
                    sweep = {f"turns_alpha{a}": ("turns", a, None) for a in SWEEP}
                    weights = {f"both_atom_weight{w}": ("both", None, w) for w in atom_weights}
                    configs = {name: (layer, alpha, None) for name, (layer, alpha) in CONFIGS.items()}
                    for name, (layer, alpha, weight) in {**configs, **sweep, **weights}.items():
                        settings = dataclasses.replace(mem.settings, atom_weight=weight) if weight else mem.settings
                        hits = search_fusion.search(mem.conn, search_fusion.Query(
                            qa["q"], user=user, k=20, layer=layer, vector=qvec, alpha=alpha,
                            cosine_baseline=getattr(mem.embedder, "cosine_baseline", 0.0)),
                            search_fusion.Engine(settings, copies=mem.copies, term_counts=mem.term_counts))
                        results[name].append(score(hits, gold, turn_to_ev))
                name = mem.embedder.name
            Path(tmp, "u.db").unlink()
            for suffix in ("-wal", "-shm"):
                Path(tmp, "u.db" + suffix).unlink(missing_ok=True)
    return {"embedder": name,
            "atoms": "extracted by the bundled model, deduplicated with e5" if built else "none (no extraction)",
            "summary": {k: mean_scores(v) for k, v in results.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedders", nargs="+", default=["default", "minilm"])
    parser.add_argument("--built", type=Path, default=None, help="folder of extracted files (made if missing)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "memorybank_retrieval.json")
    parser.add_argument("--atom-weights", type=float, nargs="*", default=[],
                        help="also rank `both` with these atom weights (Settings.atom_weight)")
    parser.add_argument("--replay", type=Path, default=None, help="a JSON file of the model's replies, by prompt")
    args = parser.parse_args()
    llm = None
    if args.replay:
        from atom_quality import ReplayLLM
        from memdb.models import llama

        llm = ReplayLLM(llama.load_llm(None, threads=2), args.replay)
    out = {"command": "python " + " ".join(sys.argv), "data": str(DATA.name),
           "runs": [run(e, args.built, tuple(args.atom_weights), llm) for e in args.embedders]}
    args.out.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    for r in out["runs"]:
        for name, s in r["summary"].items():
            print(f"{r['embedder']:28s} {name:12s} R@5={s['recall@5']:.3f} R@10={s['recall@10']:.3f} MRR={s['mrr']:.3f}")


if __name__ == "__main__":
    main()
