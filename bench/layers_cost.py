"""What keeping L2 scenarios and the L3 persona current costs per turn: absorb with and without.

Each extracted file (MemoryBank-cn dev users from bench/memorybank_retrieval.py --built, LoCoMo
dev conversations from bench/qa_prepare.py) is replayed into a fresh file: its turns, then its
atoms in the order they were stored, each through lifecycle.absorb and flow.layers (as
flow.absorb does) with its stored vector, in one transaction per source turn as extraction
writes them. No model runs (the stored vectors
are served by a lookup embedder), so the figure is absorb's own cost with Settings(layers=False)
vs layers=True (scenario placement + persona re-rank), measured in the same run, alternating,
the median of --repeats. Size: the bytes of the layer tables in the replayed file.

    flock /tmp/memdb-cpu.lock .venv/bin/python bench/layers_cost.py /tmp/mb_built/*.db bench/results/qa/db/*.db
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import apsw
import numpy as np
import sqlite_vec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from memdb import codec, flow  # noqa: E402
from memdb.db import connection  # noqa: E402
from memdb.index.vectors import turn_text  # noqa: E402
from memdb.lifecycle import absorb  # noqa: E402


class Lookup:
    """Serves the vectors the source file stored, by text: the replay runs no embedder."""

    multilingual = True

    def __init__(self, name: str, dim: int, baseline: float, vectors: dict[str, np.ndarray]) -> None:
        self.name, self.dim, self.cosine_baseline, self.vectors = name, dim, baseline, vectors

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.vectors.get(t, np.zeros(self.dim, dtype=np.float32)) for t in texts])


def read_source(path: Path) -> dict:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    meta = dict(conn.execute("select key, value from meta").fetchall())
    turns = conn.execute('select t.id, t.user, t.session, r.name, t.speaker, t.content, t.ts, v.embedding '
                         'from turns t join roles r on r.code = t.role left join turns_vec v on v.turn_id = t.id '
                         'order by t.id').fetchall()
    atoms = conn.execute('select a.id, a.record, a.confidence, a.last_seen, v.embedding, '
                         '(select group_concat(s.turn_id) from atom_sources s where s.atom_id = a.id) '
                         'from atoms a left join atoms_vec v on v.atom_id = a.id order by a.id').fetchall()
    conn.close()
    return {"meta": meta, "turns": turns, "atoms": atoms}


def replay(source: dict, path: Path, layers: bool) -> dict:
    """Load the turns, then absorb every atom; returns absorb seconds and counts."""
    meta, turns, atoms = source["meta"], source["turns"], source["atoms"]
    vectors = {turn_text(t[4], t[5]): np.frombuffer(t[7], dtype=np.float32) for t in turns if t[7]}
    embedder = Lookup(meta["embedder_name"], int(meta["embedder_dim"]), 0.75 if "e5" in meta["embedder_name"] else 0.0,
                      vectors)
    settings = memdb.Settings(layers=layers)
    with memdb.open(path, embedder=embedder, extract="defer", settings=settings) as mem:
        new_id: dict[int, int] = {}
        by_session: dict[tuple[str, str], list[tuple]] = {}
        for t in turns:
            by_session.setdefault((t[1], t[2]), []).append(t)
        for (user, session), group in by_session.items():
            ids = mem.add([{"role": t[3], "name": t[4], "content": t[5], "ts": t[6]} for t in group],
                          user=user, session=session)
            new_id.update({t[0]: i for t, i in zip(group, ids)})
        user_of = {t[0]: t[1] for t in turns}
        batches: dict[int, list[tuple]] = {}
        for atom in atoms:
            sources = [int(x) for x in str(atom[5] or "").split(",") if x]
            batches.setdefault(max(sources) if sources else 0, []).append(atom)
        spent = 0.0
        for _, batch in sorted(batches.items()):
            start = time.perf_counter()
            with connection.write(mem.conn):
                for atom_id, record, confidence, ts, blob, sources in batch:
                    old = [int(x) for x in str(sources or "").split(",") if x]
                    user, fields = user_of[old[0]] if old else turns[0][1], codec.unpack(record)
                    vector = np.frombuffer(blob, dtype=np.float32) if blob else None
                    _, stored = absorb.absorb(mem.conn,
                                              absorb.Incoming(user=user, record=fields,
                                                              confidence=confidence, turn_ids=[new_id[o] for o in old],
                                                              ts=ts, vector=vector),
                                              absorb.Engine(settings),
                                              multilingual=True)
                    flow.layers(mem.conn, user=user, atom_id=stored, kind=fields["kind"], vector=vector, ts=ts,
                                settings=settings, cosine_baseline=embedder.cosine_baseline)
            spent += time.perf_counter() - start
        sizes = dict(mem.conn.execute(
            "select name, sum(pgsize) from dbstat where name in ('scenarios', 'scenario_atoms', 'persona', "
            "'scenarios_by_user', 'persona_by_atom', 'sqlite_autoindex_scenario_atoms_1') group by name").fetchall())
        counts = mem.conn.execute('select (select count(*) from scenarios), (select count(*) from scenarios '
                                  'where held >= 2), (select count(*) from persona)').fetchone()
    return {"seconds": spent, "layer_bytes": sum(sizes.values()), "scenarios": counts[0], "scenarios_shown": counts[1],
            "persona_lines": counts[2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "layers_cost.json")
    args = parser.parse_args()
    result: dict = {"command": "python " + shlex.join(sys.argv), "load_before": os.getloadavg(),
                    "memdb_version": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                                    capture_output=True, text=True).stdout.strip(), "files": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.files:
            source = read_source(path)
            runs: dict[bool, list[dict]] = {False: [], True: []}
            for r in range(args.repeats):
                for layers in ((False, True) if r % 2 == 0 else (True, False)):
                    target = Path(tmp) / f"{path.stem}-{layers}-{r}.db"
                    runs[layers].append(replay(source, target, layers))
            turns, atoms = len(source["turns"]), len(source["atoms"])
            off = statistics.median(x["seconds"] for x in runs[False])
            on = statistics.median(x["seconds"] for x in runs[True])
            entry = {"turns": turns, "atoms": atoms,
                     "absorb_s_per_turn_without": round(off / turns, 5), "absorb_s_per_turn_with": round(on / turns, 5),
                     "added_s_per_turn": round((on - off) / turns, 5), "ratio": round(on / off, 2),
                     **{k: runs[True][0][k] for k in ("layer_bytes", "scenarios", "scenarios_shown", "persona_lines")}}
            result["files"][path.name] = entry
            print(path.name, entry, file=sys.stderr)
    result["load_after"] = os.getloadavg()
    per_turn = [e["added_s_per_turn"] for e in result["files"].values()]
    result["median_added_s_per_turn"] = statistics.median(per_turn)
    result["median_ratio"] = statistics.median(e["ratio"] for e in result["files"].values())
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print(json.dumps({k: result[k] for k in ("median_added_s_per_turn", "median_ratio", "load_before")}), file=sys.stderr)


if __name__ == "__main__":
    main()
