"""Bytes per user: what a memdb file costs for users with 1 and with 100 turns, at 1 to 10,000
users, for vec0 chunk sizes (the schema's chunk_size), beside the size of the data itself.

vec0 allocates a whole chunk (chunk_size vectors) for each partition (user) of each vector
table on the user's first vector, so a user with one turn cost a chunk of turn vectors and a
chunk of atom vectors. Each user here gets `turns` turns and one atom per turn (extraction
keeps about 1.2), with 384-dimensional vectors (the bundled embedder's), written through
memdb.db.rows in one transaction per user as add() would. "data" is what the user said and
what memdb must keep about it: turn text, atom text and one float32 vector each.

The per-user scan is kept (the user is still the partition key); its cost is the KNN time of
one user's vec0 partition below `vector_copy_min` (499 vectors), median of 50 queries, as a
ratio to chunk_size=256 measured in the same run.

    .venv/bin/python bench/storage.py                       # writes bench/results/storage.json
    .venv/bin/python bench/storage.py --chunks 8,256 --users 1,100,10000 --turns 1,100
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import memdb  # noqa: E402
from memdb.db import connection, rows  # noqa: E402
from memdb.vecmath import as_blob  # noqa: E402

DIM = 384
RESULTS = Path(__file__).resolve().parent / "results" / "storage.json"


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


class _Fixed:
    """An embedder object of the bundled one's dimension; this bench writes its own vectors."""

    name, dim = "storage-bench", DIM

    def embed(self, texts: list[str]) -> np.ndarray:
        return _unit(np.random.default_rng(0), len(texts))


def _open(path: Path, chunk: int) -> memdb.Memory:
    original = connection.schema_sql
    connection.schema_sql = lambda: original().replace("chunk_size=8,", f"chunk_size={chunk},").replace("chunk_size=8\n", f"chunk_size={chunk}\n")
    try:
        return memdb.open(path, embedder=_Fixed(), extract="defer")
    finally:
        connection.schema_sql = original


def build(path: Path, chunk: int, users: int, turns: int, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    data = 0
    with _open(path, chunk) as mem:
        for u in range(users):
            user = f"user{u:05d}"
            vectors = _unit(rng, 2 * turns)
            with connection.write(mem.conn):
                for i in range(turns):
                    content = f"{user} said thing number {i}: we moved the staging server to Hermes on Friday"
                    tid = rows.insert_turn(mem.conn, user=user, session="s", seq=i + 1, role="user", speaker=None,
                                           content=content, ts="2026-05-01T10:00:00", vector=vectors[2 * i])
                    record = {"kind": "fact", "subject": user, "predicate": "moved", "object": f"staging server {i}"}
                    rows.insert_atom(mem.conn, user=user, record=record, confidence=0.9, turn_ids=[tid],
                                     first_seen="2026-05-01T10:00:00", last_seen="2026-05-01T10:00:00",
                                     vector=vectors[2 * i + 1])
                    data += len(content.encode()) + len(f"{user} moved staging server {i}".encode()) + 2 * DIM * 4
        mem.conn.execute("pragma wal_checkpoint(truncate)")
    size = path.stat().st_size
    return {"chunk_size": chunk, "users": users, "turns_per_user": turns, "file_bytes": size,
            "bytes_per_user": round(size / users), "data_bytes_per_user": round(data / users),
            "over_data": round(size / data, 2)}


def knn_ms(tmp: Path, chunk: int, n: int = 499, queries: int = 50) -> float:
    path = tmp / f"knn{chunk}.db"
    rng = np.random.default_rng(7)
    with _open(path, chunk) as mem:
        with connection.write(mem.conn):
            for i, v in enumerate(_unit(rng, n)):
                rows.insert_turn(mem.conn, user="big", session="s", seq=i + 1, role="user", speaker=None,
                                 content=f"turn {i}", ts="2026-05-01T10:00:00", vector=v)
        times = []
        for q in _unit(rng, queries):
            start = time.perf_counter()
            mem.conn.execute('select "turn_id", "distance" from "turns_vec" where "embedding" match ? and k = ? '
                             'and "user" = ?', (as_blob(q), 10, "big")).fetchall()
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", default="8,256")
    parser.add_argument("--users", default="1,100,10000")
    parser.add_argument("--turns", default="1,100")
    parser.add_argument("--most-turns", type=int, default=100_000,
                        help="skip configurations holding more turns than this (10,000 x 100 is 1M turns)")
    parser.add_argument("--most-bytes", type=float, default=2e9,
                        help="skip configurations whose preallocated chunks alone pass this (10,000 users at 256: 8 GB)")
    args = parser.parse_args()
    chunks = [int(c) for c in args.chunks.split(",")]
    out = {"command": "bench/storage.py " + " ".join(sys.argv[1:]), "machine": platform.processor() or platform.machine(),
           "sizes": [], "knn_ms_499_vectors": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for chunk in chunks:
            for users in (int(u) for u in args.users.split(",")):
                for turns in (int(t) for t in args.turns.split(",")):
                    chunks_bytes = users * 2 * max(chunk, turns) * DIM * 4
                    if users * turns > args.most_turns or chunks_bytes > args.most_bytes:
                        out["sizes"].append({"chunk_size": chunk, "users": users, "turns_per_user": turns,
                                             "skipped": f"more than {args.most_turns} turns or {args.most_bytes:.0f} bytes"})
                        continue
                    path = Path(tmp) / f"c{chunk}_u{users}_t{turns}.db"
                    row = build(path, chunk, users, turns)
                    print(json.dumps(row), flush=True)
                    out["sizes"].append(row)
                    for suffix in ("", "-wal", "-shm"):
                        Path(f"{path}{suffix}").unlink(missing_ok=True)
        for _ in range(3):  # interleaved rounds: the shared machine's noise falls on every size alike
            for chunk in chunks:
                out["knn_ms_499_vectors"].setdefault(str(chunk), []).append(knn_ms(Path(tmp), chunk))
                Path(tmp, f"knn{chunk}.db").unlink()
    medians = {c: statistics.median(t) for c, t in out["knn_ms_499_vectors"].items()}
    out["knn_ms_499_vectors"] = {c: round(m, 3) for c, m in medians.items()}
    if "256" in medians:
        out["knn_ratio_to_256"] = {c: round(m / medians["256"], 2) for c, m in medians.items()}
    print(json.dumps({k: out[k] for k in out if k.startswith("knn")}))
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
