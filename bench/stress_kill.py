"""kill -9 a writer in the middle of ingest, again and again, and check nothing acknowledged is lost.

Each round starts a child process that opens the file and loops: add() 1-4 messages, then
report the returned ids and contents on a log file (one unbuffered write per add, after add()
returned); every few adds it extracts pending turns with a scripted model (EchoLLM) and now
and then forgets one of its turns (logged before and after), so the kill also lands inside
extraction and forget transactions. The first round and every tenth are killed early, while
the child imports, creates or opens the file. The parent SIGKILLs the child at a random
moment, then opens the file and checks:

- every turn whose add() returned is present, with its exact content (unless the child had
  started to forget it), and every turn whose forget() returned is gone;
- `pragma integrity_check` is ok, foreign keys hold, and turns_fts / turns_vec / atoms_fts /
  atoms_vec hold exactly the ids of their tables;
- turns are only ever pending, done, skipped or failed; at the end one extract() with the
  scripted model resumes every pending turn and leaves none pending;
- no id is acknowledged twice (a forgotten id given to a later turn would open it for whoever
  kept the old one), and after a checkpoint the file's bytes hold no word said only in a
  forgotten turn (each turn ends with a word of its own), whatever merges or kills came between.

    .venv/bin/python bench/stress_kill.py --kills 50          # writes bench/results/stress_kill.json
    .venv/bin/python bench/stress_kill.py --kills 5 --out /tmp/k.json   # the test suite's short run
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import memdb  # noqa: E402
from memdb import codec  # noqa: E402
from stress_concurrency import NO_MODEL, WORDS, EchoLLM, check_file  # noqa: E402
from tests.conftest import HashEmbedder  # noqa: E402

STATES = {"pending", "done", "skipped", "failed"}


def _open(path: str, llm: Any = NO_MODEL) -> memdb.Memory:
    return memdb.open(path, embedder=HashEmbedder(), llm=llm, extract="defer")


def child(path: str, log_path: str, seed: int) -> None:
    """Ingest until killed; after each add() returns, append its ids and contents to the log."""
    rng = random.Random(seed)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    mem = _open(path, llm=EchoLLM())
    mine: list[tuple[int, str]] = []
    n = 0
    while True:
        n += 1
        user = f"user{rng.randrange(3)}"
        contents = [f"I keep {' '.join(rng.sample(WORDS, 3))} k{seed}x{n}y{i}" for i in range(rng.randint(1, 4))]
        ids = mem.add([{"content": c} for c in contents], user=user, session=f"s{rng.randrange(2)}")
        # One write(2) per add: the kernel holds it even if this process dies the next instant.
        os.write(log, (json.dumps({"ids": ids, "contents": contents}) + "\n").encode())
        mine += [(i, user) for i in ids]
        if n % 4 == 0:
            mem.extract(limit=rng.randint(1, 12))
        if n % 7 == 0:
            victim, owner = mine.pop(rng.randrange(len(mine)))
            os.write(log, (json.dumps({"forgetting": victim}) + "\n").encode())
            mem.forget(turn_id=victim, user=owner)
            os.write(log, (json.dumps({"forgot": victim}) + "\n").encode())


def _acknowledged(log_path: Path) -> tuple[dict[int, str], set[int]]:
    """(id -> content of every turn add() returned and no forget() was started for, ids whose
    forget() returned). Each line is one write(2), so a line is whole or absent."""
    acked: dict[int, str] = {}
    forgotten: set[int] = set()
    if log_path.exists():
        for line in log_path.read_text().splitlines():
            entry = json.loads(line)
            if "ids" in entry:
                acked.update(zip(entry["ids"], entry["contents"]))
            elif "forgetting" in entry:
                acked.pop(entry["forgetting"], None)  # may or may not be gone: the kill decides
            else:
                forgotten.add(entry["forgot"])
    return acked, forgotten


def _reused_and_left(path: str, log_path: Path) -> tuple[list[int], list[str]]:
    """Ids acknowledged more than once, and the own words of forgotten turns still in the file's
    bytes (after a checkpoint; words a surviving atom still states are its words, not leftovers)."""
    seen: dict[int, int] = {}
    contents: dict[int, str] = {}
    forgotten: set[int] = set()
    for line in log_path.read_text().splitlines():
        entry = json.loads(line)
        for i, content in zip(entry.get("ids", []), entry.get("contents", [])):
            seen[i] = seen.get(i, 0) + 1
            contents[i] = content
        if "forgot" in entry:
            forgotten.add(entry["forgot"])
    with _open(path) as mem:
        alive = " ".join(r[0] for r in mem.conn.execute('select "text" from "atoms"'))
        mem.conn.execute("pragma wal_checkpoint(truncate)")
    raw = Path(path).read_bytes()
    words = [contents[i].split()[-1] for i in forgotten if i in contents]
    return sorted(i for i, n in seen.items() if n > 1), [w for w in words if w not in alive and w.encode() in raw]


def _verify(path: str, logged: tuple[dict[int, str], set[int]]) -> dict[str, Any]:
    acked, forgotten = logged
    with _open(path) as mem:
        rows = dict(mem.conn.execute('select "id", "content" from "turns"').fetchall())
        states = {codec.STATE_NAMES[s] for (s,) in mem.conn.execute('select distinct "state" from "turns"')}
        pending = mem.conn.execute('select count(*) from "turns" where "state" = 0').fetchone()[0]
        problems = check_file(mem.conn)
    lost = [i for i, content in acked.items() if rows.get(i) != content]
    back = sorted(forgotten & set(rows))
    if back:
        problems.append(f"forgotten turns are back: {back[:5]}")
    if not states <= STATES:
        problems.append(f"unknown turn states {states - STATES}")
    return {"turns": len(rows), "pending": pending, "lost": lost, "problems": problems}


def run(path: str, kills: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    log_path = Path(path).with_suffix(".acked.jsonl")
    killed = exited_early = 0
    lost: list[int] = []
    problems: list[str] = []
    child_errors: list[str] = []
    for round_ in range(kills):
        before = len(log_path.read_text().splitlines()) if log_path.exists() else 0
        err_path = Path(path).with_suffix(f".child{round_}.err")
        with open(err_path, "wb") as err:
            proc = subprocess.Popen([sys.executable, __file__, "--child", path, str(log_path), str(seed * 1000 + round_)],
                                    stdout=subprocess.DEVNULL, stderr=err)
        if round_ % 10 == 0:
            time.sleep(rng.uniform(0.05, 0.8))  # first and every tenth: while it imports, creates or opens the file
        else:  # mostly once it is ingesting: after its first add, a little later
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and proc.poll() is None and (
                    not log_path.exists() or len(log_path.read_text().splitlines()) <= before):
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.4))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        else:
            exited_early += 1
            child_errors.append(err_path.read_text()[-2000:])
        proc.wait()
        err_path.unlink()
        check = _verify(path, _acknowledged(log_path))
        lost += check["lost"]
        problems += [f"after kill {round_ + 1}: {p}" for p in check["problems"]]
    logged = _acknowledged(log_path)
    before_resume = _verify(path, logged)
    with _open(path, llm=EchoLLM()) as mem:  # resume: the pending turns left by the kills get extracted now
        resumed = mem.extract()
    after = _verify(path, logged)
    problems += [f"after resume: {p}" for p in after["problems"]]
    reused, left = _reused_and_left(path, log_path)
    problems += [f"ids acknowledged twice: {reused[:5]}"] * bool(reused)
    problems += [f"words of forgotten turns still in the file: {left[:5]}"] * bool(left)
    return {
        "kills": killed,
        "children_exited_before_kill": exited_early,
        "child_errors": child_errors[:3],
        "adds_acknowledged": sum('"ids"' in line for line in log_path.read_text().splitlines()),
        "turns_acknowledged": len(logged[0]),
        "forgets_acknowledged": len(logged[1]),
        "ids_acknowledged_twice": len(reused),
        "forgotten_words_in_file": len(left),
        "turns_in_file": after["turns"],
        "rows_lost": len(set(lost)),
        "lost_ids": sorted(set(lost))[:20],
        "pending_before_resume": before_resume["pending"],
        "resumed": resumed,
        "pending_after_resume": after["pending"],
        "file_problems": problems,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "stress_kill.json"))
    parser.add_argument("--child", nargs=3, metavar=("DB", "LOG", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        report = run(str(Path(tmp) / "killed.db"), args.kills, args.seed)
    report = {"command": " ".join(shlex.quote(a) for a in [".venv/bin/python", "bench/stress_kill.py", *sys.argv[1:]]),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seconds": round(time.monotonic() - started, 1),
              **report}
    report["ok"] = not (report["rows_lost"] or report["file_problems"] or report["pending_after_resume"]
                        or report["child_errors"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
