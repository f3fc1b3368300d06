"""Atom quality: memdb's extracted atoms (L1) scored against hand-labelled gold atoms.

    .venv/bin/python bench/atom_quality.py                                         # all dev files, ~10 min
    .venv/bin/python bench/atom_quality.py --files dev_dialogue_en.json --limit 10  # quick check

Each gold file (../shared/data/atoms_gold/, see its FORMAT.md) holds a dialogue and, per turn, the
atoms a careful note-taker would keep. The dialogue goes through memdb's public API only, in a new
file per gold file: one user per conversation, one add() per session in order, each session
extracted before the next, so merge / supersede / dedup run as they do in use. The atoms that are
not superseded are exported, their L0 turn ids mapped back to gold turn ids, written as JSONL
(subject and date from the atom's record) and scored with the shared scorer
(../shared/tools/atom_score.py): recall, strict recall, precision, subject / kind / date accuracy,
dangling atoms, atoms on turns that should give none, compression; recall and precision also with
the superseded atoms (`with_history`: a fact a later turn changed was still taken from its turn,
and history keeps it). With --limit only the turns
fed are scored. Seconds per turn: wall time of extract() (model load included) / turns.
--replay FILE keeps the model's replies in a JSON file keyed by prompt: a second run with the same
prompts costs no model time, so changes after the model (normalisation, grounding, the gate,
lifecycle) are measured in seconds; changed prompts are asked of the model and added.
Each file is also scored in two halves (LoCoMo: by conversation; the dialogues: first and second
half of the turns), one to tune on and one to check that a change holds on text it was not tuned on.
Missed gold atoms and what was produced instead:
    python ../shared/tools/atom_score.py GOLD.json --atoms bench/results/atom_quality_atoms/NAME.jsonl --show 20
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from bench.common import code_version  # noqa: E402

FILES = ["dev_locomo.json", "dev_dialogue_zh.json", "dev_dialogue_en.json"]


class ReplayLLM:
    """The extraction model behind a reply cache kept in a JSON file (a bench tool, not memdb's)."""

    def __init__(self, model, path: Path) -> None:
        self.model, self.path = model, path
        self.replies: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
        self.name, self.asked = model.name, 0

    @property
    def sha256(self) -> str:
        return self.model.sha256

    def complete(self, messages: list[dict[str, str]], *, schema: dict, max_tokens: int) -> str:
        key = hashlib.sha256(json.dumps([messages, schema, max_tokens], sort_keys=True).encode()).hexdigest()
        if key not in self.replies:
            self.replies[key] = self.model.complete(messages, schema=schema, max_tokens=max_tokens)
            self.asked += 1
        return self.replies[key]

    def count_tokens(self, line: str) -> int:
        return self.model.count_tokens(line)

    def save(self) -> None:
        self.path.write_text(json.dumps(self.replies, ensure_ascii=False))


class NoModel:
    """A model that never writes a note: what extraction gives without it (--no-model)."""

    name, sha256 = "no-model", "0" * 64

    def complete(self, messages: list[dict[str, str]], *, schema: dict, max_tokens: int) -> str:
        return '{"a":[]}'


def halves(data: dict) -> dict[str, set[str]]:
    """Two halves of a gold file's turns: by conversation when it has two, else first / second half."""
    ids = [t["id"] for t in data["dialogue"]]
    convs = list(dict.fromkeys(t["conv"] for t in data["dialogue"]))
    if len(convs) == 2:
        return {c: {t["id"] for t in data["dialogue"] if t["conv"] == c} for c in convs}
    return {"first": set(ids[: len(ids) // 2]), "second": set(ids[len(ids) // 2 :])}


def sessions(dialogue: list[dict], limit: int | None) -> list[tuple[str, str, list[dict]]]:
    """(conversation, session, turns) in dialogue order, cut after the first limit turns."""
    out: list[tuple[str, str, list[dict]]] = []
    for turn in dialogue[:limit]:
        key = (turn["conv"], f"s{turn['session']}")
        if not out or out[-1][:2] != key:
            out.append((*key, []))
        out[-1][2].append(turn)
    return out


def run_file(path: Path, args: argparse.Namespace, scorer) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    gold_of_l0: dict[int, str] = {}
    counts: Counter = Counter()
    add_s = extract_s = 0.0
    with tempfile.TemporaryDirectory() as tmp, \
            memdb.open(Path(tmp) / "bench.db", extract="defer", llm=args.model, threads=args.threads) as mem:
        for conv, session, turns in sessions(data["dialogue"], args.limit):
            messages = [{"role": t["role"], "content": t["text"], "name": t["speaker"], "ts": t["ts"]}
                        for t in turns]
            started = time.perf_counter()
            ids = mem.add(messages, user=conv, session=session, ts=turns[0]["ts"])
            add_s += time.perf_counter() - started
            gold_of_l0.update(zip(ids, (t["id"] for t in turns)))
            started = time.perf_counter()
            counts.update(mem.extract(user=conv))
            extract_s += time.perf_counter() - started
            print(f"  {conv} {session}: {len(turns)} turns, {dict(+counts)}", file=sys.stderr)
        stats = mem.stats()
        every = [
            {"turns": [gold_of_l0[i] for i in a["turn_ids"]], "text": a["text"], "kind": a["kind"],
             "subject": a["record"].get("subject"), "date": a["record"].get("date"),
             "status": a["status"], "id": a["id"]}
            for conv in dict.fromkeys(t["conv"] for t in data["dialogue"])
            for a in mem.export(conv) if a["type"] == "atom"
        ]
        atoms = [a for a in every if a["status"] != "superseded"]
    atoms_path = Path(args.atoms_dir) / (path.stem + ".jsonl")
    atoms_path.parent.mkdir(parents=True, exist_ok=True)
    atoms_path.write_text("".join(json.dumps(a, ensure_ascii=False) + "\n" for a in atoms), encoding="utf-8")

    gold, text_of = scorer.load_gold([str(path)])
    fed = set(gold_of_l0.values())
    metrics = scorer.score({k: v for k, v in gold.items() if k in fed}, atoms,
                           {k: v for k, v in text_of.items() if k in fed})
    parts = {name: scorer.score({k: v for k, v in gold.items() if k in fed & part}, atoms,
                                {k: v for k, v in text_of.items() if k in fed & part})
             for name, part in halves(data).items()}
    # The same with the superseded atoms, kept in history: a turn's fact that a later turn changed
    # ("quit coffee" after "three coffees a day") was taken from its turn all the same.
    with_history = scorer.score({k: v for k, v in gold.items() if k in fed}, every,
                                {k: v for k, v in text_of.items() if k in fed})
    history_parts = {name: scorer.score({k: v for k, v in gold.items() if k in fed & part}, every,
                                        {k: v for k, v in text_of.items() if k in fed & part})
                     for name, part in halves(data).items()}
    n = len(gold_of_l0)
    return {
        "gold": str(path), "turns": n, **metrics, "halves": parts,
        "with_history": {m: with_history[m] for m in ("recall", "precision")}
        | {"halves": {h: {m: p[m] for m in ("recall", "precision")} for h, p in history_parts.items()}},
        "atoms_kept": len(atoms), "atoms_by_status": stats["atoms_by_status"],
        "turns_by_state": stats["turns_by_state"], "extract_counts": dict(counts),
        "seconds": {"add": round(add_s, 1), "extract": round(extract_s, 1),
                    "extract_per_turn": round(extract_s / n, 3) if n else None},
        "llm": stats["llm"], "embedder": stats["embedder"], "atoms_file": str(atoms_path),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", nargs="+", default=FILES, help="gold file names (or paths)")
    parser.add_argument("--limit", type=int, default=None, help="first N turns of each file")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "atom_quality.json"))
    parser.add_argument("--atoms-dir", default=str(ROOT / "bench" / "results" / "atom_quality_atoms"))
    parser.add_argument("--llm", default=None, help="extraction GGUF (default: memdb's, i.e. the bundled model)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--replay", type=Path, default=None, help="a JSON file of the model's replies, by prompt")
    parser.add_argument("--no-model", action="store_true", help="ablation: no model notes, only the rules'")
    parser.add_argument("--shared", default=str(ROOT.parent / "shared"), help="the shared folder (gold, scorer)")
    args = parser.parse_args()

    shared = Path(args.shared)
    sys.path.insert(0, str(shared / "tools"))
    import atom_score

    args.model = NoModel() if args.no_model else args.llm
    if args.replay:
        from memdb.models import llama

        args.model = ReplayLLM(llama.load_llm(args.llm, threads=args.threads), args.replay)
    load_start = os.getloadavg()
    results = {}
    for name in args.files:
        path = Path(name) if Path(name).exists() else shared / "data" / "atoms_gold" / name
        print(f"{path.name}", file=sys.stderr)
        results[path.stem] = run_file(path, args, atom_score)
        if args.replay:
            args.model.save()

    report = {
        "command": shlex.join([".venv/bin/python", "bench/atom_quality.py", *sys.argv[1:]]),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"nproc": os.cpu_count(), "threads": args.threads, "python": platform.python_version(),
                    "loadavg_start": load_start, "loadavg_end": os.getloadavg()},
        "code": code_version(),
        "model": next(iter(results.values()))["llm"] if results else None,
        "model_stats": dict(getattr(getattr(args.model, "model", None), "stats", {})),
        "files": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    cols = ("recall", "strict_recall", "precision", "kind_acc", "date_acc", "dangling", "noise_per_empty",
            "compression")
    print(f"{'file':22}" + "".join(f"{c[:11]:>12}" for c in cols) + f"{'s/turn':>8}")
    for name, r in results.items():
        print(f"{name:22}" + "".join(f"{r[c]!s:>12}" for c in cols) + f"{r['seconds']['extract_per_turn']!s:>8}")
        for half, m in r["halves"].items():
            print(f"  {half:20}" + "".join(f"{m[c]!s:>12}" for c in cols))
        h = r["with_history"]
        print(f"  with superseded atoms: recall {h['recall']} precision {h['precision']}; halves "
              + ", ".join(f"{k} {v['recall']} / {v['precision']}" for k, v in h["halves"].items()))
    if args.replay:
        print(f"model calls not in the replay file: {args.model.asked}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
