"""Blind QA check, step 2 of 2: blind judging input, then scores of memdb context vs raw turns
(or of the two systems prepare.json names: "memdb" vs "l2l3" or "scenarios" for qa_prepare.py --layers).

bench/qa_prepare.py wrote questions.json (for the reader) and key.json (private) to --dir.
Run from the repository root:

    # reader: give them questions.json and READER below; they write answers.json
    # (or two readers, one block each: --make-reader-input writes reader_A.json / reader_B.json
    #  [{"qid", "question", "memory"}]; they write answers_A.json / answers_B.json {qid: answer};
    #  --merge-answers makes answers.json of them)
    .venv/bin/python bench/qa_score.py --dir bench/results/qa --make-judge-input
    # judge: give them judge_input.json and JUDGE below; they write judgements.json
    .venv/bin/python bench/qa_score.py --dir bench/results/qa --score

Files:
    answers.json      {qid: {"A": answer, "B": answer}}          written by the reader
    judge_input.json  [{"item", "question", "gold", "answer"}]   one item per (question, block),
                      shuffled; says nothing of the block or system an answer came from
    judge_key.json    {item: [qid, "A"|"B"]}                     private
    judgements.json   {item: "correct"|"wrong"}                  written by the judge
    results.json      correct counts and rates of memdb vs turns: overall, per category, per
                      conversation; questions only one got right (each way) with an exact
                      McNemar p; mean/max block tokens; budget; the commands of every step

READER (give with questions.json, and nothing else):
    Each item has a question and two memory blocks, A and B. Answer every question twice:
    once using block A only, once using block B only; never carry anything from one block
    to the other, and use no outside knowledge. Answer in a short phrase (a name, a date,
    a few words). Dates in the blocks are when things were said; resolve "yesterday",
    "last week" etc. against them. If the block does not hold the answer, answer exactly
    "not in memory". Write answers.json as {"q001": {"A": "...", "B": "..."}, ...}.

JUDGE (give with judge_input.json, and nothing else):
    For each item decide whether "answer" answers "question" as "gold" does. Mark it
    "correct" when it states the gold answer's facts: wording may differ, and a date counts
    when it names the same day/month/year as the gold (as precisely as the gold does:
    "7 May 2023" = "May 7, 2023" = "2023-05-07"; a gold of "2022" needs the year 2022).
    For a gold that lists several things, the answer must hold the main ones. Mark it
    "wrong" otherwise: wrong or missing facts, another date, a vague hedge, and
    "not in memory". Write judgements.json as {"i001": "correct", "i002": "wrong", ...}.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shlex
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ("memdb", "turns")  # unless prepare.json names its two ("systems": qa_prepare.py --layers)


def read(path: Path) -> dict | list:
    if not path.exists():
        sys.exit(f"{path} is missing")
    return json.loads(path.read_text())


def record_command(folder: Path, step: str) -> dict[str, str]:
    path = folder / "commands.json"
    commands = json.loads(path.read_text()) if path.exists() else {}
    commands[step] = "python " + shlex.join(sys.argv)
    path.write_text(json.dumps(commands, indent=1))
    return commands


def make_reader_input(folder: Path) -> None:
    """One file per block, so each reader sees one block of every question and never the other."""
    for slot in "AB":
        items = [{"qid": q["qid"], "question": q["question"], "memory": q[slot]} for q in read(folder / "questions.json")]
        (folder / f"reader_{slot}.json").write_text(json.dumps(items, indent=1, ensure_ascii=False))
    print(f"wrote {folder / 'reader_A.json'} and reader_B.json", file=sys.stderr)


def merge_answers(folder: Path) -> None:
    a, b = read(folder / "answers_A.json"), read(folder / "answers_B.json")
    (folder / "answers.json").write_text(json.dumps({qid: {"A": a.get(qid, ""), "B": b.get(qid, "")} for qid in a | b},
                                                    indent=1, ensure_ascii=False))
    print(f"wrote {folder / 'answers.json'}", file=sys.stderr)


def make_judge_input(folder: Path, seed: int) -> None:
    questions = {q["qid"]: q["question"] for q in read(folder / "questions.json")}
    key, answers = read(folder / "key.json"), read(folder / "answers.json")
    missing = [f"{qid}/{slot}" for qid in key for slot in "AB" if not str(answers.get(qid, {}).get(slot, "")).strip()]
    if missing:
        sys.exit(f"answers.json lacks {len(missing)} answers: {', '.join(missing[:10])}")
    pairs = [(qid, slot) for qid in key for slot in "AB"]
    random.Random(seed).shuffle(pairs)  # the two answers to one question must not sit side by side
    items = [{"item": f"i{i:03d}", "question": questions[qid], "gold": key[qid]["answer"],
              "answer": str(answers[qid][slot]).strip()} for i, (qid, slot) in enumerate(pairs, start=1)]
    (folder / "judge_input.json").write_text(json.dumps(items, indent=1, ensure_ascii=False))
    (folder / "judge_key.json").write_text(json.dumps({it["item"]: list(p) for it, p in zip(items, pairs)}, indent=1))
    print(f"wrote {len(items)} items to {folder / 'judge_input.json'}", file=sys.stderr)


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar test on the discordant questions (b one way, c the other)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def rates(rows: list[dict[str, bool]], systems: tuple[str, ...] = SYSTEMS) -> dict:
    out: dict = {"n": len(rows)}
    for system in systems:
        correct = sum(r[system] for r in rows)
        out[system] = {"correct": correct, "rate": round(correct / len(rows), 3) if rows else None}
    return out


def score(folder: Path) -> dict:
    key, judge_key = read(folder / "key.json"), read(folder / "judge_key.json")
    marks = {item: str(mark).strip().lower() for item, mark in read(folder / "judgements.json").items()}
    bad = [i for i in judge_key if marks.get(i) not in ("correct", "wrong")]
    if bad:
        sys.exit(f"judgements.json has no correct/wrong mark for {len(bad)} items: {', '.join(bad[:10])}")
    right: dict[str, dict[str, bool]] = defaultdict(dict)  # qid -> system -> correct?
    for item, (qid, slot) in judge_key.items():
        right[qid][key[qid][slot]] = marks[item] == "correct"
    rows = [{"qid": qid, "category": key[qid]["category"], "conv": key[qid]["conv"], **right[qid]} for qid in key]
    prepare = read(folder / "prepare.json")
    systems = tuple(prepare.get("systems", SYSTEMS))
    only = {s: sum(r[s] and not r[o] for r in rows) for s, o in (systems, systems[::-1])}
    return {
        "systems": systems,
        "overall": rates(rows, systems),
        "by_category": {c: rates([r for r in rows if r["category"] == c], systems)
                        for c in sorted({r["category"] for r in rows})},
        "by_conv": {c: rates([r for r in rows if r["conv"] == c], systems) for c in sorted({r["conv"] for r in rows})},
        **{f"only_{s}_correct": only[s] for s in systems},
        "mcnemar_p": round(mcnemar_p(*only.values()), 4),
        "budget": prepare["budget"],
        "block_tokens": {s: {"mean": round(sum(k["tokens"][s] for k in key.values()) / len(key), 1),
                             "max": max(k["tokens"][s] for k in key.values())} for s in systems},
        "prepare": prepare,
        "per_question": rows,
    }


def table(result: dict) -> str:
    first, second = result["systems"]
    lines = [f"{'':14} {'n':>3} {first:>12} {second:>12}"]
    groups = [("overall", result["overall"])] + [(f"category {c}", r) for c, r in result["by_category"].items()] \
        + list(result["by_conv"].items())
    for name, r in groups:
        cells = [f"{r[s]['correct']:>3} ({r[s]['rate']:.0%})" for s in result["systems"]]
        lines.append(f"{name:14} {r['n']:>3} {cells[0]:>12} {cells[1]:>12}")
    tokens = result["block_tokens"]
    lines.append(f"only {first} right: {result[f'only_{first}_correct']}, only {second} right: "
                 f"{result[f'only_{second}_correct']} (McNemar p={result['mcnemar_p']}); budget {result['budget']}, "
                 f"mean tokens {first} {tokens[first]['mean']}, {second} {tokens[second]['mean']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "results" / "qa")
    step = parser.add_mutually_exclusive_group(required=True)
    step.add_argument("--make-reader-input", action="store_true")
    step.add_argument("--merge-answers", action="store_true")
    step.add_argument("--make-judge-input", action="store_true")
    step.add_argument("--score", action="store_true")
    parser.add_argument("--seed", type=int, default=13, help="order of the judge's items")
    args = parser.parse_args()
    if args.make_reader_input or args.merge_answers:
        (make_reader_input if args.make_reader_input else merge_answers)(args.dir)
        record_command(args.dir, "make-reader-input" if args.make_reader_input else "merge-answers")
        return
    if args.make_judge_input:
        make_judge_input(args.dir, args.seed)
        record_command(args.dir, "make-judge-input")
        return
    result = score(args.dir)
    result["commands"] = record_command(args.dir, "score")
    (args.dir / "results.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print(table(result))


if __name__ == "__main__":
    main()
