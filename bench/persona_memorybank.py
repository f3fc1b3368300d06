"""How much of a MemoryBank-cn dev user's profile (hobbies, personality traits) the L3 persona
card recovers, at what size; and what L2/L3 cost to hold (size per user).

Input: each user's extracted file (bench/memorybank_retrieval.py --built DIR made them: the real
pipeline over the user's dialogue). Each run copies the file, places its atoms in scenarios and
ranks the persona lines (Memory.build_layers: the same code absorb runs per atom), then renders
the card at each budget with the bundled model's tokenizer.

Scoring (simple, stated, the same for every card): the profile's `hobbies` and `personality`
are split at "，" into items ("摄影", "开朗大方"). An item is found by a set of lines when
- contained: the item, or for a four-character trait either two-character half ("开朗"), appears
  in a line (CJK text compared without spaces or punctuation), or
- e5: the bundled embedder's cosine between "爱好：<item>" / "性格：<item>" and its best line,
  rescaled by its cosine_baseline (0.75) as search does, reaches a floor. e5 rates every pair of
  Chinese lines alike, so the floor is calibrated, not chosen: it is the --decoy-rate (10%)
  quantile from the top of the same score for decoys (the other users' items that are not this
  user's) against this user's held atoms; "decoys_found" reports how often decoys pass it on
  the card, the false-positive rate the e5 figures carry.
"ceiling" scores the same way over every held atom of the user: what extraction kept at all,
the most any card could recover.

    .venv/bin/python bench/persona_memorybank.py --built /tmp/mb_built --out bench/results/persona_memorybank.json
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from memdb.db import rows  # noqa: E402
from memdb.models import embedders  # noqa: E402
from bench.common import MEMORYBANK_DEV  # noqa: E402

DATA = MEMORYBANK_DEV
BUDGETS = (100, 200, 400)
_PUNCT = re.compile(r"[\s，。、,.!！？?：:；;（）()《》“”\"'·-]+")


def items(profile: dict) -> dict[str, list[str]]:
    return {"hobbies": [x for x in _PUNCT.split(profile["hobbies"]) if x],
            "personality": [x for x in _PUNCT.split(profile["personality"]) if x]}


def contained(item: str, lines: list[str], trait: bool) -> bool:
    flat = [_PUNCT.sub("", line) for line in lines]
    parts = [item] + ([item[:2], item[2:]] if trait and len(item) == 4 else [])
    return any(p in line for p in parts for line in flat)


def best_scores(group: str, wanted: list[str], lines: list[str], embedder) -> list[float]:
    """Each item's rescaled e5 cosine to its best line."""
    base = getattr(embedder, "cosine_baseline", 0.0)
    if not lines or not wanted:
        return [0.0] * len(wanted)
    label = "爱好" if group == "hobbies" else "性格"
    queries = embedder.embed([f"{label}：{w}" for w in wanted])
    return [float(s) for s in (np.max(queries @ _embedded(lines, embedder).T, axis=1) - base) / (1 - base)]


_CACHE: dict[str, np.ndarray] = {}


def _embedded(lines: list[str], embedder) -> np.ndarray:
    todo = [line for line in dict.fromkeys(lines) if line not in _CACHE]
    if todo:
        _CACHE.update(zip(todo, embedder.embed(todo)))
    return np.stack([_CACHE[line] for line in lines])


def floors(profile_items: dict, decoys: dict, held: list[str], embedder, rate: float) -> dict[str, float]:
    """Per group, the score that only `rate` of the decoys reach against the user's held atoms."""
    return {g: float(np.quantile(best_scores(g, decoys[g], held, embedder), 1 - rate)) for g in profile_items}


def found(profile_items: dict[str, list[str]], lines: list[str], embedder, floor: dict[str, float],
          decoys: dict[str, list[str]]) -> dict:
    """{group: {"contained": n, "contained_or_e5": n, "items": n, "found": [...], "decoys_found": share}}."""
    out = {}
    for group, wanted in profile_items.items():
        scores = best_scores(group, wanted, lines, embedder)
        hits, by_e5, by_text = [], 0, 0
        for w, best in zip(wanted, scores):
            text_hit = contained(w, lines, trait=group == "personality")
            e5_hit = best >= floor[group]
            by_text += text_hit
            by_e5 += text_hit or e5_hit
            if text_hit or e5_hit:
                hits.append(w)
        decoy_scores = best_scores(group, decoys[group], lines, embedder)
        out[group] = {"items": len(wanted), "contained": by_text, "contained_or_e5": by_e5, "found": hits,
                      "floor": round(floor[group], 3),
                      "decoys_found": round(sum(d >= floor[group] for d in decoy_scores) / len(decoy_scores), 3)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--built", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "persona_memorybank.json")
    parser.add_argument("--decoy-rate", type=float, default=0.1)
    parser.add_argument("--settings", type=json.loads, default={},
                        help='memdb.Settings fields as JSON, e.g. \'{"persona_kind_weight": {...}}\'')
    args = parser.parse_args()
    users = json.loads(DATA.read_text())["users"]
    embedder = embedders.load("default", threads=1)
    result: dict = {"command": "python " + shlex.join(sys.argv), "decoy_rate": args.decoy_rate, "settings": args.settings, "budgets": BUDGETS,
                    "users": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for user, data in users.items():
            path = Path(tmp) / f"{user}.db"
            shutil.copy(args.built / f"{user}.db", path)
            with memdb.open(path, extract="defer", settings=memdb.Settings(**args.settings)) as mem:
                size_before = mem.stats(user)["file_bytes"]
                placed = mem.build_layers(user)
                mem.conn.execute("vacuum")
                size_after = mem.stats(user)["file_bytes"]
                held = [a.text for a in rows.read_atoms(mem.conn, 'where a."user" = ? and a."status" != 1', (user,))]
                wanted = items(data["profile"])
                decoys = {g: sorted({x for other, d in users.items() if other != user for x in items(d["profile"])[g]}
                                    - set(wanted[g])) for g in wanted}
                floor = floors(wanted, decoys, held, embedder, args.decoy_rate)
                entry = {"atoms_held": len(held), "placed": placed["atoms_placed"],
                         "scenarios_shown": len(mem.scenarios(user, limit=1000)),
                         "persona_lines_kept": len(mem.conn.execute('select 1 from "persona" where "user" = ?',
                                                                    (user,)).fetchall()),
                         "layer_bytes": _layer_bytes(mem), "file_bytes_before_vacuum": size_before,
                         "file_bytes": size_after,
                         "ceiling": found(wanted, held, embedder, floor, decoys), "cards": {}}
                for budget in BUDGETS:
                    card = mem.persona(user, budget=budget).splitlines()
                    entry["cards"][budget] = {"lines": len(card), "tokens": mem.count_tokens("\n".join(card)),
                                              "score": found(wanted, card, embedder, floor, decoys),
                                              "card": card if budget == 200 else None}
            result["users"][user] = entry
            print(user, {b: {g: c["score"][g]["contained_or_e5"] for g in c["score"]}
                         for b, c in entry["cards"].items()}, file=sys.stderr)
    result["totals"] = _totals(result["users"])
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print(json.dumps(result["totals"], indent=1), file=sys.stderr)


def _layer_bytes(mem: memdb.Memory) -> dict[str, int]:
    """Bytes of the layers' tables and index (sqlite's dbstat, when compiled in)."""
    try:
        return dict(mem.conn.execute(
            "select name, sum(pgsize) from dbstat where name in ('scenarios', 'scenario_atoms', 'persona', "
            "'scenarios_by_user', 'persona_by_atom', 'sqlite_autoindex_scenario_atoms_1') group by name").fetchall())
    except Exception as exc:  # noqa: BLE001 - dbstat missing: say so in the result
        return {"error": str(exc)}


def _totals(users: dict) -> dict:
    out: dict = {}
    for key in ["ceiling", *[f"card_{b}" for b in BUDGETS]]:
        groups: dict = {}
        for entry in users.values():
            score = entry["ceiling"] if key == "ceiling" else entry["cards"][int(key[5:])]["score"]
            for group, s in score.items():
                g = groups.setdefault(group, {"items": 0, "contained": 0, "contained_or_e5": 0})
                for k in g:
                    g[k] += s[k]
        out[key] = groups
        if key != "ceiling":
            cards = [e["cards"][int(key[5:])] for e in users.values()]
            out[key]["mean_tokens"] = round(sum(c["tokens"] for c in cards) / len(cards), 1)
            out[key]["mean_lines"] = round(sum(c["lines"] for c in cards) / len(cards), 1)
    return out


if __name__ == "__main__":
    main()
