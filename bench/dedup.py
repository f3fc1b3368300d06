"""Measure the lifecycle's merge decision, and what dedup does to the dev split.

Part 1 (always): the labelled pairs in bench/dedup_pairs.json (held atom a, new atom b, label
duplicate / distinct / conflicting) are judged by lifecycle.relation with the real default
embedder, and in keyword-only mode. Reported: precision and recall of "merge", both failure
directions (distinct facts merged = information lost; duplicates left = budget wasted),
conflict detection, a breakdown by language, and a sweep of the thresholds.

Part 2 (with --atoms FILE, JSON lines from the extraction bench: record, confidence, source
dia_ids, conv id): every candidate is absorbed in order into a fresh file per conversation;
reported are active atoms before and after dedup and the near-duplicate active pairs left
(cosine >= 0.9 between a user's active atoms).

    .venv/bin/python bench/dedup.py                       # part 1 -> bench/results/dedup.json
    .venv/bin/python bench/dedup.py --atoms /tmp/locomo_dev_atoms.jsonl   # + part 2 -> dedup_dev.json
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from memdb import codec, text  # noqa: E402
from memdb.db import connection  # noqa: E402
from memdb.db import rows as db_rows  # noqa: E402
from memdb.lifecycle import absorb, relation  # noqa: E402
from memdb.models import embedders  # noqa: E402
from memdb.settings import Settings  # noqa: E402
from bench.common import LOCOMO_DEV  # noqa: E402

PAIRS = ROOT / "bench" / "dedup_pairs.json"
RESULTS = ROOT / "bench" / "results"
DEV = LOCOMO_DEV
LABEL_OF = {"duplicate": "duplicate", "distinct": "distinct", "conflicting": "conflict"}


# ---------------------------------------------------------------- part 1: labelled pairs


def load_pairs(path: Path) -> list[dict]:
    pairs = json.loads(path.read_text(encoding="utf-8"))["pairs"]
    for pair in pairs:
        pair["a"], pair["b"] = codec.validate(pair["a"]), codec.validate(pair["b"])
    return pairs


def cosines(pairs: list[dict], embedder) -> list[float]:
    lines = [codec.canonical_text(p[side]) for p in pairs for side in ("a", "b")]
    vectors = embedder.embed(lines)
    return [float(vectors[2 * i] @ vectors[2 * i + 1]) for i in range(len(pairs))]


# Whether the embedder measured reads Chinese and English alike (set by labelled()): the
# relation then uses the multilingual thresholds, and those are the ones swept.
MULTILINGUAL = False


def _sim_field() -> tuple[str, tuple[float, ...]]:
    if MULTILINGUAL:
        return "merge_similarity_multilingual", (0.92, 0.93, 0.94, 0.95, 0.96, 0.97)
    return "merge_similarity", (0.8, 0.82, 0.84, 0.86, 0.88, 0.9)


def judge(pairs: list[dict], sims: list[float] | None, settings: Settings) -> list[str]:
    """The relation for each pair: with cosines, or keyword-only when sims is None."""
    out = []
    for i, pair in enumerate(pairs):
        a_line, b_line = codec.canonical_text(pair["a"]), codec.canonical_text(pair["b"])
        sim = sims[i] if sims is not None else relation.keyword_similarity(b_line, a_line)
        out.append(relation.relation(pair["b"], pair["a"], sim, settings, keyword_only=sims is None,
                                       multilingual=MULTILINGUAL))
    return out


def scores(pairs: list[dict], predicted: list[str]) -> dict:
    gold = [LABEL_OF[p["label"]] for p in pairs]
    merged = [p == "duplicate" for p in predicted]
    is_dup = [g == "duplicate" for g in gold]
    tp = sum(m and d for m, d in zip(merged, is_dup))
    conflicts = [p == "conflict" for p in predicted]
    is_con = [g == "conflict" for g in gold]
    ctp = sum(c and g for c, g in zip(conflicts, is_con))
    return {
        "pairs": len(pairs),
        "merge_precision": _ratio(tp, sum(merged)),
        "merge_recall": _ratio(tp, sum(is_dup)),
        "merged_but_distinct": sum(m and g == "distinct" for m, g in zip(merged, gold)),
        "merged_but_conflicting": sum(m and g == "conflict" for m, g in zip(merged, gold)),
        "duplicates_left": sum(d and not m for m, d in zip(merged, is_dup)),
        "conflict_precision": _ratio(ctp, sum(conflicts)),
        "conflict_recall": _ratio(ctp, sum(is_con)),
        "confusion": {g: dict(Counter(p for p, gg in zip(predicted, gold) if gg == g)) for g in sorted(set(gold))},
    }


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 3) if b else None


def language(pair: dict) -> str:
    langs = {bool(text.has_cjk(codec.canonical_text(pair[s]))) for s in ("a", "b")}
    return "mixed" if len(langs) == 2 else ("zh" if True in langs else "en")


def errors(pairs: list[dict], predicted: list[str], sims: list[float] | None) -> list[dict]:
    return [
        {"id": p["id"], "label": p["label"], "predicted": pred, "source": p["source"],
         "a": codec.canonical_text(p["a"]), "b": codec.canonical_text(p["b"]),
         "cosine": None if sims is None else round(sims[i], 3)}
        for i, (p, pred) in enumerate(zip(pairs, predicted)) if LABEL_OF[p["label"]] != pred
    ]


def sweep(pairs: list[dict], sims: list[float], base: Settings) -> list[dict]:
    rows = []
    crosslingual = {"merge_similarity_crosslingual": (0.86, 0.88, 0.9, 0.92),
                    "conflict_similarity_crosslingual": (0.84, 0.86, 0.88, 0.9)} if MULTILINGUAL else {}
    for field, values in {
        _sim_field()[0]: _sim_field()[1],
        **crosslingual,
        "merge_similarity_same_key": (0.5, 0.6, 0.66, 0.72, 0.8),
        "merge_value_overlap": (0.34, 0.5, 0.6, 0.75, 1.0),
        "merge_min_overlap": (0.0, 0.2, 0.3, 0.5),
    }.items():
        for value in values:
            settings = dataclasses.replace(base, **{field: value})
            s = scores(pairs, judge(pairs, sims, settings))
            rows.append({field: value, **{k: s[k] for k in (
                "merge_precision", "merge_recall", "merged_but_distinct", "merged_but_conflicting", "duplicates_left")}})
    for value in (0.6, 0.7, 0.8, 0.9, 1.0):
        settings = dataclasses.replace(base, merge_keyword_overlap=value)
        s = scores(pairs, judge(pairs, None, settings))
        rows.append({"merge_keyword_overlap (keyword-only)": value, "merge_precision": s["merge_precision"],
                     "merge_recall": s["merge_recall"], "merged_but_distinct": s["merged_but_distinct"],
                     "duplicates_left": s["duplicates_left"]})
    return rows


def grid(pairs: list[dict], sims: list[float], base: Settings, top: int = 8) -> list[dict]:
    """The best joint settings by F0.5 of the merge decision: precision counts double,
    because a wrong merge loses a fact while a missed one only spends budget."""
    rows = []
    field, values = _sim_field()
    for ms in values:
        for sk in (0.6, 0.66, 0.7, 0.72, 0.76, 0.8):
            for vo in (0.5, 0.6, 0.75):
                settings = dataclasses.replace(base, **{field: ms}, merge_similarity_same_key=sk,
                                               merge_value_overlap=vo)
                s = scores(pairs, judge(pairs, sims, settings))
                p, r = s["merge_precision"] or 0.0, s["merge_recall"] or 0.0
                f = 1.25 * p * r / (0.25 * p + r) if p + r else 0.0
                rows.append({field: ms, "merge_similarity_same_key": sk, "merge_value_overlap": vo,
                             "f0.5": round(f, 3), "merge_precision": p, "merge_recall": r,
                             "merged_but_distinct": s["merged_but_distinct"], "duplicates_left": s["duplicates_left"]})
    return sorted(rows, key=lambda row: -row["f0.5"])[:top]


SOURCES = ("locomo", "written", "extracted")


def cross_check(pairs: list[dict], sims: list[float], base: Settings) -> dict:
    """Leave one source out: tune on the other two, score on it. The in-sample figures above
    flatter the rules (the defaults were tuned on all pairs); these do not."""
    out = {}
    for held_out in SOURCES:
        t_idx = [i for i, p in enumerate(pairs) if not p["source"].startswith(held_out)]
        e_idx = [i for i, p in enumerate(pairs) if p["source"].startswith(held_out)]
        best = grid([pairs[i] for i in t_idx], [sims[i] for i in t_idx], base, top=1)[0]
        tuned = {k: best[k] for k in (_sim_field()[0], "merge_similarity_same_key", "merge_value_overlap")}
        test = [pairs[i] for i in e_idx]
        s = scores(test, judge(test, [sims[i] for i in e_idx], dataclasses.replace(base, **tuned)))
        out[f"scored_on_{held_out}"] = {"tuned": tuned, **{k: s[k] for k in (
            "pairs", "merge_precision", "merge_recall", "merged_but_distinct", "duplicates_left")}}
    return out


def labelled(embedder, settings: Settings) -> dict:
    global MULTILINGUAL
    MULTILINGUAL = getattr(embedder, "multilingual", True)
    pairs = load_pairs(PAIRS)
    sims = cosines(pairs, embedder)
    vector = judge(pairs, sims, settings)
    keyword = judge(pairs, None, settings)
    by_lang = {}
    for lang in ("en", "zh", "mixed"):
        idx = [i for i, p in enumerate(pairs) if language(p) == lang]
        by_lang[lang] = scores([pairs[i] for i in idx], [vector[i] for i in idx])
    by_source = {}
    for origin in SOURCES:
        idx = [i for i, p in enumerate(pairs) if p["source"].startswith(origin)]
        by_source[origin] = scores([pairs[i] for i in idx], [vector[i] for i in idx])
    return {
        "embedder": embedder.name,
        "settings": {k: getattr(settings, k) for k in (
            "merge_similarity", "merge_similarity_multilingual", "merge_similarity_crosslingual",
            "conflict_similarity_crosslingual", "merge_similarity_same_key", "merge_value_overlap",
            "merge_keyword_overlap", "merge_min_overlap")},
        "labels": dict(Counter(p["label"] for p in pairs)),
        "vector": scores(pairs, vector),
        "keyword_only": scores(pairs, keyword),
        "vector_by_language": by_lang,
        "vector_by_source": by_source,
        "cosine_by_label": {label: _spread([s for s, p in zip(sims, pairs) if p["label"] == label])
                            for label in ("duplicate", "distinct", "conflicting")},
        "errors_vector": errors(pairs, vector, sims),
        "errors_keyword_only": errors(pairs, keyword, None),
        "sweep": sweep(pairs, sims, settings),
        "grid_best_f0.5": grid(pairs, sims, settings),
        "cross_check": cross_check(pairs, sims, settings),
    }


def _spread(values: list[float]) -> dict:
    a = np.array(values)
    return {"n": len(a), "min": round(float(a.min()), 3), "median": round(float(np.median(a)), 3),
            "max": round(float(a.max()), 3)}


# ---------------------------------------------------------------- part 2: the dev split


def load_atoms(path: Path) -> list[dict]:
    """Candidates from the extraction bench; tolerant of its field names."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        record = row.get("record") or row
        try:
            record = codec.validate({k: v for k, v in record.items() if k in codec.SHORT_KEYS})
        except memdb.InvalidInput:
            continue
        conv = row.get("conv") or row.get("conv_id") or row.get("sample_id")
        dia = row.get("dia_ids") or row.get("source_dia_ids") or row.get("sources") or row.get("evidence") or []
        out.append({"conv": conv, "record": record, "confidence": float(row.get("confidence", 0.8)),
                    "dia_ids": [dia] if isinstance(dia, str) else list(dia), "ts": row.get("ts"),
                    "session": row.get("session")})
    return out


def session_times(sample: dict) -> dict[str, str]:
    """dia_id -> ISO time of its session ("1:56 pm on 8 May, 2023"), a second per turn apart."""
    conv, times = sample["conversation"], {}
    for key, value in conv.items():
        if key.startswith("session_") and key.endswith("_date_time"):
            start = dt.datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y")
            for j, turn in enumerate(conv.get(key[: -len("_date_time")], [])):
                times[turn["dia_id"]] = (start + dt.timedelta(seconds=j)).strftime("%Y-%m-%dT%H:%M:%S")
    return times


def dev_split(path: Path, embedder, settings: Settings) -> dict:
    atoms = load_atoms(path)
    samples = {s["sample_id"]: s for s in json.loads(DEV.read_text(encoding="utf-8"))}
    report = {"file": str(path), "candidates": len(atoms), "conversations": {}}
    for conv in sorted({a["conv"] for a in atoms if a["conv"] in samples}):
        mine = [a for a in atoms if a["conv"] == conv]
        vectors = embedder.embed([codec.canonical_text(a["record"]) for a in mine])
        with_vectors = _one_conversation(samples[conv], mine, vectors, embedder, settings, keyword_only=False)
        keywords = _one_conversation(samples[conv], mine, vectors, embedder, settings, keyword_only=True)
        report["conversations"][conv] = {**with_vectors, "sessions": len({a["session"] for a in mine}), "keyword_only": {
            k: keywords[k] for k in ("active_after", "actions", "near_duplicate_pairs_after")}}
    convs = report["conversations"].values()
    report["total"] = {k: sum(c[k] for c in convs) for k in (
        "candidates", "active_before", "active_after", "near_duplicate_pairs_before", "near_duplicate_pairs_after",
        "atoms_with_a_near_duplicate_before", "atoms_with_a_near_duplicate_after")}
    report["total"]["keyword_only_active_after"] = sum(c["keyword_only"]["active_after"] for c in convs)
    report["total"]["keyword_only_near_duplicate_pairs_after"] = sum(
        c["keyword_only"]["near_duplicate_pairs_after"] for c in convs)
    return report


def _one_conversation(sample: dict, atoms: list[dict], vectors: np.ndarray, embedder, settings: Settings,
                      *, keyword_only: bool) -> dict:
    """Absorb one conversation's candidates in time order into a fresh file (vectors given to
    absorb, or None as in keyword-only mode) and count what stays active."""
    times = session_times(sample)
    with tempfile.TemporaryDirectory() as tmp, memdb.open(Path(tmp) / "dev.db", embedder=embedder,
                                                           extract="defer", settings=settings) as mem:
        user = sample["sample_id"]
        turn_of = _store_turns(mem, sample, times, user)
        actions: Counter = Counter()
        examples: list[dict] = []
        vector_of: dict[int, np.ndarray] = {}  # atom id -> the vector of the candidate that made it
        started = time.perf_counter()
        for i in sorted(range(len(atoms)), key=lambda i: _when(atoms[i], times)):
            atom = atoms[i]
            with connection.write(mem.conn):
                incoming = absorb.Incoming(user=user, record=atom["record"], confidence=atom["confidence"],
                                           turn_ids=[turn_of[d] for d in atom["dia_ids"] if d in turn_of],
                                           ts=_when(atom, times), vector=None if keyword_only else vectors[i])
                action, atom_id = absorb.absorb(mem.conn, incoming, absorb.Engine(settings), multilingual=MULTILINGUAL)
            actions[action] += 1
            vector_of.setdefault(atom_id, vectors[i])
            if action != "new":
                examples.append(_example(mem, action, atom_id, atom["record"]))
        elapsed = time.perf_counter() - started
        active = [r[0] for r in mem.conn.execute('select "id" from "atoms" where "status" != 1 order by "id"')]
        texts = [mem.conn.execute('select "text" from "atoms" where "id" = ?', (i,)).fetchone()[0] for i in active]
    kept = np.stack([vector_of[i] for i in active]) if active else np.zeros((0, 1), np.float32)
    return {
        "candidates": len(atoms),
        "active_before": len(atoms),
        "active_after": len(active),
        "actions": dict(actions),
        "near_duplicate_pairs_before": _near_pairs(vectors),
        "near_duplicate_pairs_after": _near_pairs(kept),
        "atoms_with_a_near_duplicate_before": _with_partner(vectors),
        "atoms_with_a_near_duplicate_after": _with_partner(kept),
        "ms_per_absorb": round(1000 * elapsed / max(1, len(atoms)), 2),
        "examples": examples,
        "near_duplicates_left": _near_list(kept, texts),
    }


def _when(atom: dict, times: dict[str, str]) -> str:
    return atom["ts"] or max((times[d] for d in atom["dia_ids"] if d in times), default=max(times.values()))


def _near_list(vectors: np.ndarray, texts: list[str], threshold: float = 0.9) -> list[dict]:
    if len(vectors) < 2:
        return []
    sims = np.triu(vectors @ vectors.T, k=1)
    return [{"cosine": round(float(sims[i, j]), 3), "a": texts[i], "b": texts[j]}
            for i, j in np.argwhere(sims >= threshold)]


def _example(mem, action: str, atom_id: int, record: dict) -> dict:
    """What a non-new action did, readable: the new line and the line(s) it met."""
    if action == "merged":
        held = [mem.conn.execute('select "text" from "atoms" where "id" = ?', (atom_id,)).fetchone()[0]]
    else:
        held = [r[0] for r in mem.conn.execute(
            'select "text" from "atoms" where "superseded_by" = :id or "id" in (select "other_id" from '
            '"atom_conflicts" where "atom_id" = :id)', {"id": atom_id})]
    return {"action": action, "new": codec.canonical_text(record), "held": held}


def _store_turns(mem, sample: dict, times: dict[str, str], user: str) -> dict[str, int]:
    # Turns go in without vectors: part 2 measures atoms, and embedding every turn costs minutes.
    conv, turn_of = sample["conversation"], {}
    with connection.write(mem.conn):
        for key in sorted((k for k in conv if k.startswith("session_") and k[8:].isdigit()),
                          key=lambda k: int(k[8:])):
            for seq, turn in enumerate(conv[key], start=1):
                turn_of[turn["dia_id"]] = db_rows.insert_turn(
                    mem.conn, user=user, session=key, seq=seq, role="user", speaker=turn["speaker"],
                    content=turn["text"], ts=times[turn["dia_id"]], vector=None)
    return turn_of


def _near_pairs(vectors: np.ndarray, threshold: float = 0.9) -> int:
    if len(vectors) < 2:
        return 0
    sims = vectors @ vectors.T
    return int(np.triu(sims >= threshold, k=1).sum())


def _with_partner(vectors: np.ndarray, threshold: float = 0.9) -> int:
    if len(vectors) < 2:
        return 0
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, 0.0)
    return int((sims >= threshold).any(axis=1).sum())


# ---------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--atoms", type=Path, help="JSON lines of extracted dev-split candidates (part 2)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--embedder", default="default", help="'default' (multilingual-e5-small) or 'minilm'")
    args = parser.parse_args()
    embedder, settings = embedders.load(args.embedder), Settings()
    args.out.mkdir(parents=True, exist_ok=True)
    result = labelled(embedder, settings)
    (args.out / "dedup.json").write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    _print_labelled(result)
    if args.atoms:
        if not args.atoms.exists():
            print(f"\n{args.atoms} does not exist yet: the dev-split part waits for it")
            return
        dev = dev_split(args.atoms, embedder, settings)
        (args.out / "dedup_dev.json").write_text(json.dumps(dev, indent=1) + "\n", encoding="utf-8")
        print(json.dumps(dev, indent=1))


def _print_labelled(result: dict) -> None:
    print(f"labelled pairs: {result['labels']}  embedder: {result['embedder']}")
    for mode in ("vector", "keyword_only"):
        s = result[mode]
        print(f"{mode:13} merge P={s['merge_precision']} R={s['merge_recall']}  "
              f"distinct merged={s['merged_but_distinct']} conflicting merged={s['merged_but_conflicting']} "
              f"duplicates left={s['duplicates_left']}  conflict P={s['conflict_precision']} R={s['conflict_recall']}")
    for lang, s in [*result["vector_by_language"].items(), *result["vector_by_source"].items()]:
        print(f"  {lang:6} n={s['pairs']:3} merge P={s['merge_precision']} R={s['merge_recall']} "
              f"conflict R={s['conflict_recall']}")
    for name, c in result["cross_check"].items():
        print(f"  {name}: {c}")
    print("errors (vector):")
    for e in result["errors_vector"]:
        print(f"  #{e['id']:3} {e['label']:11} -> {e['predicted']:9} cos={e['cosine']}  {e['a']}  |  {e['b']}")


if __name__ == "__main__":
    main()
