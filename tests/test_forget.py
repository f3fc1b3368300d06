"""forget() really forgets: the rows, everything derived from them, and the bytes on disk.

Guards forget(user=), forget(turn_id=) and forget(atom_id=): the rows go, and so do the atoms
whose only sources went, the FTS rows (including FTS5's shadow tables, whose segments keep
deleted terms unless told otherwise) and the vectors (vec0's shadow tables). With
secure_delete, once the WAL is checkpointed the file's raw bytes hold no forgotten text.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

import memdb
from memdb.db import forget
from memdb.db import connection
from memdb import flow
from memdb.extraction.records import Candidate
from memdb.lifecycle import absorb


# Unique words: lowercase, no stemmable ending, no prefix shared with other words in the file,
# so they can be looked for in FTS5 segments and raw bytes (FTS5 prefix-compresses its terms).
SECRET = "qzj7secretw"
ATOM_SECRET = "xkv4atomword"


def _absorb(mem: memdb.Memory, user: str, obj: str, turn_ids: list[int]) -> int:
    record = {"kind": "fact", "subject": user, "predicate": "keeps", "object": obj}
    with connection.write(mem.conn):
        _, atom_id = flow.absorb(mem, Candidate(record, 0.9, turn_ids), user=user, ts="2026-05-01T10:00:00",
                                 vector=mem.embedder.embed([f"{user} keeps {obj}"])[0])
    return atom_id


def _tables(conn: apsw.Connection) -> list[str]:
    """Every table of the file, the FTS5 and vec0 shadow tables included."""
    return [r[0] for r in conn.execute("select name from sqlite_schema where type = 'table' order by name")]


def _tables_mentioning(conn: apsw.Connection, word: str, tail: int = 3) -> list[str]:
    """Tables with any value (text or blob, FTS segments included) containing word or its tail
    (a term stored prefix-compressed in an FTS5 leaf keeps only its tail)."""
    needles = (word.encode(), word[tail:].encode())
    found = []
    for table in _tables(conn):
        for row in conn.execute(f'select * from "{table}"'):
            cells = [c.encode("utf-8", "surrogatepass") if isinstance(c, str) else c for c in row]
            if any(isinstance(c, bytes) and any(n in c for n in needles) for c in cells):
                found.append(table)
                break
    return found


def _ids(conn: apsw.Connection) -> dict[str, set[int]]:
    """The ids each table and index holds, vec0's own rowid table included."""
    queries = {
        "turns": 'select "id" from "turns"', "turns_fts": "select rowid from turns_fts",
        "turns_vec": "select turn_id from turns_vec", "turns_vec_rowids": "select rowid from turns_vec_rowids",
        "atoms": 'select "id" from "atoms"', "atoms_fts": "select rowid from atoms_fts",
        "atoms_vec": "select atom_id from atoms_vec", "atoms_vec_rowids": "select rowid from atoms_vec_rowids",
        "atom_sources.atom_id": "select atom_id from atom_sources",
        "atom_sources.turn_id": "select turn_id from atom_sources",
    }
    return {name: {r[0] for r in conn.execute(sql)} for name, sql in queries.items()}


def _raw_bytes(mem: memdb.Memory, path: Path) -> bytes:
    mem.conn.execute("pragma wal_checkpoint(truncate)")
    wal = Path(f"{path}-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


@pytest.fixture
def world(mem):
    """alice holds the secrets; bob holds ordinary words that must survive alice's forgetting."""
    bob = mem.add([{"content": f"bob takes the harbour ferry at {i}"} for i in range(40)], user="bob")
    alice = mem.add([
        {"content": f"my locker code word is {SECRET}"},
        {"content": "I also take the harbour ferry"},
        {"content": "the weather was fine"},
    ], user="alice")
    atoms = {
        "only_first": _absorb(mem, "alice", f"{ATOM_SECRET} locker", [alice[0]]),
        "first_and_second": _absorb(mem, "alice", "harbour ferry rides", [alice[0], alice[1]]),
        "bob": _absorb(mem, "bob", "harbour ferry", bob[:2]),
    }
    mem.add([{"content": f"bob again {i}"} for i in range(5)], user="bob")  # alice's rows are not the last written
    return {"alice": alice, "bob": bob, "atoms": atoms}


def test_forget_user_removes_every_row_index_entry_and_shadow_row(mem, world):
    bob_before = {name: ids - set(world["alice"]) for name, ids in _ids(mem.conn).items()}
    assert _tables_mentioning(mem.conn, SECRET)  # the search below can find the word when it is there
    assert {"turns": 3, "atoms": 2} == mem.forget(user="alice")
    held = _ids(mem.conn)
    alice_atoms = {world["atoms"]["only_first"], world["atoms"]["first_and_second"]}
    for name, ids in held.items():
        assert not ids & (alice_atoms if name.startswith("atom") and "turn" not in name else set(world["alice"]))
    assert [] == _tables_mentioning(mem.conn, SECRET) + _tables_mentioning(mem.conn, ATOM_SECRET)
    assert [] == _tables_mentioning(mem.conn, "alice", tail=0)  # vec0 partitions and atom subjects too
    assert [] == mem.search(f"{SECRET} harbour ferry", user="alice")
    assert {"turns": 0, "atoms": 0} == {k: mem.stats(user="alice")[k] for k in ("turns", "atoms")}
    assert bob_before["turns"] == held["turns"] == held["turns_fts"] == held["turns_vec"]
    assert world["atoms"]["bob"] in held["atoms"] & held["atoms_fts"] & held["atoms_vec"]
    assert [] == mem.conn.execute("pragma foreign_key_check").fetchall()


def test_forget_turn_removes_it_and_atoms_with_no_other_source(mem, world):
    first, second, _ = world["alice"]
    assert {"turns": 1, "atoms": 1} == mem.forget(turn_id=first, user="alice")
    held = _ids(mem.conn)
    gone, kept = world["atoms"]["only_first"], world["atoms"]["first_and_second"]
    for name in ("turns", "turns_fts", "turns_vec", "turns_vec_rowids", "atom_sources.turn_id"):
        assert first not in held[name]
    for name in ("atoms", "atoms_fts", "atoms_vec", "atoms_vec_rowids", "atom_sources.atom_id"):
        assert gone not in held[name] and kept in held[name]
    assert [second] == mem.get(kept, user="alice").turn_ids  # still stands, on its remaining evidence
    assert [] == _tables_mentioning(mem.conn, SECRET) + _tables_mentioning(mem.conn, ATOM_SECRET)
    assert second in held["turns_fts"] and second in held["turns_vec"]


def test_forget_atom_removes_it_and_keeps_its_turns(mem, world):
    atom_id = world["atoms"]["only_first"]
    assert {"turns": 0, "atoms": 1} == mem.forget(atom_id=atom_id, user="alice")
    held = _ids(mem.conn)
    for name in ("atoms", "atoms_fts", "atoms_vec", "atoms_vec_rowids", "atom_sources.atom_id"):
        assert atom_id not in held[name]
    assert [] == _tables_mentioning(mem.conn, ATOM_SECRET)
    assert set(world["alice"]) <= held["turns"] & held["turns_fts"] & held["turns_vec"]
    with pytest.raises(memdb.NotFound):
        mem.get(atom_id, user="alice")


@pytest.mark.parametrize("bulk", [False, True], ids=["in place", "bulk"])
@pytest.mark.parametrize("how", ["user", "turn_id"])
def test_forgotten_text_and_vectors_are_gone_from_the_raw_file(mem, world, db_path, monkeypatch, how, bulk):
    if bulk:  # big deletes take the other path (tombstones, then one optimize): exercise it on a small file
        monkeypatch.setattr(forget, "BULK_DELETE_ROWS", 0)
    secret_turn = world["alice"][0]
    vector = mem.conn.execute("select embedding from turns_vec where turn_id = ?", (secret_turn,)).fetchone()[0]
    before = _raw_bytes(mem, db_path)
    assert SECRET.encode() in before and vector in before  # so their absence below means something
    mem.forget(**({"user": "alice"} if how == "user" else {"turn_id": secret_turn, "user": "alice"}))
    after = _raw_bytes(mem, db_path)
    for needle in (SECRET.encode(), SECRET[3:].encode(), ATOM_SECRET.encode(), ATOM_SECRET[3:].encode()):
        assert needle not in after
    assert vector not in after
    assert ["ok"] == [r[0] for r in mem.conn.execute("pragma integrity_check")]


def test_forget_user_on_reopened_file_still_scrubs(db_path, world, mem):
    # secure_delete is a per-connection pragma and FTS5 secure-delete a table setting: a new
    # connection on an old file must scrub too.
    mem.close()
    with memdb.open(db_path, embedder=mem.embedder, extract="defer") as again:
        again.forget(user="alice")
        assert SECRET.encode() not in _raw_bytes(again, db_path)


@pytest.mark.parametrize("args", [{}, {"atom_id": 1, "turn_id": 1}, {"atom_id": "1", "user": "alice"}, {"turn_id": True, "user": "alice"},
                                  {"user": 5}, {"turn_id": 1}, {"atom_id": 1}])
def test_forget_refuses_unclear_requests_and_deletes_nothing(mem, world, args):
    before = _ids(mem.conn)
    with pytest.raises(memdb.InvalidInput):
        mem.forget(**args)
    assert before == _ids(mem.conn)


def test_forget_of_an_unknown_id_is_not_found(mem, world):
    with pytest.raises(memdb.NotFound):
        mem.forget(turn_id=10_000, user="alice")
    with pytest.raises(memdb.NotFound):
        mem.forget(atom_id=10_000, user="alice")


def test_forgetting_one_side_of_a_conflict_leaves_the_other_plainly_active(mem):
    # "conflicting" is derived from the pair; with one side forgotten there is nothing to ask about.
    first, second = mem.add([{"content": "I live in Lisbon"}, {"content": "I live in Porto"}], user="ana")
    kept = _absorb(mem, "ana", "Porto", [second])
    gone = _absorb(mem, "ana", "Lisbon", [first])
    with connection.write(mem.conn):
        absorb.mark_conflict(mem.conn, gone, kept, "2026-05-01T10:00:00")
    assert "conflicting" == mem.get(kept, user="ana").status
    mem.forget(turn_id=first, user="ana")
    assert [] == mem.conn.execute("select * from atom_conflicts").fetchall()
    assert "active" == mem.get(kept, user="ana").status
    assert "conflicts" not in mem.context("where does ana live Porto", user="ana")


def _chain(mem: memdb.Memory, user: str, cities: list[str]) -> tuple[list[int], list[int]]:
    """One turn and one atom per city, each version superseding the one before."""
    turns = mem.add([{"content": f"I live in {c}", "ts": f"2026-0{i + 1}-01T10:00:00"} for i, c in enumerate(cities)],
                    user=user)
    atoms = [_absorb(mem, user, city, [turn]) for city, turn in zip(cities, turns)]
    with connection.write(mem.conn):
        for i in range(1, len(atoms)):
            absorb.supersede(mem.conn, atoms[i - 1], by=atoms[i], at=f"2026-0{i + 1}-01T10:00:00")
    return turns, atoms


def test_forgetting_the_newest_version_lets_the_one_it_replaced_hold_again(mem):
    turns, (paris, berlin) = _chain(mem, "ana", ["Paris", "Berlin"])
    mem.forget(turn_id=turns[1], user="ana")
    old = mem.get(paris, user="ana")
    # Nothing left says Ana moved: Paris holds, and nothing keeps the forgotten move's date.
    assert ("active", None, None) == (old.status, old.superseded_by, old.valid_to)
    assert [paris] == [a.id for a in mem.profile("ana")]
    assert [(paris, 1)] == mem.conn.execute("select atom_id, active from atoms_vec").fetchall()


def test_forgetting_a_middle_version_links_its_predecessor_to_its_successor(mem):
    turns, (paris, berlin, rome) = _chain(mem, "ana", ["Paris", "Berlin", "Rome"])
    mem.forget(atom_id=berlin, user="ana")
    old = mem.get(paris, user="ana")
    assert ("superseded", rome, "2026-03-01T10:00:00") == (old.status, old.superseded_by, old.valid_to)
    assert [paris, rome] == [a.id for a in mem.history(rome, user="ana")]


def _merged_atom(mem: memdb.Memory, words: list[str]) -> list[int]:
    """alice says each word in its own turn, and one atom merges every one of those turns: its
    FTS row is rewritten at each merge (issue 15: the rewrites kept the words in old segments)."""
    turns = mem.add([{"content": f"my note {w}"} for w in words], user="alice")
    for turn in turns:
        _absorb(mem, "alice", "ferry rides", [turn])
    return turns


def _words_in(raw: bytes, words: list[str]) -> list[str]:
    return [w for w in words if w[3:].encode() in raw]


WORDS = [f"zq{i}wordx{chr(97 + i)}" for i in range(20)]


@pytest.mark.parametrize("how", ["user", "turn_id"])
def test_forget_after_merges_leaves_no_word_of_the_merged_turns(mem, db_path, how):
    mem.add([{"content": f"bob takes the ferry {i}"} for i in range(10)], user="bob")
    turns = _merged_atom(mem, WORDS)
    assert 1 == len(mem.profile("alice"))  # one atom, merged from every turn
    if how == "user":
        mem.forget(user="alice")
        gone = WORDS
    else:
        mem.forget(turn_id=turns[0], user="alice")
        gone = WORDS[:1]
    assert [] == _words_in(_raw_bytes(mem, db_path), gone)
    assert [] == [t for t in _tables(mem.conn) for w in gone if t in _tables_mentioning(mem.conn, w)]


def test_bulk_forget_leaves_no_term_prefix_in_the_idx_tables(mem, db_path):
    # Many rows, one optimize, then a bulk forget: FTS5's %_idx b-tree keeps the first term of
    # each leaf page, and its interior pages copies of them, after the leaves are deleted.
    words = [f"pv{i:03d}secret{chr(97 + i % 26)}" for i in range(600)]
    mem.add([{"content": f"plain words number {i}"} for i in range(600)], user="bob")
    for i in range(0, 600, 100):
        mem.add([{"content": f"my word {w} and more"} for w in words[i:i + 100]], user="alice")
    for table in ("turns_fts", "atoms_fts"):
        mem.conn.execute(f"insert into {table} ({table}) values ('optimize')")
    mem.forget(user="alice")
    assert [] == [t for t in _tables(mem.conn) if t.endswith("_idx") and _tables_mentioning(mem.conn, "pv0", 0)]
    assert [] == _words_in(_raw_bytes(mem, db_path), words)
