"""What the model worker process costs, and what llama.cpp's extra buffer types are worth here.

1. overhead: the same instant fake model (tests/model_fakes.EchoLLM) called in this process and
   through a WorkerLLM, with a real extraction prompt (~3 kB of messages) each call; the
   difference of the medians is the worker's cost per call. Also the worker's cold start
   (a new Python, memdb imported, the fake built), median of several starts.
2. extraction: the bundled model extracting the same invented turns (none from any dataset),
   extract_fill off so every turn goes to the model, each configuration in a fresh worker,
   alternating and repeated: extra buffer types on / off (Settings.model_extra_buffers), and
   once in this process (model_worker=False). Seconds per turn (median over turns), llama.cpp's
   own prompt and generation tokens/s, the worker's start+load time.
3. prompt (--sections prompt): llama.cpp's prompt evaluation alone, where repacked weights
   (the extra buffer types) would show: the same ~450-token prompt evaluated from an empty
   cache, extra buffer types on and off alternating, in this process, one model at a time;
   and whether llama.cpp said it repacked any weights (its CPU_REPACK buffer) at load.

    flock /tmp/memdb-cpu.lock .venv/bin/python bench/model_worker.py
    flock /tmp/memdb-cpu.lock .venv/bin/python bench/model_worker.py --sections prompt --out bench/results/extra_buffers.json

Writes bench/results/model_worker.json (or --out).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from bench.common import cpu_model  # noqa: E402
from memdb.extraction import prompt  # noqa: E402
from memdb.extraction.records import Turn  # noqa: E402
from memdb.models import llama, worker  # noqa: E402
from tests.model_fakes import EchoLLM  # noqa: E402

TURNS = [  # invented; each one the rules alone would not take in full
    "Dark roast, no sugar, every single morning.",
    "Piano lessons on Thursdays now, since the studio moved to Elm Street.",
    "My brother Tomas flies in from Porto on the 14th; we're doing the coast road.",
    "Honestly, spreadsheets over slides, any day.",
    "The allergist said shellfish is fine but no peanuts, ever.",
    "Switched the team from Jenkins to GitHub Actions last sprint.",
    "Sold the old Corolla; the bike is enough for the commute.",
    "我下个月开始在杭州的新公司上班，做前端。",
    "Rosa's recital is June 3rd, front row seats booked.",
    "Vegetarian for two years now, mostly for my health.",
    "We'll repaint the kitchen sage green once the lease is renewed.",
    "Night shifts at the clinic until the end of March.",
]


def overhead(calls: int, starts: int) -> dict:
    turn = Turn(id=1, user="u", session="s", role="user", speaker="Ines", content=TURNS[1], ts="2026-11-02T10:00:00")
    messages = prompt.build_messages([turn], [], [turn])
    schema = prompt.output_schema(1)
    size = len(json.dumps(messages))

    def timed(model) -> list[float]:
        out = []
        for _ in range(calls):
            began = time.perf_counter()
            model.complete(messages, schema=schema, max_tokens=200)
            out.append(time.perf_counter() - began)
        return out

    inline = timed(EchoLLM())
    model = worker.WorkerLLM(EchoLLM)
    model.name  # noqa: B018 - start it outside the timed calls
    in_worker = timed(model)
    model.close()
    start_times = []
    for _ in range(starts):
        fresh = worker.WorkerLLM(EchoLLM)
        began = time.perf_counter()
        fresh.complete(messages, schema=schema, max_tokens=200)
        start_times.append(time.perf_counter() - began)
        fresh.close()
    med = lambda xs: round(1000 * statistics.median(xs), 3)  # noqa: E731
    return {"calls": calls, "prompt_bytes": size, "inline_ms": med(inline), "worker_ms": med(in_worker),
            "worker_p95_ms": round(1000 * sorted(in_worker)[int(0.95 * calls)], 3),
            "cost_per_call_ms": round(med(in_worker) - med(inline), 3),
            "cold_start_ms_median": med(start_times), "cold_starts": starts}


def extraction(extra: bool | None, in_worker: bool, threads: int) -> dict:
    settings = memdb.Settings(extract_fill=False, model_extra_buffers=extra, model_worker=in_worker,
                              extract_batch=1)
    began = time.perf_counter()
    with memdb.open(":memory:", embedder=None, extract="defer", threads=threads, settings=settings) as mem:
        model = mem.llm()
        model.complete([{"role": "user", "content": "Say OK."}], schema={"type": "object"}, max_tokens=4)
        loaded = time.perf_counter() - began  # start + the weights loaded + one tiny call
        before = dict(model.stats)
        per_turn = []
        for i, line in enumerate(TURNS):
            mem.add([{"role": "user", "name": "Ines", "content": line}], user="u", session="s",
                    ts=f"2026-11-{i + 1:02d}T10:00:00")
            t0 = time.perf_counter()
            counts = mem.extract()
            per_turn.append(time.perf_counter() - t0)
            assert counts["done"] + counts["failed"] == 1, counts
        after = dict(model.stats)
        atoms = mem.stats()["atoms"]
        if in_worker:
            model.close()
        else:
            model.close()  # free the weights before the next configuration loads its own
    diff = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    return {
        "extra_buffers": llama.extra_buffers(extra)[0], "in_worker": in_worker,
        "start_and_load_s": round(loaded, 2), "s_per_turn_median": round(statistics.median(per_turn), 3),
        "s_total": round(sum(per_turn), 2), "atoms": atoms,
        "prompt_tokens_per_s": round(1000 * diff["prompt_eval_tokens"] / diff["prompt_eval_ms"], 1)
        if diff.get("prompt_eval_ms") else None,
        "generate_tokens_per_s": round(1000 * diff["eval_tokens"] / diff["eval_ms"], 1) if diff.get("eval_ms") else None,
        "prompt_tokens_evaluated": diff.get("prompt_eval_tokens"), "tokens_generated": diff.get("eval_tokens"),
    }


def prompt_eval(extra: bool, threads: int, repeats: int) -> dict:
    import logging

    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    logger = logging.getLogger("memdb")
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    model = llama.LlamaLLM(None, name=llama.assets.DEFAULT_MODEL_NAME, threads=threads, extra_bufts=extra,
                           expected_sha256=llama.assets.DEFAULT_MODEL_SHA256)
    try:
        loaded = model.model()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    turn = Turn(id=1, user="u", session="s", role="user", speaker="Ines", content=" ".join(TURNS), ts="2026-11-02T10:00:00")
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in prompt.build_messages([turn], [], [turn]))
    tokens = loaded.tokenize(text.encode("utf-8"), add_bos=True, special=True)
    times = []
    for _ in range(repeats):
        loaded.reset()
        loaded._ctx.kv_cache_clear() if hasattr(loaded._ctx, "kv_cache_clear") else None
        began = time.perf_counter()
        loaded.eval(tokens)
        times.append(time.perf_counter() - began)
    model.close()
    repack = [line.split("llama.cpp: ", 1)[-1] for line in said if "REPACK" in line.upper()]
    return {"extra_buffers": extra, "tokens": len(tokens), "s_median": round(statistics.median(times), 3),
            "tokens_per_s": round(len(tokens) / statistics.median(times), 1), "runs": [round(t, 3) for t in times],
            "llama_cpp_said": repack[:3]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sections", default="overhead,extraction", help="overhead, extraction, prompt")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "model_worker.json"))
    args = parser.parse_args()
    out: dict = {"command": "flock /tmp/memdb-cpu.lock .venv/bin/python bench/model_worker.py " + " ".join(sys.argv[1:]),
                 "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                 "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
                             "amx": sorted(llama.cpu_flags() & set(llama.AMX_CPU_FLAGS)),
                             "llama_cpp_build": llama.system_info().strip()},
                 }
    sections = args.sections.split(",")
    if "overhead" in sections:
        out["overhead"] = overhead(args.calls, args.starts)
        print(json.dumps(out["overhead"]), file=sys.stderr)
    if "prompt" in sections:
        runs = []
        for _ in range(args.rounds):
            for extra in (True, False):
                runs.append(prompt_eval(extra, args.threads, args.repeats))
                print(json.dumps(runs[-1]), file=sys.stderr)
        out["prompt"] = runs
        out["prompt_summary"] = {f"tokens_per_s_extra_{'on' if extra else 'off'}": statistics.median(
            r["tokens_per_s"] for r in runs if r["extra_buffers"] is extra) for extra in (True, False)}
    if "extraction" in sections:
        runs = []
        for _ in range(args.rounds):
            for extra in (True, False):
                runs.append(extraction(extra, True, args.threads))
                print(json.dumps(runs[-1]), file=sys.stderr)
        runs.append(extraction(None, False, args.threads))
        print(json.dumps(runs[-1]), file=sys.stderr)
        out["extraction"] = runs
        pick = lambda extra, key: statistics.median(r[key] for r in runs if r["in_worker"] and r["extra_buffers"] is extra)  # noqa: E731
        out["summary"] = {
            "s_per_turn_extra_on": pick(True, "s_per_turn_median"), "s_per_turn_extra_off": pick(False, "s_per_turn_median"),
            "prompt_tps_extra_on": pick(True, "prompt_tokens_per_s"), "prompt_tps_extra_off": pick(False, "prompt_tokens_per_s"),
            "generate_tps_extra_on": pick(True, "generate_tokens_per_s"),
            "generate_tps_extra_off": pick(False, "generate_tokens_per_s"),
        }
    Path(args.out).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k in ("overhead", "summary", "prompt_summary")}, indent=1))


if __name__ == "__main__":
    main()
