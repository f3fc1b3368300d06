"""Benchmark L1 extraction on LoCoMo: recall of the gold observations, grounding, speed, compression.

    .venv/bin/python bench/extract_locomo.py                       # both dev conversations
    .venv/bin/python bench/extract_locomo.py --conv conv-26 --limit-turns 60

Each conversation is fed to memdb.extraction.extract session by session, in batches of --batch
consecutive turns with the three turns before each batch as history, exactly as the extraction
queue does (one model call per turn, the turn alone: Settings.extract_context is 0).
Figures:
- recall: an observation (LoCoMo's model-written facts, each tied to a dia_id) counts as covered
  when an atom sourced from that same turn has MiniLM cosine >= 0.6 with it;
- grounding: atoms the model proposed vs atoms kept, and the drop reasons;
- turns skipped / failed, atoms per turn;
- seconds per turn: total wall / turns, and median and mean per batch (divided by batch turns);
- tokens of the L0 text vs the atoms' canonical text, with the model's tokenizer.
Results go to bench/results/ as JSON (with the command line); the atoms go to a JSONL file
(--atoms, default under /tmp) with one candidate per line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import signal
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memdb import codec  # noqa: E402
from memdb.extraction import extract, prefilter, records  # noqa: E402
from memdb.models import llama  # noqa: E402
from bench.common import LOCOMO_DEV  # noqa: E402

DATA = LOCOMO_DEV
THRESHOLD = 0.6


def session_ts(stamp: str) -> str:
    """'1:56 pm on 8 May, 2023' → '2023-05-08T13:56:00'."""
    return dt.datetime.strptime(stamp.strip(), "%I:%M %p on %d %B, %Y").isoformat()


def conversation_turns(sample: dict, limit: int | None) -> list[tuple[list[records.Turn], dict[int, str]]]:
    """Per session: the turns (ids numbered across the conversation) and id → dia_id."""
    conv = sample["conversation"]
    sessions = sorted((int(k.split("_")[1]), k) for k in conv if k.startswith("session_") and k.count("_") == 1)
    out, next_id, left = [], 1, limit if limit is not None else 10**9
    for number, key in sessions:
        ts = session_ts(conv[f"{key}_date_time"])
        turns, dia = [], {}
        for row in conv[key][:left]:
            turns.append(records.Turn(id=next_id, user=sample["sample_id"], session=key, role="user",
                                      speaker=row["speaker"], content=row["text"], ts=ts))
            dia[next_id] = row["dia_id"]
            next_id += 1
        left -= len(turns)
        if turns:
            out.append((turns, dia))
        if left <= 0:
            break
    return out


def observations(sample: dict, dia_ids: set[str]) -> list[tuple[str, list[str]]]:
    found = []
    for per_speaker in sample["observation"].values():
        for items in per_speaker.values():
            for sentence, ref in items:
                refs = ref if isinstance(ref, list) else [r.strip() for r in str(ref).split(";")]
                if any(r in dia_ids for r in refs):
                    found.append((sentence, refs))
    return found


def run(args: argparse.Namespace) -> dict:
    data = json.loads(DATA.read_text())
    samples = [s for s in data if not args.conv or s["sample_id"] in args.conv]
    llm = llama.load_llm(args.llm, threads=args.threads)
    started = time.perf_counter()
    llm.model()
    load_seconds = time.perf_counter() - started

    per_batch: list[float] = []
    all_atoms: list[dict] = []
    outcomes: dict[tuple[str, int], records.Outcome] = {}
    turn_text: list[str] = []
    dia_of: dict[tuple[str, int], str] = {}
    sink = open(args.atoms, "w", encoding="utf-8") if args.atoms else None
    wall = time.perf_counter()
    cpu = time.process_time()
    interrupted = False
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # kill <pid>: stop and report what is done
    try:
        _extract_all(samples, args, llm, per_batch, all_atoms, outcomes, turn_text, dia_of, sink)
    except KeyboardInterrupt:
        interrupted = True
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu  # with passive waiting this is the work done, whatever else runs
    n_turns = len(outcomes)

    states = Counter(o.state for o in outcomes.values())
    skip_reasons = Counter(o.reason for o in outcomes.values() if o.state == "skipped")
    fail_reasons = Counter(o.reason for o in outcomes.values() if o.state == "failed")
    proposed = sum(o.proposed for o in outcomes.values())
    dropped = Counter()
    for o in outcomes.values():
        dropped.update(o.dropped)
    grounding_reasons = {"copied from examples", "whole line pasted", "entity not in source", "words not in source",
                         "not in the turn's language", "no content", "small talk", "addressed to the listener"}
    grounding_dropped = sum(v for k, v in dropped.items() if k in grounding_reasons)

    recall = measure_recall(samples, all_atoms, dia_of, args)
    l0_tokens = sum(llama.count_tokens(llm, t) for t in turn_text)
    atom_tokens = sum(llama.count_tokens(llm, a["text"]) for a in all_atoms)

    if sink:
        sink.close()

    stats = dict(llm.stats)
    return {
        "command": " ".join([".venv/bin/python", *sys.argv]),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "threads": llm.threads, "python": platform.python_version(),
                    "loadavg_end": os.getloadavg()},
        "model": {"name": llm.name, "sha256": llm.sha256, "load_seconds": round(load_seconds, 2)},
        "conversations": [s["sample_id"] for s in samples],
        "batch": args.batch,
        "interrupted": interrupted,
        "turns": n_turns,
        "turn_states": dict(states),
        "skip_reasons": dict(skip_reasons.most_common()),
        "fail_reasons": dict(fail_reasons.most_common()),
        "failed_share": round(states["failed"] / n_turns, 4) if n_turns else 0,
        "atoms": len(all_atoms),
        "atoms_per_turn": round(len(all_atoms) / n_turns, 3) if n_turns else 0,
        "proposed_atoms": proposed,
        "dropped": dict(dropped.most_common()),
        "grounding": {"before": proposed - dropped.get("invalid atom", 0),
                      "after": proposed - dropped.get("invalid atom", 0) - grounding_dropped,
                      "dropped": grounding_dropped,
                      "dropped_share": round(grounding_dropped / (proposed - dropped.get("invalid atom", 0)), 4)
                      if proposed - dropped.get("invalid atom", 0) else 0},
        "recall": recall,
        "seconds": {"wall": round(wall, 1), "per_turn_wall": round(wall / n_turns, 3) if n_turns else 0,
                    "per_turn_batch_median": round(statistics.median(per_batch), 3) if per_batch else 0,
                    "per_turn_batch_mean": round(statistics.mean(per_batch), 3) if per_batch else 0,
                    "cpu_per_turn": round(cpu / n_turns, 3) if n_turns else 0},
        "tokens": {"l0": l0_tokens, "atoms": atom_tokens,
                   "ratio": round(l0_tokens / atom_tokens, 2) if atom_tokens else None},
        "llm_stats": {**{k: round(v, 2) if isinstance(v, float) else v for k, v in stats.items()},
                      "reused_share": round(stats["reused_tokens"] / stats["prompt_tokens"], 3)
                      if stats["prompt_tokens"] else 0},
        "atoms_file": args.atoms,
    }


def _extract_all(samples: list[dict], args: argparse.Namespace, llm: llama.LlamaLLM, per_batch: list[float],
                 all_atoms: list[dict], outcomes: dict, turn_text: list[str], dia_of: dict, sink) -> None:
    """Feed every session to extract() in batches, collecting outcomes and atoms as they come."""
    for sample in samples:
        for turns, dia in conversation_turns(sample, args.limit_turns):
            for start in range(0, len(turns), args.batch):
                batch = turns[start : start + args.batch]
                history = turns[max(0, start - 3) : start]
                t0 = time.perf_counter()
                candidates, result = extract.extract(batch, llm, history=history)
                per_batch.append((time.perf_counter() - t0) / len(batch))
                for turn in batch:
                    outcomes[(sample["sample_id"], turn.id)] = result[turn.id]
                    dia_of[(sample["sample_id"], turn.id)] = dia[turn.id]
                    turn_text.append(f"{turn.speaker}: {turn.content}")
                for cand in candidates:
                    atom = {"conv": sample["sample_id"], "record": cand.record,
                            "text": codec.canonical_text(cand.record), "confidence": cand.confidence,
                            "turn_ids": cand.turn_ids, "dia_ids": [dia[i] for i in cand.turn_ids],
                            "session": batch[0].session, "ts": batch[0].ts}
                    all_atoms.append(atom)
                    if sink:  # written as they come: a long run that is stopped still leaves its atoms
                        sink.write(json.dumps(atom, ensure_ascii=False) + "\n")
                        sink.flush()
                if args.verbose:
                    for turn in batch:
                        print(f"{dia[turn.id]:>7} {turn.speaker}: {turn.content[:100]}", file=sys.stderr)
                        print(f"        → {result[turn.id].state} {result[turn.id].reason or ''} "
                              f"{result[turn.id].dropped or ''}", file=sys.stderr)
                    for cand in candidates:
                        print(f"   ATOM {[dia[i] for i in cand.turn_ids]} {codec.canonical_text(cand.record)} "
                              f"{cand.record.get('kind')} {cand.record.get('date', '')} {cand.confidence}", file=sys.stderr)

def measure_recall(samples: list[dict], atoms: list[dict], dia_of: dict, args: argparse.Namespace) -> dict:
    """Share of gold observations covered by an atom from the same turn (MiniLM cosine >= 0.6)."""
    from memdb.models import embedders

    embedder = embedders.load()
    total = covered = 0
    for sample in samples:
        conv = sample["sample_id"]
        seen = {d for (c, _), d in dia_of.items() if c == conv}
        gold = observations(sample, seen)
        mine = [a for a in atoms if a["conv"] == conv]
        if not gold:
            continue
        gold_vecs = embedder.embed([g[0] for g in gold])
        atom_vecs = embedder.embed([a["text"] for a in mine]) if mine else None
        for gi, (_, refs) in enumerate(gold):
            total += 1
            idx = [i for i, a in enumerate(mine) if set(a["dia_ids"]) & set(refs)]
            if idx and float((atom_vecs[idx] @ gold_vecs[gi]).max()) >= THRESHOLD:
                covered += 1
    return {"observations": total, "covered": covered, "recall": round(covered / total, 4) if total else None,
            "threshold": THRESHOLD}


def merge(paths: list[str]) -> dict:
    """One result for several runs (e.g. one per conversation): counts summed, shares recomputed.
    Per-batch medians cannot be merged; each run's is kept under "runs"."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    turns = sum(r["turns"] for r in runs)
    proposed = sum(r["proposed_atoms"] for r in runs)
    before = sum(r["grounding"]["before"] for r in runs)
    dropped_g = sum(r["grounding"]["dropped"] for r in runs)
    obs = sum(r["recall"]["observations"] for r in runs)
    covered = sum(r["recall"]["covered"] for r in runs)
    l0, atom_tokens = sum(r["tokens"]["l0"] for r in runs), sum(r["tokens"]["atoms"] for r in runs)
    wall = sum(r["seconds"]["wall"] for r in runs)
    counts = lambda key: dict(sum((Counter(r[key]) for r in runs), Counter()).most_common())  # noqa: E731
    stats = counts("llm_stats")
    return {
        "command": " ".join([".venv/bin/python", *sys.argv]),
        "merged": paths,
        "conversations": [c for r in runs for c in r["conversations"]],
        "turns": turns,
        "turn_states": counts("turn_states"),
        "skip_reasons": counts("skip_reasons"),
        "fail_reasons": counts("fail_reasons"),
        "failed_share": round(counts("turn_states").get("failed", 0) / turns, 4),
        "atoms": sum(r["atoms"] for r in runs),
        "atoms_per_turn": round(sum(r["atoms"] for r in runs) / turns, 3),
        "proposed_atoms": proposed,
        "dropped": counts("dropped"),
        "grounding": {"before": before, "after": before - dropped_g, "dropped": dropped_g,
                      "dropped_share": round(dropped_g / before, 4) if before else 0},
        "recall": {"observations": obs, "covered": covered, "recall": round(covered / obs, 4), "threshold": THRESHOLD},
        "seconds": {"wall": round(wall, 1), "per_turn_wall": round(wall / turns, 3),
                    "per_turn_batch_median_by_run": [r["seconds"]["per_turn_batch_median"] for r in runs],
                    "per_turn_batch_mean": round(sum(r["seconds"]["per_turn_batch_mean"] * r["turns"] for r in runs) / turns, 3)},
        "tokens": {"l0": l0, "atoms": atom_tokens, "ratio": round(l0 / atom_tokens, 2) if atom_tokens else None},
        "llm_stats": {**{k: round(v, 2) if isinstance(v, float) else v for k, v in stats.items() if k != "reused_share"},
                      "reused_share": round(stats["reused_tokens"] / stats["prompt_tokens"], 3)},
        "runs": [{k: r[k] for k in ("command", "date", "machine", "conversations", "turns", "seconds")} for r in runs],
    }


def prefix_reuse(args: argparse.Namespace, n_turns: int = 8) -> dict:
    """Timing with the prompt prefix kept in the KV cache vs the cache cleared before every call."""
    data = json.loads(DATA.read_text())
    sample = data[-1]
    turns, _ = conversation_turns(sample, 40)[0]
    names = {t.speaker for t in turns}
    turns = [t for t in turns if not prefilter.prefilter(t, names)][:n_turns]
    llm = llama.load_llm(args.llm, threads=args.threads)
    model = llm.model()
    extract.extract([turns[0]], llm)  # warm-up: the prefix is now in the cache
    rows = []
    for mode in ("kept", "cleared", "kept"):
        before, started = dict(llm.stats), time.perf_counter()
        for turn in turns:
            if mode == "cleared":
                model.reset()
                model._ctx.kv_cache_seq_rm(-1, 0, -1)
            extract.extract([turn], llm)
        seconds = time.perf_counter() - started
        rows.append({"mode": mode, "calls": len(turns), "seconds_per_call": round(seconds / len(turns), 2),
                     "prompt_tokens_per_call": round((llm.stats["prompt_tokens"] - before["prompt_tokens"]) / len(turns), 1),
                     "evaluated_prompt_tokens_per_call":
                         round((llm.stats["prompt_eval_tokens"] - before["prompt_eval_tokens"]) / len(turns), 1)})
    return {"command": " ".join([".venv/bin/python", *sys.argv]), "conversation": sample["sample_id"],
            "loadavg_end": os.getloadavg(), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conv", action="append", help="conversation id (repeatable); default: all")
    parser.add_argument("--limit-turns", type=int, default=None, help="first N turns of each conversation")
    parser.add_argument("--batch", type=int, default=6, help="turns per extract() call (memdb's default is 6)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--llm", default=None, help="a GGUF path (default: the bundled model)")
    parser.add_argument("--out", default=None, help="results JSON (default: bench/results/extract_<convs>.json)")
    parser.add_argument("--atoms", default="/tmp/locomo_dev_atoms.jsonl", help="JSONL of the extracted atoms")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every turn and atom to stderr")
    parser.add_argument("--merge", nargs="+", metavar="RESULT", help="combine result files of earlier runs, run nothing")
    parser.add_argument("--prefix-reuse", action="store_true", help="time calls with the prompt prefix cached vs not")
    args = parser.parse_args()
    if args.prefix_reuse:
        out = Path(args.out or ROOT / "bench" / "results" / "extract_prefix_reuse.json")
        out.write_text(json.dumps(prefix_reuse(args), indent=2) + "\n")
        print(out.read_text())
        return
    if args.merge:
        out = Path(args.out or ROOT / "bench" / "results" / "extract_dev.json")
        out.write_text(json.dumps(merge(args.merge), indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {out}")
        return
    result = run(args)
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / (
        "extract_" + ("_".join(args.conv) if args.conv else "dev") + (f"_{args.limit_turns}" if args.limit_turns else "") + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    summary = {k: result[k] for k in ("turns", "atoms_per_turn", "failed_share", "recall", "grounding", "seconds", "tokens")}
    print(json.dumps(summary, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
