"""How fast the default embedder is: sentences per second for 20-word English sentences.

    .venv/bin/python bench/embed_speed.py            # writes bench/results/embed_speed.json

Measures MiniLM (memdb's BERT runtime, onnxruntime; numpy before issue 27) at batch sizes 1, 16
and 64 (median of several runs), with memdb's default threads and with one thread, the raw sgemm
rate of this machine (the ceiling: MiniLM costs ~21 MFLOP per token in its 6 layers), and, when
llama-cpp-python is installed, the same model converted to GGUF and run by llama.cpp. Sentences
are 20 consecutive words of the LoCoMo dev turns (../shared/data), or synthetic ones without it.
With --compare-openblas-env and OPENBLAS_CORETYPE set, it also reruns itself with that variable
(and OPENBLAS_L2_SIZE) unset, which the environment notes say slows current numpy.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import gguf_files  # noqa: E402 - the converter the GGUF test uses
from memdb.models import embedders  # noqa: E402
from bench.common import LOCOMO_DEV, cpu_model  # noqa: E402

LOCOMO = LOCOMO_DEV
OUT = ROOT / "bench" / "results" / "embed_speed.json"
FLOP_PER_TOKEN = 2 * 6 * (3 * 384 * 384 + 384 * 384 + 2 * 384 * 1536)  # dense layers; attention adds ~2%
OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def sentences(n: int, words: int = 20) -> tuple[list[str], str]:
    """n sentences of `words` words, from LoCoMo turns when the shared data is there."""
    if LOCOMO.is_file():
        samples = json.loads(LOCOMO.read_text(encoding="utf-8"))
        flat = [w for s in samples for k, turns in s["conversation"].items() if k.startswith("session_")
                and isinstance(turns, list) for t in turns for w in t["text"].split()]  # fmt: skip
        return [" ".join(flat[i * words : (i + 1) * words]) for i in range(n)], "LoCoMo dev turns"
    rng = random.Random(0)
    vocab = ("the a we you they user prefers database meeting moved friday because after dinner went "
             "painted lake sunrise last year allergic peanuts shipped release backend team loves").split()  # fmt: skip
    return [" ".join(rng.choice(vocab) for _ in range(words)) + "." for _ in range(n)], "synthetic"


def rate(fn, texts: list[str], batch: int, runs: int) -> dict[str, float]:
    """Median sentences per wall second and per CPU second (all threads) of embedding texts in
    calls of `batch` texts each. On a shared machine the CPU figure is the steadier one."""
    fn(texts[:batch])  # warm up caches and the tokenizer memo
    wall, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        for i in range(0, len(texts), batch):
            fn(texts[i : i + batch])
        wall.append(len(texts) / (time.perf_counter() - start))
        cpu.append(len(texts) / (time.process_time() - start_cpu))
    return {"per_s": round(statistics.median(wall), 1), "per_cpu_s": round(statistics.median(cpu), 1)}


def sgemm_gflops(rows: int) -> float:
    """The best of a few (rows x 384) @ (384 x 1536) products: the rate the FFN can reach."""
    a = np.random.default_rng(0).standard_normal((rows, 384), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((384, 1536), dtype=np.float32)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(10))
    return 2 * rows * 384 * 1536 / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def machine() -> dict:
    info = {
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "env": {v: os.environ.get(v) for v in OPENBLAS_VARS},
        "loadavg_before": os.getloadavg(),
    }
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = threadpool_info()
    except ImportError:
        buf = io.StringIO()
        with redirect_stdout(buf):
            config = np.show_config(mode="dicts")
        info["blas"] = config.get("Build Dependencies", {}).get("blas") if config else buf.getvalue()
    return info


def gguf_rate(texts: list[str], batches: list[int], runs: int) -> dict | None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        model = embedders.load(gguf_files.minilm_gguf(Path(tmp) / "minilm.gguf"))
        return {str(b): rate(model.embed, texts, b, runs) for b in batches}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=256, help="sentences per run (batch 1 uses a quarter)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--threads", default="default,1",
                    help="thread settings to compare, e.g. 'default,1'")
    ap.add_argument("--no-gguf", action="store_true", help="skip the llama.cpp comparison")
    ap.add_argument("--compare-openblas-env", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT, help="JSON file to write ('-' prints it only)")
    args = ap.parse_args()

    batches = [int(b) for b in args.batches.split(",")]
    texts, source = sentences(args.sentences)
    info = machine()
    settings = args.threads.split(",")
    model = embedders.load("minilm")
    tokens = statistics.mean(min(len(ids) + 2, 256) for ids in model.encoder.ids(texts))
    numpy_rates: dict[str, dict[str, dict[str, float]]] = {}
    for setting in settings:
        run = embedders.load("minilm", threads=None if setting == "default" else int(setting))
        numpy_rates[f"threads={setting}"] = {
            str(b): rate(run.embed, texts[: max(b, len(texts) // 4)] if b == 1 else texts, b, args.runs)
            for b in batches
        }
    default = numpy_rates["threads=default"]
    gemm = sgemm_gflops(64 * round(tokens))
    result = {
        "what": "sentences/s of memdb.embed for 20-word English sentences (median of runs)",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": info,
        "sentences": {"source": source, "count": len(texts), "mean_tokens": round(tokens, 1)},
        "numpy_minilm": numpy_rates,
        "llama_cpp_gguf": None if args.no_gguf else gguf_rate(texts, batches[-1:], args.runs),
        "limits": {
            "mflop_per_token": round(FLOP_PER_TOKEN / 1e6, 1),
            "mflop_per_sentence": round(FLOP_PER_TOKEN * tokens / 1e6),
            "sgemm_gflops_measured": round(gemm, 1),
            "ceiling_sentences_per_s": round(gemm * 1e9 / (FLOP_PER_TOKEN * tokens), 1),
            "note": (
                "Compute-bound: most of the time is the four dense products per layer. The ceiling is sgemm GFLOP/s over FLOP per sentence; the 2 cores "
                "are shared, so compare loadavg, and per_cpu_s (CPU seconds of all threads) is the "
                "steadier figure when other processes compete. Batch 1 runs 2-D products of ~28 rows, "
                "where BLAS is far from its peak. When the cores are busy, OpenBLAS's 2 spinning threads "
                "lose to 1 thread (threads=1), most at batch 1; llama.cpp (OpenMP) suffers the same."
            ),
            "achieved_gflops_at_largest_batch": round(default[str(batches[-1])]["per_s"] * FLOP_PER_TOKEN * tokens / 1e9, 1),
        },
    }
    info["loadavg_after"] = os.getloadavg()
    if args.compare_openblas_env and any(os.environ.get(v) for v in OPENBLAS_VARS):
        env = {k: v for k, v in os.environ.items() if k not in OPENBLAS_VARS}
        cmd = [sys.executable, __file__, "--no-gguf", "--out", "-", "--runs", str(args.runs), "--batches", args.batches,
               "--threads", args.threads, "--sentences", str(args.sentences)]
        result["openblas_env_unset"] = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)
    if str(args.out) == "-":
        print(json.dumps(result))
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"sentences/s (per CPU-second in brackets), {tokens:.1f} tokens/sentence")
    print(f"{'batch':>6}" + "".join(f"{'numpy ' + k:>22}" for k in numpy_rates) + f"{'llama.cpp GGUF':>22}")
    for b in batches:
        gg = (result["llama_cpp_gguf"] or {}).get(str(b))
        print(f"{b:>6}" + "".join(f"{_cell(r[str(b)]):>22}" for r in numpy_rates.values()) + f"{_cell(gg):>22}")
    lim = result["limits"]
    print(f"sgemm {lim['sgemm_gflops_measured']} GFLOP/s -> ceiling {lim['ceiling_sentences_per_s']} sentences/s; "
          f"load average {info['loadavg_before'][0]:.2f} -> {info['loadavg_after'][0]:.2f}; wrote {args.out}")  # fmt: skip


def _cell(r: dict[str, float] | None) -> str:
    return f"{r['per_s']} ({r['per_cpu_s']})" if r else ""


if __name__ == "__main__":
    main()
