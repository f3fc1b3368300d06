"""Blind QA check, step 1 of 2: can a reader answer LoCoMo questions from memdb's context()
better than from raw turns at the same token budget?

For each sampled question this writes two blocks under one budget: mem.context(q) (atoms and
turns, layer="both") and mem.context(q, layer="turns") (raw turns only) — or, with --layers,
mem.context(q) vs mem.context(q, scenarios=True, persona=True) ("l2l3"; --layers scenarios:
without the persona, "scenarios") — labelled A/B in a
seeded per-question random order. A reader answers from each block alone, a judge who sees
neither block nor system marks each answer against the gold, and bench/qa_score.py counts.

Building: one memdb file per LoCoMo conversation in --db-dir (user = sample_id, one memdb
session per LoCoMo session, loaded by bench/locomo_retrieval.py's load_conversation), then
extraction with the real local model: ~1.5-2.5 s a turn, 788 turns, 25-35 minutes. Resumable:
rerun the same command after an interruption; files already in --db-dir are reused.

Run from the repository root:

    .venv/bin/python bench/qa_prepare.py --db-dir bench/results/qa/db --build-only   # 25-35 min
    .venv/bin/python bench/qa_prepare.py --db-dir bench/results/qa/db                # questions
    # reader: questions.json -> answers.json, then see bench/qa_score.py

Writes to --out: questions.json [{"qid", "question", "A", "B"}] (for the reader: no answers,
no system names), key.json {qid: {"A": "memdb"|"turns", "B": ..., "answer", "category", "conv",
"tokens": {"memdb": n, "turns": n}}} (private), prepare.json (settings, build state, memdb
version) and commands.json (the command of each step, for results.json).

Smoke test without the model (scripted extractor, a few turns; never for real figures):

    .venv/bin/python bench/qa_prepare.py --db-dir /tmp/qa_smoke/db --out /tmp/qa_smoke \\
        --limit-turns 30 --fake-llm
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import memdb  # noqa: E402
from bench.common import LOCOMO_DEV, load_conversation  # noqa: E402

CATEGORIES = (1, 2, 3, 4)  # 5 is adversarial: the dialogue holds no answer


class FakeLLM:
    """Scripted extractor for the smoke test: every turn yields no atom."""

    name, sha256 = "fake-smoke", "0" * 64

    def complete(self, messages: list[dict[str, str]], *, schema: dict, max_tokens: int) -> str:
        return '{"a":[]}'


def sessions(sample: dict) -> list[list[dict]]:
    conv, out = sample["conversation"], []
    while f"session_{len(out) + 1}" in conv:
        out.append(conv[f"session_{len(out) + 1}"])
    return out


def trimmed(sample: dict, limit: int | None) -> dict:
    """The sample with only its first `limit` turns (whole sessions dropped once the limit is hit)."""
    if limit is None:
        return sample
    conv = dict(sample["conversation"])
    left = limit
    for n, turns in enumerate(sessions(sample), start=1):
        if left <= 0:  # load_conversation stops at the first missing session
            del conv[f"session_{n}"]
            continue
        conv[f"session_{n}"] = turns[:left]
        left -= len(conv[f"session_{n}"])
    return {**sample, "conversation": conv}


def build(path: Path, sample: dict, llm: Any) -> dict:
    """Load the conversation (once) and extract its pending turns; returns the user's stats."""
    user = sample["sample_id"]
    expected = sum(len(t) for t in sessions(sample))
    if not path.exists():
        # Load under a temporary name: an interrupted load must not look like a finished one.
        part = path.with_name(path.name + ".part")
        for leftover in (part, Path(f"{part}-wal"), Path(f"{part}-shm")):
            leftover.unlink(missing_ok=True)
        with memdb.open(part, extract="defer", llm=llm) as mem:
            load_conversation(mem, sample)
        os.replace(part, path)
    with memdb.open(path, extract="defer", llm=llm) as mem:
        have = mem.stats(user)["turns"]
        if have != expected:
            sys.exit(f"{path} holds {have} turns of {user}, this run wants {expected} "
                     "(another --limit-turns?): use another --db-dir")
        pending = mem.stats(user)["turns_by_state"].get("pending", 0)
        if pending:
            start = time.monotonic()

            def progress(done: int, total: int) -> None:
                if not done:  # extract() reports 0/N before the first turn
                    return
                rate = (time.monotonic() - start) / done
                print(f"{user}: {expected - total + done}/{expected} turns extracted, "
                      f"{rate:.1f} s/turn, ~{rate * (total - done) / 60:.0f} min left", file=sys.stderr)

            print(f"{user}: extracting {pending} pending turns of {expected}", file=sys.stderr)
            mem.extract(user=user, progress=progress)
        stats = mem.stats(user)
    print(f"{user}: built, turns {stats['turns_by_state']}, {stats['atoms']} atoms", file=sys.stderr)
    return {k: stats[k] for k in ("turns", "turns_by_state", "atoms", "atoms_by_status", "llm")}


def quotas(sizes: dict[tuple, int], n: int) -> dict[tuple, int]:
    """n split over the strata in proportion to their sizes (largest remainder)."""
    total = sum(sizes.values())
    if not 0 < n <= total:
        sys.exit(f"--n must be from 1 to {total}")
    exact = {k: n * size / total for k, size in sizes.items()}
    out = {k: math.floor(x) for k, x in exact.items()}
    for k in sorted(exact, key=lambda k: out[k] - exact[k])[: n - sum(out.values())]:
        out[k] += 1
    return out


def pick(samples: list[dict], n: int, rng: random.Random) -> list[tuple[str, dict]]:
    """n (conversation, qa) pairs, stratified by conversation x category, in random order."""
    strata: dict[tuple, list[dict]] = defaultdict(list)
    for sample in samples:
        for qa in sample["qa"]:
            if qa["category"] in CATEGORIES:
                strata[(sample["sample_id"], qa["category"])].append(qa)
    quota = quotas({k: len(v) for k, v in strata.items()}, n)
    picked = [(key[0], qa) for key in sorted(strata) for qa in rng.sample(strata[key], quota[key])]
    rng.shuffle(picked)  # the reader must not see conversations or categories in runs
    return picked


def record_command(out: Path, step: str) -> None:
    path = out / "commands.json"
    commands = json.loads(path.read_text()) if path.exists() else {}
    commands[step] = "python " + shlex.join(sys.argv)
    path.write_text(json.dumps(commands, indent=1))


def memdb_version() -> str:
    """The commit the blocks came from; "-dirty" when memdb/ had uncommitted changes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = "-dirty" if git("status", "--porcelain", "--", "memdb") else ""
    return (git("rev-parse", "--short", "HEAD") or "unknown") + dirty


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db-dir", type=Path, required=True, help="one <sample_id>.db per conversation")
    parser.add_argument("--data", type=Path, default=LOCOMO_DEV)
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--budget", type=int, default=600)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "qa")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--limit-turns", type=int, default=None, help="per conversation, for a quick test")
    parser.add_argument("--fake-llm", action="store_true", help=argparse.SUPPRESS)  # smoke test only
    parser.add_argument("--layers", nargs="?", const="l2l3", choices=("l2l3", "scenarios"), default=None,
                        help="instead of context() vs raw turns: context() as today (memdb) vs with scenario blocks "
                             "and the persona card (l2l3), or scenario blocks alone (scenarios), same budget; "
                             "places the files' atoms first (Memory.build_layers, once)")
    parser.add_argument("--replay", type=Path, default=None,
                        help="keep the model's replies in this JSON file (atom_quality.ReplayLLM): a rebuild "
                             "after a change past the model costs no model time")
    args = parser.parse_args()

    samples = [trimmed(s, args.limit_turns) for s in json.loads(args.data.read_text())]
    llm = FakeLLM() if args.fake_llm else None  # None: memdb's default local model
    if args.replay:
        from atom_quality import ReplayLLM
        from memdb.models import llama

        llm = ReplayLLM(llama.load_llm(None, threads=2), args.replay)
    args.db_dir.mkdir(parents=True, exist_ok=True)
    if not args.build_only:  # a build writes only to --db-dir, never to the committed results
        args.out.mkdir(parents=True, exist_ok=True)
    paths = {s["sample_id"]: args.db_dir / f"{s['sample_id']}.db" for s in samples}
    built = {}
    for sample in samples:
        built[sample["sample_id"]] = build(paths[sample["sample_id"]], sample, llm)
        if args.replay:
            llm.save()
    record_command(args.db_dir if args.build_only else args.out, "build" if args.build_only else "prepare")
    if args.build_only:
        return

    rng = random.Random(args.seed)
    mems = {user: memdb.open(path, extract="defer", llm=llm) for user, path in paths.items()}
    systems = ("memdb", args.layers) if args.layers else ("memdb", "turns")
    if args.layers:
        for user, mem in mems.items():
            built[user]["layers"] = mem.build_layers(user)
    questions, key = [], {}
    for i, (conv, qa) in enumerate(pick(samples, args.n, rng), start=1):
        qid = f"q{i:03d}"
        mem = mems[conv]
        blocks = {"memdb": mem.context(qa["question"], user=conv, budget=args.budget),
                  systems[1]: mem.context(qa["question"], user=conv, budget=args.budget, scenarios=True,
                                          persona=args.layers == "l2l3")
                  if args.layers else mem.context(qa["question"], user=conv, budget=args.budget, layer="turns")}
        order = rng.sample(list(systems), 2)  # order[0] is shown as A
        questions.append({"qid": qid, "question": qa["question"], "A": blocks[order[0]], "B": blocks[order[1]]})
        key[qid] = {"A": order[0], "B": order[1], "answer": str(qa["answer"]).strip(), "category": qa["category"],
                    "conv": conv, "tokens": {s: mem.count_tokens(b) for s, b in blocks.items()}}
    for mem in mems.values():
        mem.close()

    (args.out / "questions.json").write_text(json.dumps(questions, indent=1, ensure_ascii=False))
    (args.out / "key.json").write_text(json.dumps(key, indent=1, ensure_ascii=False))
    (args.out / "prepare.json").write_text(json.dumps({
        "data": args.data.name, "n": args.n, "budget": args.budget, "seed": args.seed,
        "limit_turns": args.limit_turns, "fake_llm": args.fake_llm, "memdb_version": memdb_version(),
        "systems": systems,
        "build": built}, indent=1))
    empty = sum(not q[s] for q in questions for s in "AB")
    print(f"wrote {len(questions)} questions to {args.out} ({empty} empty blocks)", file=sys.stderr)


if __name__ == "__main__":
    main()
