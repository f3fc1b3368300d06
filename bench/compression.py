"""Compression on real dialogue: what the atoms save over the raw turns, in tokens and bytes.

Reads a LoCoMo file and the atoms a extraction run wrote for it (JSONL, one candidate a line:
record, text, confidence, dia_ids, conv — bench/extract_locomo.py writes one). For each
conversation in the atoms file, its turns up to the last turn any atom cites (the extraction
may have covered only a prefix; --whole takes every turn) are loaded into a memdb file with
the atoms absorbed through the lifecycle (dedup), as bench/locomo_retrieval.py does. Figures:

1. tokens (the extraction model's tokenizer, memdb.models.llama.count_tokens) of the L0 text —
   each turn as "speaker: words" — against the atoms' canonical lines, for the candidates as
   extracted and for the active atoms after dedup, and for the lines as context() renders them
   ("date · kind · text");
2. bytes of the active atoms' records as MessagePack with short keys and coded enums
   (memdb.codec.pack, what the file stores) against the same records as JSON with full key
   and enum names;
3. retrieval at equal recall: for every question with evidence in scope (category 5 skipped),
   the tokens of `context()` at several budgets and the recall of the evidence turns its lines
   stand for, against raw turns from turns-only search taken best-first until they reach the
   same recall (per question), and against pasting the whole conversation (recall 1). Raw
   turns stop as soon as they reach the recall while context() fills its budget, so the
   ratio is also given with the context stopped at its first lines that reach it.

    .venv/bin/python bench/compression.py --atoms /tmp/locomo_dev_atoms.jsonl
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from bench.common import LOCOMO_DEV, evidence, load_atoms, machine, parse_session_time, turn_text  # noqa: E402
from memdb import codec  # noqa: E402
from memdb.db import rows as db_rows  # noqa: E402
from memdb.models import llama  # noqa: E402
from memdb.search import context as search_context  # noqa: E402

DATA = LOCOMO_DEV
BUDGETS = (100, 200, 400, 800)
MAX_RAW = 60  # raw turns tried best-first before giving up on matching the recall


def tokens(line: str) -> int:
    return llama.count_tokens(None, line)


def conversation(sample: dict) -> list[tuple[str, dict]]:
    """Every turn as (session, LoCoMo turn with its ts)."""
    conv, out, n = sample["conversation"], [], 1
    while f"session_{n}" in conv:
        start = parse_session_time(conv[f"session_{n}_date_time"])
        for i, t in enumerate(conv[f"session_{n}"]):
            out.append((f"session_{n}", dict(t, ts=(start + dt.timedelta(seconds=30 * i)).isoformat())))
        n += 1
    return out


def load_turns(mem: memdb.Memory, user: str, turns: list[tuple[str, dict]]) -> dict[str, int]:
    """Add the turns session by session; returns dia_id -> turn id."""
    dia_to_turn: dict[str, int] = {}
    by_session: dict[str, list[dict]] = {}
    for session, t in turns:
        by_session.setdefault(session, []).append(t)
    for session, ts in by_session.items():
        ids = mem.add([{"role": "user", "name": t["speaker"], "content": turn_text(t), "ts": t["ts"]} for t in ts],
                      user=user, session=session)
        dia_to_turn.update({t["dia_id"]: i for t, i in zip(ts, ids)})
    return dia_to_turn


def sizes(records: list[dict]) -> dict:
    packed = sum(len(codec.pack(r)) for r in records)
    as_json = sum(len(json.dumps(r, ensure_ascii=False).encode("utf-8")) for r in records)
    return {"atoms": len(records), "msgpack_bytes": packed, "json_bytes": as_json,
            "json_over_msgpack": round(as_json / packed, 2) if packed else None,
            "msgpack_bytes_per_atom": round(packed / len(records), 1) if records else None}


def context_with_turns(mem: memdb.Memory, query: str, user: str, budget: int, layer: str) -> tuple[str, list]:
    """context() as Memory.context builds it, and per line the tokens and L0 turns covered so far."""
    hits = mem.search(query, user=user, k=20, layer=layer)
    by_line: dict[str, list[int]] = {}

    def related(hit: memdb.Hit) -> list[memdb.Hit]:
        out = search_context.related_atoms(mem.conn, hit)
        for h in out:
            by_line[search_context.render_line(h)] = h.turn_ids
        return out

    for h in hits:
        by_line[search_context.render_line(h)] = h.turn_ids
    block = search_context.context(hits, related, budget=budget, count_tokens=mem.count_tokens)
    prefix: list[tuple[int, set[int]]] = []  # (tokens so far, turns covered so far) per line
    used, covered = 0, set()
    for line in block.splitlines():
        used += mem.count_tokens(line + "\n")
        covered = covered | set(by_line.get(line.removesuffix(" (conflicts with another statement; ask which holds)"), []))
        prefix.append((used, covered))
    return block, prefix


def run(data: Path, atoms_path: Path, whole: bool) -> dict:
    samples = {s["sample_id"]: s for s in json.loads(data.read_text())}
    rows = [json.loads(line) for line in atoms_path.read_text().splitlines() if line.strip()]
    convs = sorted({r["conv"] for r in rows})
    out: dict = {"conversations": {}, "questions": []}
    tok = {"l0": 0, "candidates": 0, "atoms": 0, "atoms_rendered": 0}
    all_records: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for conv in convs:
            turns = conversation(samples[conv])
            cited = {d for r in rows if r["conv"] == conv for d in r.get("dia_ids", [])}
            last = max((i for i, (_, t) in enumerate(turns) if t["dia_id"] in cited), default=len(turns) - 1)
            turns = turns if whole else turns[: last + 1]
            mem = memdb.open(Path(tmp) / f"{conv}.db", extract="defer")
            dia_to_turn = load_turns(mem, conv, turns)
            load_atoms(mem, conv, atoms_path, dia_to_turn)
            turn_to_dia = {v: k for k, v in dia_to_turn.items()}
            l0_lines = [f"{t['speaker']}: {turn_text(t)}" for _, t in turns]
            cand_lines = [codec.canonical_text(codec.validate(r["record"])) for r in rows if r["conv"] == conv]
            active = db_rows.read_atoms(mem.conn, f'where a."user" = ? and a."status" in {codec.HELD}', (conv,))
            c = {"turns": len(turns), "candidates": len(cand_lines), "active_atoms": len(active),
                 "l0_tokens": sum(tokens(x) for x in l0_lines),
                 "candidate_tokens": sum(tokens(x) for x in cand_lines),
                 "atom_tokens": sum(tokens(a.text) for a in active),
                 "atom_rendered_tokens": sum(tokens(_render(a)) for a in active)}
            c["l0_over_atoms"] = round(c["l0_tokens"] / max(1, c["atom_tokens"]), 2)
            out["conversations"][conv] = c
            tok["l0"] += c["l0_tokens"]
            tok["candidates"] += c["candidate_tokens"]
            tok["atoms"] += c["atom_tokens"]
            tok["atoms_rendered"] += c["atom_rendered_tokens"]
            all_records += [a.record for a in active]
            full_context = sum(mem.count_tokens(search_context.render_line(_turn_hit(mem, t, conv)) + "\n")
                               for t in dia_to_turn.values())
            out["questions"] += questions(mem, conv, samples[conv], dia_to_turn, turn_to_dia, full_context)
            print(f"{conv}: {len(turns)} turns, {len(active)} atoms, L0/atoms {c['l0_over_atoms']}x", file=sys.stderr)
            mem.close()
    out["tokens"] = {**tok, "l0_over_candidates": round(tok["l0"] / max(1, tok["candidates"]), 2),
                     "l0_over_atoms": round(tok["l0"] / max(1, tok["atoms"]), 2),
                     "l0_over_atoms_rendered": round(tok["l0"] / max(1, tok["atoms_rendered"]), 2)}
    out["bytes"] = sizes(all_records)
    out["retrieval"] = summarise(out["questions"])
    return out


def _render(atom) -> str:
    hit = memdb.Hit(id=atom.id, layer="atom", text=atom.text, score=0.0, turn_ids=atom.turn_ids,
                    ts=atom.valid_from if atom.kind == "event" else atom.last_seen, kind=atom.kind)
    return search_context.render_line(hit)


def _turn_hit(mem: memdb.Memory, turn_id: int, user: str) -> memdb.Hit:
    row = mem.turns([turn_id], user=user)[0]
    return memdb.Hit(id=turn_id, layer="turn", text=row["content"], score=0.0, turn_ids=[turn_id],
                     ts=row["ts"], speaker=row["speaker"])


def questions(mem: memdb.Memory, user: str, sample: dict, dia_to_turn: dict[str, int],
              turn_to_dia: dict[int, str], full_context: int) -> list[dict]:
    qas = [q for q in sample["qa"] if q.get("category") != 5 and evidence(q) and evidence(q) <= set(dia_to_turn)]
    out = []
    for qa in qas:
        gold = {dia_to_turn[d] for d in evidence(qa)}
        # Raw turns best-first from the turns-only search, and their cumulative cost.
        raw = mem.search(qa["question"], user=user, k=MAX_RAW, layer="turns")
        raw_cost, raw_recall, used = [], [], 0
        for i, h in enumerate(raw):
            used += mem.count_tokens(search_context.render_line(h) + "\n")
            raw_cost.append(used)
            raw_recall.append(len(gold & {t for x in raw[: i + 1] for t in x.turn_ids}) / len(gold))
        row = {"conv": user, "question": qa["question"], "category": qa.get("category"), "full_context_tokens": full_context}
        for layer in ("both", "atoms"):
            for budget in BUDGETS:
                block, prefix = context_with_turns(mem, qa["question"], user, budget, layer)
                recall = len(gold & prefix[-1][1]) / len(gold) if prefix else 0.0
                cost = mem.count_tokens(block) if block else 0
                # Both sides stopped as early as possible: the context's first lines reaching
                # its recall, and the fewest raw turns reaching it (None when 60 never do).
                needed = next((c for c, cov in prefix if len(gold & cov) / len(gold) >= recall), 0) if recall > 0 else 0
                match = next((c for c, r in zip(raw_cost, raw_recall) if r >= recall), None) if recall > 0 else 0
                row[f"{layer}@{budget}"] = {"tokens": cost, "recall": round(recall, 4),
                                            "tokens_to_recall": needed, "raw_tokens_same_recall": match}
        out.append(row)
    return out


def summarise(rows: list[dict]) -> dict:
    out = {"questions": len(rows),
           "full_context_tokens_mean": round(statistics.fmean(r["full_context_tokens"] for r in rows), 1) if rows else None}
    for key in (k for k in (rows[0] if rows else {}) if "@" in k):
        cells = [r[key] for r in rows]
        matched = [c for c in cells if c["raw_tokens_same_recall"] is not None and c["recall"] > 0]
        ctx_tokens = statistics.fmean(c["tokens"] for c in cells)
        out[key] = {
            "context_tokens_mean": round(ctx_tokens, 1),
            "recall_mean": round(statistics.fmean(c["recall"] for c in cells), 4),
            "full_context_over_context": round(out["full_context_tokens_mean"] / ctx_tokens, 2) if ctx_tokens else None,
            # over the questions where the context found evidence and raw turns could match it
            "matched_questions": len(matched),
            "raw_over_context_same_recall": round(sum(c["raw_tokens_same_recall"] for c in matched)
                                                  / max(1, sum(c["tokens"] for c in matched)), 2),
            "raw_over_context_both_stopped_early": round(sum(c["raw_tokens_same_recall"] for c in matched)
                                                         / max(1, sum(c["tokens_to_recall"] for c in matched)), 2),
            "raw_never_matched": sum(c["raw_tokens_same_recall"] is None for c in cells),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--atoms", type=Path, default=Path("/tmp/locomo_dev_atoms.jsonl"))
    parser.add_argument("--whole", action="store_true", help="every turn, not only up to the last cited one")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "compression.json")
    args = parser.parse_args()
    if not args.atoms.exists():
        raise SystemExit(f"{args.atoms} does not exist: run bench/extract_locomo.py first")
    result = run(args.data, args.atoms, args.whole)
    result.update({"command": "python bench/compression.py " + " ".join(sys.argv[1:]), "machine": machine(),
                   "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                   "data": args.data.name, "atoms_file": str(args.atoms),
                   # the extraction may still be writing the file: say what this run read
                   "atoms_rows_read": sum(c["candidates"] for c in result["conversations"].values())})
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    t, b = result["tokens"], result["bytes"]
    print(f"tokens: L0 {t['l0']:,} vs atoms {t['atoms']:,} ({t['l0_over_atoms']}x; rendered {t['l0_over_atoms_rendered']}x); "
          f"bytes: JSON/MessagePack {b['json_over_msgpack']}x ({b['msgpack_bytes_per_atom']} B/atom)")
    for key, v in result["retrieval"].items():
        if isinstance(v, dict):
            print(f"{key:12} tokens {v['context_tokens_mean']:6.0f} recall {v['recall_mean']:.3f} "
                  f"full/ctx {v['full_context_over_context']}x raw/ctx@same recall {v['raw_over_context_same_recall']}x "
                  f"(both stopped early {v['raw_over_context_both_stopped_early']}x) "
                  f"(n={v['matched_questions']}, raw never matched {v['raw_never_matched']})")


if __name__ == "__main__":
    main()
