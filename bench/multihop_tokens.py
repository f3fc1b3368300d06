"""Context tokens needed to answer LoCoMo dev multi-hop questions, with and without scenarios.

Multi-hop is category 1 in LoCoMo (its questions cite 2-6 evidence turns; categories 2-4 cite
one). For each such question the context block is built once with a large budget (--budget,
k=--k hits) as context() builds it, and read line by line: a line covers the turns it stands
for (an atom line its source turns, a turn line itself, a scenario header its title atom's
turns). "Tokens needed" is the block's length, by the bundled model's tokenizer, up to the line
that completes the gold evidence; questions whose evidence never completes are counted apart.
Systems: context() as today ("memdb"), scenarios=True ("scenarios"), and scenarios=True with
persona=True ("l2l3"). A mechanical proxy: a reader may answer before all evidence is in, or
fail with all of it.

    .venv/bin/python bench/multihop_tokens.py --db-dir /tmp/qa6/db   # files qa_prepare.py built
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from bench.common import LOCOMO_DEV  # noqa: E402
from memdb import recall  # noqa: E402

SYSTEMS = {"memdb": {}, "scenarios": {"scenarios": True}, "l2l3": {"scenarios": True, "persona": True}}


def evidence_turns(mem: memdb.Memory, sample: dict, qa: dict) -> set[int]:
    """The turn ids of a question's evidence dia_ids ("D3:5" = session 3's 5th turn)."""
    user, out = sample["sample_id"], set()
    for ref in (e for ev in qa["evidence"] for e in ev.split(";")):
        session, _, seq = ref.strip().lstrip("D").partition(":")
        row = mem.conn.execute('select "id" from "turns" where "user" = ? and "session" = ? and "seq" = ?',
                               (user, f"session_{session}", int(seq))).fetchone()
        if row:
            out.add(row[0])
    return out


def covered(mem: memdb.Memory, user: str, hit) -> set[int]:
    if hit is None:
        return set()
    if hit.layer == "scenario":
        return {t for a in hit.shows for t in mem.get(a, user=user).turn_ids}
    return set(hit.turn_ids)


def tokens_needed(mem: memdb.Memory, sample: dict, qa: dict, options: dict, budget: int, k: int) -> int | None:
    user = sample["sample_id"]
    gold = evidence_turns(mem, sample, qa)
    lines = recall.context_lines(mem, qa["question"], user=user, budget=budget, k=k, session=None, layer="both",
                                 scenarios=options.get("scenarios", False), persona=options.get("persona", False))
    seen: set[int] = set()
    for i, (_, hit) in enumerate(lines):
        seen |= covered(mem, user, hit)
        if gold <= seen:
            return mem.count_tokens("\n".join(line for line, _ in lines[:i + 1]))
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db-dir", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=LOCOMO_DEV)
    parser.add_argument("--budget", type=int, default=4000)
    parser.add_argument("--k", type=int, default=60)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "multihop_tokens.json")
    args = parser.parse_args()
    samples = json.loads(args.data.read_text())
    per_question = []
    for sample in samples:
        with memdb.open(args.db_dir / f"{sample['sample_id']}.db", extract="defer") as mem:
            mem.build_layers(sample["sample_id"])
            for qa in (q for q in sample["qa"] if q["category"] == 1):
                row = {"conv": sample["sample_id"], "question": qa["question"], "evidence": qa["evidence"]}
                row.update({name: tokens_needed(mem, sample, qa, options, args.budget, args.k)
                            for name, options in SYSTEMS.items()})
                per_question.append(row)
    summary = {}
    for name in SYSTEMS:
        found = [r[name] for r in per_question if r[name] is not None]
        summary[name] = {"complete": len(found), "of": len(per_question),
                         "within_600": sum(t <= 600 for t in found),
                         "median_tokens": statistics.median(found) if found else None,
                         "mean_tokens": round(statistics.mean(found), 1) if found else None}
    both = [r for r in per_question if all(r[n] is not None for n in SYSTEMS)]
    for name in SYSTEMS:
        summary[name]["median_tokens_on_questions_all_complete"] = statistics.median(r[name] for r in both) if both else None
    summary["questions_all_complete"] = len(both)
    result = {"command": "python " + shlex.join(sys.argv), "summary": summary, "per_question": per_question}
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print(json.dumps(summary, indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
