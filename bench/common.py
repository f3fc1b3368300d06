"""What several bench scripts share: where the checkout and the dev data are, the machine a run
had and which memdb ran, and LoCoMo's conversations and retrieval scores.

A script puts the checkout first on sys.path (`sys.path.insert(0, str(ROOT))`, so that this
checkout's memdb is the one measured), then imports from bench.common.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import subprocess
from pathlib import Path

import numpy as np

import memdb
from memdb import codec
from memdb.db import connection
from memdb.lifecycle import absorb

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"  # the dev data (LoCoMo, MemoryBank-cn, references)
LOCOMO_DEV = DATA / "locomo_dev.json"
MEMORYBANK_DEV = DATA / "memorybank_cn_dev.json"


# ---------------------------------------------------------------- the run


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or what platform knows of it elsewhere."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """The machine and the libraries of this run, and its load (the machine is shared)."""
    import apsw
    import sqlite_vec

    try:
        mem_kb = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    except (OSError, StopIteration):
        mem_kb = 0
    return {
        "nproc": os.cpu_count(), "cpu": cpu_model(), "memory_gb": round(mem_kb / 2**20, 1),
        "python": platform.python_version(), "sqlite": apsw.sqlite_lib_version(),
        "apsw": apsw.apswversion(), "sqlite_vec": getattr(sqlite_vec, "__version__", None),
        "numpy": np.__version__,
        # The machine is shared: the load says how much of it this run had.
        "loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()],
    }


def code_version() -> dict:
    """Which memdb ran: its folder and the repository commit (+dirty when memdb/ has changes)."""
    git = ["git", "-C", str(ROOT)]
    try:
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "memdb"], capture_output=True, text=True).stdout
    except OSError:
        commit, dirty = "", ""
    return {"memdb": str(Path(memdb.__file__).parent), "commit": (commit + "+dirty" * bool(dirty)) or None}


# ---------------------------------------------------------------- LoCoMo

KS = (5, 10, 20)  # the cut-offs of recall@k


def parse_session_time(value: str) -> dt.datetime:
    """LoCoMo's '1:56 pm on 8 May, 2023'."""
    return dt.datetime.strptime(value.replace(" on ", " ").replace(",", ""), "%I:%M %p %d %B %Y")


def turn_text(turn: dict) -> str:
    text = turn["text"]
    if turn.get("blip_caption"):
        text += f" [shares a photo: {turn['blip_caption']}]"
    return text


def load_conversation(mem: memdb.Memory, sample: dict) -> dict[str, int]:
    """Add every session of a LoCoMo sample; returns dia_id -> turn id."""
    conv, user = sample["conversation"], sample["sample_id"]
    dia_to_turn: dict[str, int] = {}
    n = 1
    while f"session_{n}" in conv:
        start = parse_session_time(conv[f"session_{n}_date_time"])
        turns = conv[f"session_{n}"]
        messages = [
            {"role": "user", "name": t["speaker"], "content": turn_text(t),
             "ts": (start + dt.timedelta(seconds=30 * i)).isoformat()}
            for i, t in enumerate(turns)
        ]
        ids = mem.add(messages, user=user, session=f"session_{n}")
        dia_to_turn.update({t["dia_id"]: i for t, i in zip(turns, ids)})
        n += 1
    return dia_to_turn


def load_atoms(mem: memdb.Memory, user: str, path: Path, dia_to_turn: dict[str, int]) -> int:
    """Absorb extracted atoms (one JSON object a line with record, confidence, dia_ids, conv)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("conv") == user]
    records = [codec.validate(r["record"]) for r in rows]
    vectors = mem.embedder.embed([codec.canonical_text(r) for r in records])
    ts_of = {t["id"]: t["ts"] for t in mem.turns(sorted(dia_to_turn.values()), user=user)}
    with connection.write(mem.conn):
        for row, record, vector in zip(rows, records, vectors):
            turn_ids = [dia_to_turn[d] for d in row["dia_ids"] if d in dia_to_turn]
            if not turn_ids:
                continue
            absorb.absorb(mem.conn,
                          absorb.Incoming(user=user, record=record,
                                          confidence=row.get("confidence", 0.8), turn_ids=turn_ids,
                                          ts=max(ts_of[t] for t in turn_ids), vector=vector),
                          absorb.Engine(mem.settings),
                          multilingual=getattr(mem.embedder, "multilingual", True))
            mem.conn.execute('update "turns" set "state" = 1 where "id" in (%s)' % ",".join("?" * len(turn_ids)), turn_ids)
    return len(rows)


def built_file(mem: memdb.Memory, sample: dict) -> dict[str, int]:
    """dia_id -> turn id of a file built by bench/qa_prepare.py (the real pipeline: extraction,
    lifecycle, turn states): its turns were added in dialogue order, so ids ascend with dia_ids."""
    conv, dia_ids, n = sample["conversation"], [], 1
    while f"session_{n}" in conv:
        dia_ids += [t["dia_id"] for t in conv[f"session_{n}"]]
        n += 1
    ids = [t["id"] for t in mem.export(sample["sample_id"]) if t["type"] == "turn"]
    if len(ids) != len(dia_ids):
        raise SystemExit(f"{sample['sample_id']}: the file holds {len(ids)} turns, the data {len(dia_ids)}")
    return dict(zip(dia_ids, ids))


def evidence(qa: dict) -> set[str]:
    return {e.strip() for ev in qa["evidence"] for e in ev.split(";") if e.strip()}


def score(hits: list[memdb.Hit], gold: set[str], turn_to_dia: dict[int, str]) -> dict[str, float]:
    """recall@k for each of KS and the reciprocal rank of the first hit citing gold evidence."""
    covered: list[set[str]] = [{turn_to_dia[t] for t in h.turn_ids if t in turn_to_dia} for h in hits]
    out = {}
    for k in KS:
        found = set().union(*covered[:k]) if covered[:k] else set()
        out[f"recall@{k}"] = len(found & gold) / len(gold)
    rank = next((i + 1 for i, c in enumerate(covered) if c & gold), None)
    out["mrr"] = 1.0 / rank if rank else 0.0
    return out


def mean_scores(rows: list[dict]) -> dict:
    """The count and the mean of each score over rows (score()'s dicts; an "intent" key is skipped)."""
    keys = [k for k in rows[0] if k != "intent"] if rows else []
    return {"n": len(rows), **{k: round(statistics.fmean(r[k] for r in rows), 4) for k in keys}}
