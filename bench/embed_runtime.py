"""The embedders before and after a change to their runtime, in one run: the code of another
commit is imported beside this checkout's and the two take turns, so both see the same machine.

    git archive 7c63124 memdb | tar -x -C /tmp/before && mv /tmp/before/memdb /tmp/before/memdb_before
    flock /tmp/memdb-cpu.lock .venv/bin/python bench/embed_runtime.py --before /tmp/before
    # -> bench/results/embed_runtime.json

Measured for MiniLM and e5 (int8, the default), 2 threads: single-query latency (p50 ms, one
text a call, the query role where there is one) over the LoCoMo dev questions and MemoryBank-cn
dev questions; batched sentences per second (64 a call) over 20-word LoCoMo dev turns and
MemoryBank-cn user turns; and start-up, a fresh process's time from import to its first vector
with memdb's cache already filled (median of alternating runs). Issue 27 compares the numpy
MiniLM and the hand-written e5 tokenizer (before) with the one BERT runtime (after).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.embed_speed import sentences  # noqa: E402
from bench.embed_speed_e5 import batched, chinese, questions, single_ms  # noqa: E402

OUT = ROOT / "bench" / "results" / "embed_runtime.json"
STARTUP = """
import sys, time
start = time.perf_counter()
sys.path.insert(0, {path!r})
from {package}.models import embedders
model = embedders.load({spec!r}, threads={threads})
getattr(model, "embed_query", model.embed)(["what do we use for the backend?"])
print(time.perf_counter() - start)
"""


def startup(package: str, path: str, spec: str, threads: int, runs: int, cache: str) -> float:
    """Median seconds of a fresh process from its first import of memdb to its first vector."""
    env = {**os.environ, "MEMDB_CACHE": cache}
    code = STARTUP.format(path=path, package=package, spec=spec, threads=threads)
    times = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="a folder holding the older code as memdb_before/")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sentences", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    sys.path.insert(0, str(args.before))
    old = importlib.import_module("memdb_before.models.embedders")
    new = importlib.import_module("memdb.models.embedders")
    cache = tempfile.mkdtemp(prefix="memdb-bench-cache-")
    os.environ["MEMDB_CACHE"] = cache  # both fill their own graphs and tokenizers here first
    models = {}
    for spec in ("minilm", "default"):
        for label, module in (("before", old), ("after", new)):
            models[f"{spec} {label}"] = module.load(spec, threads=args.threads)
    query = {name: getattr(m, "embed_query", m.embed) for name, m in models.items()}
    passage = {name: m.embed for name, m in models.items()}
    result: dict = {"command": "python " + " ".join(sys.argv), "threads": args.threads,
                    "loadavg_before": os.getloadavg(), "single_query_p50_ms": {}, "batch64_per_s": {}}
    for lang, items in questions().items():
        row = single_ms(query, items[:32], passes=3)
        for spec in ("minilm", "default"):
            row[f"{spec} after/before"] = round(row[f"{spec} after"] / row[f"{spec} before"], 2)
        result["single_query_p50_ms"][lang] = row
        print(f"single {lang:13s} {row}", flush=True)
    for lang, items in {"en": sentences(args.sentences)[0], "zh": chinese(args.sentences)}.items():
        row = batched(passage, items, 64, args.runs)
        for spec in ("minilm", "default"):
            row[f"{spec} after/before"] = round(row[f"{spec} after"]["per_s"] / row[f"{spec} before"]["per_s"], 2)
        result["batch64_per_s"][lang] = row
        print(f"batch  {lang:13s} {row}", flush=True)
    result["startup_s"] = {}
    for spec in ("minilm", "default"):
        timings: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(args.runs):  # alternating, one run each at a time
            timings["before"].append(startup("memdb_before", str(args.before), spec, args.threads, 1, cache))
            timings["after"].append(startup("memdb", str(ROOT), spec, args.threads, 1, cache))
        result["startup_s"][spec] = {k: round(statistics.median(v), 2) for k, v in timings.items()}
        print(f"startup {spec} {result['startup_s'][spec]}", flush=True)
    result["loadavg_after"] = os.getloadavg()
    args.out.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
