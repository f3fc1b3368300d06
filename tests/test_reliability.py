"""Durability: nothing acknowledged is lost, nothing is half-written, a damaged file is not made worse.

Guards: one transaction per add() (a failure half-way leaves no turn, FTS row or vector);
concurrent first opens of a new file; threads sharing one Memory; extraction racing another
process's extraction or a forget() of its turns; several processes sharing one file (short
run of bench/stress_concurrency.py); kill -9 in the middle of ingest, extraction and forget
(short run of bench/stress_kill.py); and a file with garbage over some pages (open leaves it
byte-identical; damage found later surfaces as MemdbError).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import pytest

import memdb
from memdb import text
from memdb.db import connection
from memdb.db import rows as db_rows
from tests.conftest import HashEmbedder, ScriptedLLM

ROOT = Path(__file__).resolve().parent.parent
MESSAGES = [{"content": f"message {i} about the harbour ferry"} for i in range(5)]


def _counts(mem: memdb.Memory) -> dict[str, int]:
    tables = ("turns", "turns_fts", "turns_vec", "atoms", "atoms_fts", "atoms_vec", "atom_sources")
    return {t: mem.conn.execute(f'select count(*) from "{t}"').fetchone()[0] for t in tables}


def _fail_on_third(real: Callable, where: str) -> Callable:
    calls = {"n": 0}

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            if where == "after":  # the third turn and its index rows are written, then the failure
                real(*args, **kwargs)
            raise OSError("disk full")
        return real(*args, **kwargs)

    return wrapper


@pytest.mark.parametrize("target, where", [("insert_turn", "before"), ("insert_turn", "after"), ("segment", "before")])
def test_a_failure_half_way_through_add_writes_nothing(mem, monkeypatch, target, where):
    mem.add([{"content": "an earlier turn stays"}], user="alice")
    before = _counts(mem)
    module = db_rows if target == "insert_turn" else text
    monkeypatch.setattr(module, target, _fail_on_third(getattr(module, target), where))
    with pytest.raises(OSError, match="disk full"):
        mem.add(MESSAGES, user="alice")
    assert before == _counts(mem)
    monkeypatch.undo()
    assert 5 == len(mem.add(MESSAGES, user="alice"))  # the connection is usable afterwards
    assert [1, 2, 3, 4, 5, 6] == [r["seq"] for r in mem.turns(list(range(1, 100)), user="alice")]


def test_a_late_first_open_keeps_the_vectors_of_an_early_one(db_path, monkeypatch):
    # Two processes open a new file at once; the late one looked for vectors before the early
    # one had created them. Its stale look must not make it drop and recreate the vec0 tables.
    with memdb.open(db_path, embedder=HashEmbedder(), extract="defer") as early:
        ids = early.add(MESSAGES, user="alice")
        real_get_meta, stale = connection.get_meta, {"embedder_dim"}

        def get_meta(conn: Any, key: str) -> str | None:
            if key in stale:  # the first look at embedder_dim happened before the early commit
                stale.discard(key)
                return None
            return real_get_meta(conn, key)

        monkeypatch.setattr(connection, "get_meta", get_meta)
        with memdb.open(db_path, embedder=HashEmbedder(), extract="defer"):
            pass
        assert not stale  # the stale look did happen
        assert sorted(ids) == [r[0] for r in early.conn.execute("select turn_id from turns_vec order by 1")]


def test_a_file_another_process_creates_during_the_check_is_not_called_foreign(db_path, monkeypatch):
    # Opening a new file races with another process creating it: the creator commits between
    # two statements of the check. The check must see the file before or after, never half.
    real_check = connection._check_file
    other: list[memdb.Memory] = []
    state = {"in_other": False}

    def check_while_another_creates(conn: Any, path: str) -> None:
        if state["in_other"]:  # the other process's own open: checked as usual
            return real_check(conn, path)
        statements: list[str] = []

        def tracer(cursor: Any, sql: str, bindings: Any) -> bool:
            statements.append(sql)
            if len(statements) == 2:  # the other process creates the file and commits, now
                state["in_other"] = True
                other.append(memdb.open(db_path, embedder=None))
                state["in_other"] = False
            return True

        conn.exec_trace = tracer
        try:
            real_check(conn, path)
        finally:
            conn.exec_trace = None

    monkeypatch.setattr(connection, "_check_file", check_while_another_creates)
    try:
        with memdb.open(db_path, embedder=HashEmbedder(), extract="defer") as mem:
            assert 1 == len(mem.add(MESSAGES[:1], user="alice"))
    finally:
        for mem in other:
            mem.close()


def test_open_waits_while_another_process_holds_a_new_file(db_path):
    # A new file is in rollback mode until someone switches it to WAL, and SQLite does not call
    # the busy handler for that switch: open must wait for the other writer, not fail at once.
    other = apsw.Connection(str(db_path))
    other.execute("begin immediate")
    other.execute("create table scratch (x)")
    release = threading.Timer(0.3, lambda: other.execute("rollback"))
    release.start()
    try:
        with memdb.open(db_path, embedder=None) as mem:
            assert "wal" == mem.conn.execute("pragma journal_mode").fetchone()[0]
    finally:
        release.join()
        other.close()


def test_a_file_locked_past_the_busy_timeout_raises_memdb_error(db_path, monkeypatch):
    memdb.open(db_path, embedder=None).close()
    locker = apsw.Connection(str(db_path))  # another program holding the file, exclusively
    locker.execute("pragma locking_mode = exclusive")
    locker.execute("begin exclusive")
    locker.execute("insert into meta values ('held', 'by another program')")
    monkeypatch.setattr(connection, "connect", functools.partial(connection.connect, busy_timeout_ms=100))
    try:
        with pytest.raises(memdb.MemdbError, match="locked"):
            memdb.open(db_path, embedder=None)
    finally:
        locker.execute("rollback")
        locker.close()


def test_threads_sharing_one_memory_lose_nothing(mem):
    # Memory says it is safe to share between threads: 3 adding and 2 searching at once.
    results: dict[str, list[int]] = {}
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            results[name] = [i for n in range(25) for i in mem.add(
                [{"content": f"{name} note {n} about the harbour"}, {"content": f"{name} second {n}"}], user=name)]
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(40):
                mem.search("harbour note", user="w0", k=5)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(3)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert [] == errors
    ids = sorted(i for got in results.values() for i in got)
    assert ids == [r[0] for r in mem.conn.execute("select id from turns order by id")]
    assert 150 == len(ids) == len(set(ids))
    for name, got in results.items():  # each user's turns in the order add() returned them
        assert list(range(1, 51)) == [r["seq"] for r in mem.turns(got, user=name)]


def hooked(during: Callable[[], object] = lambda: None) -> ScriptedLLM:
    """A scripted model that runs `during` at its first call, while it "thinks": another
    connection acting on the same file between the moment extraction read its turns and the
    moment it writes."""
    pending = [during]

    def reply(messages: list[dict[str, str]]) -> str:
        while pending:
            pending.pop()()
        return '{"a":[{"kind":"fact","subject":"Ana","predicate":"keeps","object":"a rose garden"}]}'

    return ScriptedLLM(reply)


ROSE = [{"role": "user", "name": "Ana", "content": "Roses behind the house, forty of them."}]  # left to the model


def test_two_processes_extracting_the_same_turns_absorb_them_once(db_path):
    with memdb.open(db_path, embedder=HashEmbedder(), extract="defer", llm=hooked()) as second, \
            memdb.open(db_path, embedder=HashEmbedder(), extract="defer",
                       llm=hooked(during=lambda: second.extract())) as first:  # the other one finishes first
        ids = first.add(ROSE, user="ana")
        counts = first.extract()
        (atom,) = first.profile("ana")
        assert (1, ids) == (atom.seen, atom.turn_ids)  # not merged into itself a second time
        assert 0 == counts["done"] + counts["new"] + counts["merged"]


def test_a_turn_forgotten_while_the_model_runs_gets_no_atom(db_path):
    with memdb.open(db_path, embedder=HashEmbedder(), extract="defer") as other, \
            memdb.open(db_path, embedder=HashEmbedder(), extract="defer",
                       llm=hooked(during=lambda: other.forget(turn_id=tid, user="ana"))) as mem:
        (tid,) = mem.add(ROSE, user="ana")
        mem.extract()  # must not raise, nor write an atom citing a turn that is gone
        assert ([], 0) == (mem.profile("ana"), mem.stats()["atoms"])
        assert [] == mem.conn.execute("pragma foreign_key_check").fetchall()


def _run_bench(script: str, *args: str, out: Path) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args, "--out", str(out)],
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    report = json.loads(out.read_text())
    assert 0 == proc.returncode, proc.stderr[-3000:]
    return report


def test_four_writers_and_four_readers_share_one_file(tmp_path):
    # All eight also open the new file at the same moment; the long run repeats that 40 times.
    report = _run_bench("stress_concurrency.py", "--seconds", "4", "--first-open-rounds", "0", out=tmp_path / "c.json")
    assert (0, 0, 0, []) == (report["errors"], report["rows_lost"], report["rows_unexpected"], report["file_problems"])
    assert report["turns_added"] == report["turns_in_file"] > 50
    assert report["searches"] > 50 and report["atoms_written"] > 0  # both sides really ran


def test_kill_9_mid_ingest_loses_nothing_acknowledged(tmp_path):
    report = _run_bench("stress_kill.py", "--kills", "5", out=tmp_path / "k.json")
    assert (5, 0, [], 0) == (report["kills"], report["rows_lost"], report["file_problems"], report["pending_after_resume"])
    assert report["turns_in_file"] >= report["turns_acknowledged"] > 0
    assert report["pending_before_resume"] > 0 and report["resumed"]["done"] > 0  # resumable, not just empty


# ---------------------------------------------------------------- a damaged file


def _damaged_file(path: Path, victim: str) -> bytes:
    """A valid memdb file with garbage written over every page of one table; returns its bytes."""
    with memdb.open(path, embedder=HashEmbedder(), extract="defer") as mem:
        for i in range(60):
            mem.add([{"content": f"turn {i} about coffee and the harbour ferry " * 12}], user=f"u{i % 3}")
        mem.conn.execute("pragma wal_checkpoint(truncate)")
        pages = [r[0] for r in mem.conn.execute("select pageno from dbstat where name = ?", (victim,))]
        page_size = mem.conn.execute("pragma page_size").fetchone()[0]
    assert pages
    data = bytearray(path.read_bytes())
    for page in pages:
        start = (page - 1) * page_size
        data[start : start + page_size] = (b"\xde\xad\xbe\xef" * page_size)[:page_size]
    path.write_bytes(bytes(data))
    return bytes(data)


CALLS: dict[str, Callable[[memdb.Memory], object]] = {
    "search": lambda m: m.search("coffee harbour", user="u1"),
    "search strict": lambda m: m.search("coffee harbour", user="u1", strict=True),
    "context": lambda m: m.context("coffee", user="u1", budget=100),
    "turns": lambda m: m.turns(list(range(1, 61))),
    "export": lambda m: list(m.export("u1")),
    "profile": lambda m: m.profile("u1"),
    "stats": lambda m: m.stats(),
    "add": lambda m: m.add([{"content": "one more"}], user="u1"),
    "forget": lambda m: m.forget(user="u2"),
}


# A damaged schema is found at open; damaged data pages only when a call reads them.
@pytest.mark.parametrize("victim, refused_at_open", [
    ("turns", False), ("turns_fts_data", False), ("turns_vec_vector_chunks00", False), ("sqlite_schema", True)])
def test_a_damaged_file_is_left_untouched_by_open_and_fails_with_memdb_errors(tmp_path, victim, refused_at_open):
    path = tmp_path / "damaged.db"
    before = _damaged_file(path, victim)
    if refused_at_open:
        with pytest.raises(memdb.SchemaError) as refused:
            memdb.open(path, embedder=HashEmbedder(), extract="defer")
        assert (f"{str(path)!r} is not a readable SQLite file (file is not a database); it was left untouched"
                == str(refused.value))
        assert before == path.read_bytes()
        return
    memdb.open(path, embedder=HashEmbedder(), extract="defer").close()
    assert before == path.read_bytes()
    with memdb.open(path, embedder=HashEmbedder(), extract="defer") as mem:
        for name, call in CALLS.items():
            try:
                call(mem)
            except memdb.MemdbError:
                pass  # found later: still memdb's own error, which the agent loop can catch
            except Exception as exc:  # noqa: BLE001 - this is the failure being tested for
                pytest.fail(f"{name} on a file with damaged {victim} raised {type(exc).__name__}: {exc}")
