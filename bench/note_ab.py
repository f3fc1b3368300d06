"""A paired blind rating: notes of two builds (before / after) and reference notes, shuffled into one
items.json for one fresh rater, so that a rater's own strictness cancels out of the comparison.

    python bench/note_ab.py prepare DIR --before A.jsonl --after B.jsonl --observations O.json \
        [--n 80] [--refs 40] [--seed 71]
    # move DIR/key.json away; a fresh helper rates DIR/items.json with ../shared/tools/RATER.md alone,
    # writing DIR/ratings.json; then put key.json back and:
    python bench/note_ab.py score DIR          # writes DIR/score.json

A.jsonl / B.jsonl: one atom per line with "text" (e.g. `select json_object('text', text) from atoms
where status = 0` on the files `bench/qa_prepare.py --build-only` makes). Same items format as
../shared/tools/note_rating.py, with sources memdb-before, memdb-after and reference.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
from pathlib import Path


def _texts(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def prepare(out: Path, before: list[str], after: list[str], refs: list[str], n: int, n_refs: int, seed: int) -> None:
    rng = random.Random(seed)
    pick = ([("memdb-before", t) for t in rng.sample(before, min(n, len(before)))]
            + [("memdb-after", t) for t in rng.sample(after, min(n, len(after)))]
            + [("reference", t) for t in rng.sample(refs, min(n_refs, len(refs)))])
    rng.shuffle(pick)
    out.mkdir(parents=True, exist_ok=True)
    (out / "items.json").write_text(json.dumps([{"id": i, "note": t} for i, (_, t) in enumerate(pick)],
                                               ensure_ascii=False, indent=1), encoding="utf-8")
    (out / "key.json").write_text(json.dumps([{"id": i, "src": s} for i, (s, _) in enumerate(pick)], indent=1))
    print(len(pick), "notes:", dict(collections.Counter(s for s, _ in pick)))


def score(out: Path) -> dict:
    source = {k["id"]: k["src"] for k in json.loads((out / "key.json").read_text())}
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for rating in json.loads((out / "ratings.json").read_text()):
        c = counts[source[rating["id"]]]
        c[rating["rating"]] += 1
        c["garbled"] += bool(rating["garbled"])
        c["n"] += 1
    result = {src: {k: round(c[k] / c["n"], 3) for k in ("keep", "fixable", "junk", "garbled")} | {"n": c["n"]}
              for src, c in sorted(counts.items())}
    (out / "score.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("prepare", "score"))
    parser.add_argument("dir", type=Path)
    parser.add_argument("--before", type=Path)
    parser.add_argument("--after", type=Path)
    parser.add_argument("--observations", type=Path)
    parser.add_argument("--n", type=int, default=80)
    parser.add_argument("--refs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=71)
    args = parser.parse_args()
    if args.step == "prepare":
        refs = json.loads(args.observations.read_text(encoding="utf-8")) if args.observations else []
        prepare(args.dir, _texts(args.before), _texts(args.after), refs, args.n, args.refs, args.seed)
    else:
        score(args.dir)


if __name__ == "__main__":
    main()
