"""The write path at scale, default settings: insert with dedup, layers on, against a base tree.

Runs bench/dedup_rate.py in fresh processes on a file bench/scale.py built (one user), alternating
the base tree (another checkout's memdb, e.g. main before this change) and this one, --repeats
times each, and reports medians: atoms/s through lifecycle.absorb one at a time (one
transaction, rolled back) and in extraction's batches (copies.expect, a transaction a batch,
committed on a scratch copy of the file, as Memory writes), the same with Settings(layers=False) (the L2/L3 upkeep per
atom is the difference of the two), whether each run took the base's decisions on the same
records (the base is slow, so it absorbs --base-atoms of them; the decisions are compared on
those), the time spent in scenario placement and the persona update (timed where absorb calls
them: the L2/L3 upkeep per atom), the persona card left by the run against a full ranking's, and peak RSS.

    git archive 7c63124 memdb schema.sql | tar -x -C /tmp/base
    flock /tmp/memdb-cpu.lock .venv/bin/python bench/write_path.py --db /tmp/memdb_scale_100k.db --base /tmp/base
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(tree: Path, db: str, atoms: int, batch: int, settings: list[str]) -> dict:
    cmd = [sys.executable, str(ROOT / "bench" / "dedup_rate.py"), "--db", db, "--tree", str(tree),
           "--atoms", str(atoms), "--batch", str(batch), "--commit-every", str(batch),
           *[f"--set={s}" for s in settings]]
    out = json.loads(subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True).stdout.strip().splitlines()[-1])
    print(f"{tree.name} batch={batch} {settings}: {out['absorb_atoms_per_s']} atoms/s", file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", required=True)
    parser.add_argument("--base", type=Path, help="a checkout holding the base memdb package")
    parser.add_argument("--atoms", type=int, default=300)
    parser.add_argument("--base-atoms", type=int, default=40)
    parser.add_argument("--batch", type=int, default=12, help="extraction's batch (Settings.extract_batch turns)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--name", default="100k")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "write_path.json")
    parser.add_argument("--variants", help="comma-separated names of the variants to run (default: all)")
    args = parser.parse_args()
    variants = {  # name: (tree, atoms, batch, settings)
        "one_at_a_time": (ROOT, args.atoms, 0, []),
        "batched": (ROOT, args.atoms, args.batch, []),
        "one_at_a_time_layers_off": (ROOT, args.atoms, 0, ["layers=false"]),
        "batched_layers_off": (ROOT, args.atoms, args.batch, ["layers=false"]),
    }
    if args.base:
        variants["base_one_at_a_time"] = (args.base, args.base_atoms, 0, [])
        variants["base_batched"] = (args.base, args.base_atoms, args.batch, [])
    if args.variants:
        variants = {name: variants[name] for name in args.variants.split(",")}
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    load_before = os.getloadavg()
    for _ in range(args.repeats):
        for name, (tree, atoms, batch, settings) in variants.items():
            runs[name].append(run(tree, args.db, atoms, batch, settings))
    reference = runs["base_one_at_a_time"][0]["decisions"] if "base_one_at_a_time" in runs else \
        runs["one_at_a_time"][0]["decisions"]
    out: dict = {}
    for name, found in runs.items():
        first = found[0]
        n = min(len(reference), len(first["decisions"]))
        out[name] = {
            "atoms": first["atoms"], "batch": first["batch"], "settings": first["settings"],
            "atoms_per_s_runs": [r["absorb_atoms_per_s"] for r in found],
            "atoms_per_s_median": statistics.median(r["absorb_atoms_per_s"] for r in found),
            "ms_per_atom_median": statistics.median(r["ms_per_atom"] for r in found),
            "layers_ms_per_atom_median": statistics.median(r["layers_ms_per_atom"] for r in found),
            "layers_ms_per_atom_runs": [r["layers_ms_per_atom"] for r in found],
            # each full persona ranking spread over the updates until the next (dedup_rate.py)
            "layers_ms_per_atom_full_ranking_spread_median": statistics.median(
                r.get("layers_ms_per_atom_full_ranking_spread", r["layers_ms_per_atom"]) for r in found),
            "persona_full_rankings_ms": [r.get("persona_full_rankings_ms") for r in found],
            "actions": first["actions"],
            f"same_decisions_as_reference_first_{n}": first["decisions"][:n] == reference[:n],
            "decisions_differing": sum(a != b for a, b in zip(first["decisions"][:n], reference[:n])),
            "maxrss_mb_median": statistics.median(r["maxrss_mb"] for r in found),
        }
        if first["persona_card"] is not None:
            card, full = first["persona_card"], first["persona_card_full"]
            out[name]["persona_card_lines"] = len(card)
            out[name]["persona_card_same_as_full_ranking"] = card == full
            out[name]["persona_top10_same_as_full_ranking"] = card[:10] == full[:10]
            out[name]["scenarios_digest"] = first.get("scenarios_digest")
    for on, off in (("one_at_a_time", "one_at_a_time_layers_off"), ("batched", "batched_layers_off")):
        if on in out and off in out:
            out[f"{on}_layers_upkeep_ms_per_atom"] = round(out[on]["ms_per_atom_median"] - out[off]["ms_per_atom_median"], 2)
    if args.base:
        for name in ("one_at_a_time", "batched"):
            if name not in out or f"base_{name}" not in out:
                continue
            out[f"{name}_speedup_vs_base"] = round(out[name]["atoms_per_s_median"] / out[f"base_{name}"]["atoms_per_s_median"], 1)
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    results[args.name] = {
        "what": "insert with dedup (lifecycle.absorb, vector copy loaded, default Settings, rolled back) on a "
                "bench/scale.py file of one user; medians of alternating runs in fresh processes; "
                "reference decisions: the base tree one at a time (or this tree's when no base)",
        "db": args.db, "base": str(args.base) if args.base else None, "repeats": args.repeats,
        "command": " ".join(["python", "bench/write_path.py", *sys.argv[1:]]),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "loadavg_1_5_15": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
        "nproc": os.cpu_count(), **out}
    args.out.write_text(json.dumps(results, indent=1))
    print(json.dumps({k: v for k, v in out.items() if not isinstance(v, dict)}, indent=1))


if __name__ == "__main__":
    main()
