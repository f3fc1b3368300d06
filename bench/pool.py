"""Many tenant files through memdb.Pool: open and search N files round-robin with at most
max_open open, and show that memory and open files stay bounded.

A few template files (different words, 40 turns and 40 atoms of one user each) are made
through the public API and copied to N tenant files in --dir. Then, in this process, each pass
visits every tenant in turn with one search (layer="both"): a visit opens the file unless it is
among the max_open most recently used (a miss closes the least recently used one). Each visit
also searches a second time while the file is open (a hit), so the cost of opening is the
miss/hit ratio in the same run. Open descriptors (/proc/self/fd) and RSS are sampled as it goes.
Keyword-only (embedder=None): the bench measures the pool, not the embedder; per-file vector
copies are bounded the same way as keyword copies (copies_mb split among open files).

    .venv/bin/python bench/pool.py --tenants 10000 --max-open 64
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from memdb.db import connection  # noqa: E402
from memdb.db import rows as db_rows  # noqa: E402

RESULTS = ROOT / "bench" / "results"
WORDS = ["PostgreSQL", "Go", "coffee", "hiking", "Berlin", "the auth module", "sci-fi", "咖啡", "deadline",
         "Kubernetes", "tennis", "Lisbon", "budget", "the staging server", "sushi", "marathon"]
QUERIES = ["what database do we use", "where does she live", "coffee", "deadline for the budget", "咖啡",
           "which sport", "staging server"]


def template(path: Path, seed: int) -> None:
    rng = random.Random(seed)
    lines = [f"{rng.choice(['Alice', 'Bob', '小王'])} mentioned {rng.choice(WORDS)} and {rng.choice(WORDS)}"
             for _ in range(40)]
    with memdb.open(path, embedder=None, extract="defer") as mem:
        ids = mem.add([{"content": line, "ts": "2026-01-01T00:00:00"} for line in lines], user="alice")
        with connection.write(mem.conn):
            for line, turn in zip(lines, ids):
                subject, _, rest = line.partition(" ")
                db_rows.insert_atom(mem.conn, user="alice", record={"kind": "fact", "subject": subject,
                                                                    "predicate": "mentioned", "object": rest},
                                    confidence=0.8, turn_ids=[turn], first_seen="2026-01-01T00:00:00",
                                    last_seen="2026-01-01T00:00:00", vector=None)
        mem.conn.execute("pragma wal_checkpoint(truncate)")


def build(directory: Path, tenants: int, templates: int = 16) -> float:
    t0 = time.perf_counter()
    directory.mkdir(parents=True, exist_ok=True)
    sources = []
    for i in range(templates):
        src = directory / f"_template{i}.db"
        if not src.exists():
            template(src, i)
        sources.append(src)
    for i in range(tenants):
        dst = directory / f"t{i:05d}.db"
        if not dst.exists():
            shutil.copyfile(sources[i % templates], dst)
    return time.perf_counter() - t0


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def summary(seconds: list[float]) -> dict:
    ms = sorted(1000 * s for s in seconds)
    return {"p50": round(statistics.median(ms), 3), "p95": round(ms[int(0.95 * (len(ms) - 1))], 3), "n": len(ms)}


def measure(directory: Path, tenants: int, max_open: int, passes: int, copies_mb: float) -> dict:
    names = [f"t{i:05d}" for i in range(tenants)]
    miss, hit, fds, rss = [], [], [], []
    fds_before, rss_before = open_fds(), rss_mb()
    t0 = time.perf_counter()
    with memdb.Pool(directory, max_open=max_open, copies_mb=copies_mb, embedder=None, extract="defer") as pool:
        for p in range(passes):
            for i, name in enumerate(names):
                query = QUERIES[(i + p) % len(QUERIES)]
                start = time.perf_counter()
                with pool.tenant(name) as mem:
                    mem.search(query, user="alice", layer="both")
                    middle = time.perf_counter()
                    mem.search(query, user="alice", layer="both")
                end = time.perf_counter()
                miss.append(middle - start)
                hit.append(end - middle)
                if i % 100 == 0:
                    fds.append(open_fds())
                    rss.append(rss_mb())
        open_at_end = len(pool.open_files)
    return {
        "tenants": tenants, "max_open": max_open, "passes": passes, "copies_mb": copies_mb,
        "visits": len(miss), "seconds": round(time.perf_counter() - t0, 1),
        "first_search_ms (open + search)": summary(miss), "second_search_ms (file open)": summary(hit),
        "open_cost_ratio_p50": round(statistics.median(miss) / statistics.median(hit), 2),
        "files_open_at_end": open_at_end,
        "open_fds": {"before": fds_before, "max": max(fds), "median": statistics.median(fds)},
        "rss_mb": {"before": round(rss_before), "max": round(max(rss)), "first_tenth_max": round(max(rss[:len(rss) // 10 or 1])),
                   "last_tenth_max": round(max(rss[-(len(rss) // 10 or 1):]))},
        "maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--max-open", type=int, default=64)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--copies-mb", type=float, default=256.0)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/memdb_pool"))
    parser.add_argument("--out", type=Path, default=RESULTS / "pool.json")
    args = parser.parse_args()
    built = build(args.dir, args.tenants)
    result = measure(args.dir, args.tenants, args.max_open, args.passes, args.copies_mb)
    file_kb = round((args.dir / "t00000.db").stat().st_size / 1024)
    result.update({"build_seconds": round(built, 1), "file_kb": file_kb,
                   "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                   "command": " ".join(["python", "bench/pool.py", *sys.argv[1:]]),
                   "loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()]})
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
