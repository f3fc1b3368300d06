"""What an adversarial pass over memdb found (issue 15), each turned into a promise that holds:
ids are never handed to another user, every row addressed by id is scoped to a user, extreme
values raise MemdbError, vectors stored late are filled in, and SQLite failures say what is
actually wrong.
"""

from __future__ import annotations

import apsw
import pytest

import memdb
from memdb import fileerrors
from memdb.db import connection
from memdb.lifecycle import absorb

HUGE = 2**64


def _atom(mem: memdb.Memory, user: str, obj: str, turn_ids: list[int]) -> int:
    record = {"kind": "fact", "subject": user, "predicate": "earns", "object": obj}
    with connection.write(mem.conn):
        return absorb.absorb(mem.conn,
                             absorb.Incoming(user=user, record=record,
                                             confidence=0.9, turn_ids=turn_ids,
                                             ts="2026-05-01T10:00:00", vector=None),
                             absorb.Engine(mem.settings))[1]


# ---------------------------------------------------------------- ids are never reused


def test_ids_forgotten_by_one_user_never_open_another_users_rows(mem):
    turns = mem.add([{"content": "my salary is 9000"}, {"content": "my bank is Nordbank"}], user="alice")
    atom = _atom(mem, "alice", "9000", turns)
    mem.forget(user="alice")
    (bob_turn,) = mem.add([{"content": "my salary is 7000"}], user="bob")
    bob_atom = _atom(mem, "bob", "7000", [bob_turn])
    assert bob_turn > max(turns) and bob_atom > atom
    assert [] == mem.turns(turns, user="alice")
    with pytest.raises(memdb.NotFound):
        mem.get(atom, user="alice")


def test_ids_stay_above_forgotten_ones_after_reopening(db_path, embedder):
    with memdb.open(db_path, embedder=embedder, extract="defer") as mem:
        ids = mem.add([{"content": f"turn {i}"} for i in range(3)], user="alice")
        mem.forget(turn_id=ids[-1], user="alice")
    with memdb.open(db_path, embedder=embedder, extract="defer") as mem:
        assert [ids[-1] + 1] == mem.add([{"content": "next"}], user="bob")


# ---------------------------------------------------------------- every call is scoped


@pytest.mark.parametrize("call", [
    lambda m, t, a: m.get(a), lambda m, t, a: m.history(a), lambda m, t, a: m.turns([t]),
    lambda m, t, a: m.forget(atom_id=a), lambda m, t, a: m.forget(turn_id=t),
], ids=["get", "history", "turns", "forget atom", "forget turn"])
def test_rows_addressed_by_id_need_a_user(mem, call):
    (turn,) = mem.add([{"content": "my salary is 9000"}], user="alice")
    atom = _atom(mem, "alice", "9000", [turn])
    with pytest.raises(memdb.InvalidInput, match="user= is required"):
        call(mem, turn, atom)
    assert (1, 1) == tuple(mem.stats()[k] for k in ("turns", "atoms"))


def test_one_users_app_cannot_read_or_delete_another_users_rows(mem):
    (turn,) = mem.add([{"content": "my salary is 9000"}], user="alice")
    atom = _atom(mem, "alice", "9000", [turn])
    for call in (lambda: mem.get(atom, user="bob"), lambda: mem.history(atom, user="bob"),
                 lambda: mem.forget(atom_id=atom, user="bob"), lambda: mem.forget(turn_id=turn, user="bob")):
        with pytest.raises(memdb.NotFound, match="bob"):
            call()
    assert [] == mem.turns([turn], user="bob")
    assert [turn] == [t["id"] for t in mem.turns([turn], user="alice")]
    assert (1, 1) == tuple(mem.stats()[k] for k in ("turns", "atoms"))


def test_a_memory_bound_to_a_user_keeps_the_single_user_case_short(db_path, embedder):
    with memdb.open(db_path, user="alice", embedder=embedder, extract="defer") as mem:
        (turn,) = mem.add([{"content": "we use PostgreSQL"}])
        atom = _atom(mem, "alice", "PostgreSQL", [turn])
        hits = mem.search("PostgreSQL")
        assert turn in [t["id"] for h in hits for t in mem.turns(h.turn_ids)]
        assert atom == mem.get(atom).id and [atom] == [a.id for a in mem.history(atom)]
        mem.add([{"content": "bob's words"}], user="bob")  # another user only when named
        assert 1 == mem.stats()["turns"]
        assert {"turns": 1, "atoms": 1} == mem.forget(turn_id=turn)
    with memdb.open(db_path, user="bob", embedder=embedder, extract="defer") as mem:
        assert [] == mem.turns([turn]) and turn not in [h.id for h in mem.search("PostgreSQL")]
    with pytest.raises(memdb.InvalidInput, match="invisible"):
        memdb.open(db_path, user="ali\u202ece", embedder=embedder)


def test_forget_of_a_whole_user_is_never_implied(db_path, embedder):
    with memdb.open(db_path, user="alice", embedder=embedder, extract="defer") as mem:
        mem.add([{"content": "keep me"}])
        with pytest.raises(memdb.InvalidInput):
            mem.forget()
        assert 1 == mem.stats()["turns"]


# ---------------------------------------------------------------- extreme values are MemdbError


@pytest.mark.parametrize("ts", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00"])
def test_times_outside_the_calendar_in_utc_are_invalid_input(mem, ts):
    with pytest.raises(memdb.InvalidInput, match="outside the years"):
        mem.add([{"content": "x", "ts": ts}], user="alice")
    with pytest.raises(memdb.InvalidInput, match="outside the years"):
        mem.add([{"content": "x"}], user="alice", ts=ts)
    with pytest.raises(memdb.InvalidInput, match="outside the years"):
        mem.events("alice", since=ts)
    assert 0 == mem.stats()["turns"]


@pytest.mark.parametrize("call", [
    lambda m: m.get(HUGE, user="alice"), lambda m: m.turns([1, HUGE], user="alice"),
    lambda m: m.history(-HUGE, user="alice"), lambda m: m.forget(atom_id=HUGE, user="alice"),
    lambda m: m.forget(turn_id=HUGE, user="alice"), lambda m: m.extract(turn_ids=[HUGE]),
], ids=["get", "turns", "history", "forget atom", "forget turn", "extract"])
def test_ids_beyond_64_bits_are_invalid_input(mem, call):
    mem.add([{"content": "x"}], user="alice")
    with pytest.raises(memdb.InvalidInput, match="too large for an id"):
        call(mem)


def test_many_ids_in_one_call_are_read(mem):
    ids = mem.add([{"content": f"turn {i}"} for i in range(3)], user="alice")
    asked = list(range(1, 40_000)) + ids  # more than SQLite binds in one statement
    assert ids == [t["id"] for t in mem.turns(asked, user="alice")]


# ---------------------------------------------------------------- vectors stored late


def test_turns_stored_keyword_only_get_vectors_when_an_embedder_writes(db_path, embedder):
    with memdb.open(db_path, embedder=embedder, extract="defer") as mem:  # the file has vectors
        mem.add([{"content": "the first words"}], user="alice")
    with memdb.open(db_path, embedder=None, extract="defer") as keyword_only:
        late = keyword_only.add([{"content": f"a harbour ferry note {i}"} for i in range(3)], user="alice")
        assert {"turns": 3, "atoms": 0} == keyword_only.stats()["vectors_missing"]
    with memdb.open(db_path, embedder=embedder, extract="defer",
                    settings=memdb.Settings(vector_backfill=2)) as mem:
        assert {"turns": 3, "atoms": 0} == mem.stats(user="alice")["vectors_missing"]
        mem.add([{"content": "one more"}], user="bob")
        assert 1 == mem.stats()["vectors_missing"]["turns"]  # two per call
        mem.add([{"content": "and another"}], user="bob")
        assert {"turns": 0, "atoms": 0} == mem.stats()["vectors_missing"]
        held = {r[0] for r in mem.conn.execute("select turn_id from turns_vec")}
        assert set(late) <= held


# ---------------------------------------------------------------- errors say what is wrong


def test_a_full_disk_says_the_disk_is_full(mem):
    mem.add([{"content": "x"}], user="alice")
    pages = mem.conn.execute("pragma page_count").fetchone()[0]
    mem.conn.execute(f"pragma max_page_count = {pages}")
    with pytest.raises(memdb.MemdbError, match="full; free space") as caught:
        mem.add([{"content": "y" * 200_000}], user="alice")
    assert "integrity_check" not in str(caught.value)


@pytest.mark.parametrize("error, words", [
    (apsw.BusyError("database is locked"), "locked by another connection"),
    (apsw.ReadOnlyError("attempt to write a readonly database"), "is read-only"),
    (apsw.FullError("database or disk is full"), "disk (or the file size limit) is full"),
    (apsw.TooBigError("string or blob too big"), "pass fewer ids"),
    (apsw.CorruptError("database disk image is malformed"), "integrity_check"),
])
def test_each_sqlite_failure_gets_its_own_advice(error, words):
    message = str(fileerrors.file_error("agent.db", error))
    assert words in message
    assert ("integrity_check" in message) == isinstance(error, apsw.CorruptError)


def test_a_read_only_file_says_it_is_read_only(db_path, embedder):
    memdb.open(db_path, embedder=embedder).close()
    with memdb.open(db_path, embedder=embedder, extract="defer") as mem:
        mem.conn.execute("pragma query_only = on")  # what a read-only file does to every write
        with pytest.raises(memdb.MemdbError, match="read-only"):
            mem.add([{"content": "x"}], user="alice")


def test_a_bound_memory_extracts_the_turns_of_the_user_an_add_names(db_path, embedder):
    from tests.conftest import ScriptedLLM
    from tests.test_hostile import GOOD

    with memdb.open(db_path, user="alice", embedder=embedder, llm=ScriptedLLM(GOOD)) as mem:
        ids = mem.add([{"role": "user", "name": "Ana", "content": "I moved to Lisbon last spring."},
                       {"role": "user", "name": "Ana", "content": "I like green tea."}], user="ana")
        assert ["done", "done"] == [t["state"] for t in mem.turns(ids, user="ana")]
        assert [] == mem.profile()  # alice's
