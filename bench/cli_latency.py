"""What one `memdb` command costs: wall time and peak memory of each call, as a shell runs it.

Every figure is a new process (`python -m memdb.cli …`), timed from start to exit, its peak RSS
read from the kernel (os.wait4). On a small file (the bundled sample, stored with --defer so no
extraction model is loaded): `stats`, `users`, `search` (the default e5 embedder), `search
--embedder none` and `context`, beside `python -c pass` and `import memdb` as the floors, with memdb's cache
warm; then `search` with an empty cache (the first run after install: the embedder's graph and
vocabulary are built and cached). With --tree DIR the same commands of another checkout (the
code before) run in the same loop, taking turns, so the ratios hold on a noisy machine.
--model adds the extraction model: `add` of one turn with extraction, with the cache warm and
with an empty cache (the model assembled from its packages first), as `memdb mcp`'s first
`remember` pays it.

    flock /tmp/memdb-cpu.lock .venv/bin/python bench/cli_latency.py --runs 9 --tree /tmp/memdb-before --model
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
QUERY = "what database do we use?"


def run(argv: list[str], tree: Path, cache: Path, stdin: bytes | None = None) -> tuple[float, int, int]:
    """(seconds, peak RSS in MB, exit status) of one process running argv with tree's memdb."""
    env = {**os.environ, "PYTHONPATH": str(tree), "MEMDB_CACHE": str(cache)}
    start = time.perf_counter()
    # cwd: `python -m` and `-c` put the current folder first on sys.path, before PYTHONPATH
    proc = subprocess.Popen([sys.executable, *argv], env=env, cwd=tree,
                            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if stdin:
        proc.stdin.write(stdin)
        proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err[-500:]}")
    return seconds, usage.ru_maxrss // 1024, proc.returncode


def sample_file(tree: Path, cache: Path, folder: Path) -> Path:
    """The bundled sample's turns (two users, a dozen turns) stored with --defer: vectors, no atoms."""
    sample = json.loads((ROOT / "memdb" / "data" / "sample.json").read_text(encoding="utf-8"))
    db = folder / f"small-{tree.name}.db"
    for conv in sample:
        messages = "\n".join(json.dumps(m, ensure_ascii=False) for m in conv["messages"]).encode()
        run(["-m", "memdb.cli", "add", str(db), "-", "-u", conv["user"], "-s", conv["session"], "--defer", "-q"],
            tree, cache, stdin=messages)
    return db


def commands(db: Path) -> dict[str, list[str]]:
    return {
        "python -c pass": ["-c", "pass"],
        "import memdb": ["-c", "import memdb"],
        "memdb stats": ["-m", "memdb.cli", "stats", str(db)],
        "memdb users": ["-m", "memdb.cli", "users", str(db)],
        "memdb search": ["-m", "memdb.cli", "search", str(db), "-u", "alice", QUERY],
        "memdb search --embedder none": ["-m", "memdb.cli", "search", str(db), "-u", "alice", QUERY,
                                         "--embedder", "none"],
        # context counts tokens with the extraction model's tokenizer (its vocabulary loaded by llama.cpp)
        "memdb context": ["-m", "memdb.cli", "context", str(db), "-u", "alice", QUERY],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9, help="runs of each command (medians reported)")
    parser.add_argument("--tree", type=Path, help="another checkout to time in the same loop (the code before)")
    parser.add_argument("--model", action="store_true", help="also time add with the extraction model")
    parser.add_argument("--out", type=Path, default=RESULTS / "cli_latency.json")
    args = parser.parse_args()
    trees = {"this": ROOT} | ({"before": args.tree.resolve()} if args.tree else {})
    work = Path(tempfile.mkdtemp(prefix="memdb-cli-bench-"))
    try:
        caches = {name: work / f"cache-{name}" for name in trees}
        files = {name: sample_file(tree, caches[name], work) for name, tree in trees.items()}
        timings: dict[str, dict[str, list[tuple[float, int]]]] = {name: {} for name in trees}
        for _ in range(args.runs):
            for name, tree in trees.items():  # taking turns: the same noise for both
                for label, argv in commands(files[name]).items():
                    if name != "this" and label == "memdb users":
                        continue  # no such verb before
                    seconds, rss, _ = run(argv, tree, caches[name])
                    timings[name].setdefault(label, []).append((seconds, rss))
        first: dict[str, dict[str, float]] = {}
        for name, tree in trees.items():
            cold = work / f"cold-{name}"
            seconds, rss, _ = run(commands(files[name])["memdb search"], tree, cold)
            again, _, _ = run(commands(files[name])["memdb search"], tree, cold)
            first[name] = {"first_search_s": round(seconds, 3), "second_search_s": round(again, 3), "peak_mb": rss,
                           "cache_mb": round(sum(f.stat().st_size for f in cold.rglob("*") if f.is_file()) / 1e6, 1)}
            shutil.rmtree(cold, ignore_errors=True)
        model = extraction(work) if args.model else None
        report = {
            "command": "flock /tmp/memdb-cpu.lock .venv/bin/python bench/cli_latency.py " + " ".join(sys.argv[1:]),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
                        "load_before": os.getloadavg()},
            "runs": args.runs,
            "median": {name: {label: {"seconds": round(statistics.median(s for s, _ in found), 3),
                                      "min_seconds": round(min(s for s, _ in found), 3),
                                      "peak_mb": statistics.median(r for _, r in found)}
                              for label, found in per.items()} for name, per in timings.items()},
            "first_run": first,
            "extraction": model,
        }
        if "before" in trees:
            report["ratio_before_over_this"] = {
                label: round(report["median"]["before"][label]["seconds"] / report["median"]["this"][label]["seconds"], 2)
                for label in report["median"]["before"]}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        print(json.dumps(report, indent=2, ensure_ascii=False))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def extraction(work: Path) -> dict[str, float]:
    """add of one turn with the bundled model: with an empty cache (assembly, graph, vocabulary,
    model load) and warm; peak RSS of each."""
    cache = work / "cache-model"
    turn = json.dumps({"role": "user", "name": "Mia", "content": "I moved to Porto last spring and I teach piano."})
    out = {}
    for label in ("cold", "warm"):
        db = work / f"model-{label}.db"
        seconds, rss, _ = run(["-m", "memdb.cli", "add", str(db), "-", "-u", "mia", "-q"], ROOT, cache,
                              stdin=turn.encode())
        out[f"add_{label}_s"], out[f"add_{label}_peak_mb"] = round(seconds, 2), rss
    out["cache_mb"] = round(sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) / 1e6, 1)
    return out


if __name__ == "__main__":
    main()
