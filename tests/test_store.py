"""The file itself: schema, migrations, append-only L0, FTS (English and Chinese), vec0, views."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess

import apsw
import pytest

import memdb
from memdb.db import connection
from memdb.lifecycle import absorb
from memdb import vecmath

from tests.conftest import HashEmbedder

ALICE = [
    {"role": "user", "name": "Alice", "content": "We use PostgreSQL and write all SQL by hand.", "ts": "2026-10-05T10:00:00"},
    {"role": "assistant", "content": "Got it, no ORM then.", "ts": "2026-10-05T10:00:05"},
    {"role": "user", "name": "Alice", "content": "我喜欢喝咖啡，数据平台很稳定。", "ts": "2026-10-06T09:00:00"},
]


def test_new_file_has_schema_meta_and_ids(mem, db_path):
    conn = mem.conn
    assert connection.APPLICATION_ID == conn.execute("pragma application_id").fetchone()[0]
    assert connection.SCHEMA_VERSION == conn.execute("pragma user_version").fetchone()[0]
    assert "wal" == conn.execute("pragma journal_mode").fetchone()[0]
    assert 1 == conn.execute("pragma foreign_keys").fetchone()[0]
    assert str(connection.SCHEMA_VERSION) == connection.get_meta(conn, "schema_version")
    assert "hash-test" == connection.get_meta(conn, "embedder_name")
    assert "64" == connection.get_meta(conn, "embedder_dim")
    names = {r[0] for r in conn.execute("select name from sqlite_schema")}
    assert {"turns", "atoms", "atom_sources", "atoms_fts", "turns_fts", "atoms_vec", "turns_vec",
            "atoms_v", "turns_v", "kinds", "sentiments", "statuses", "roles", "states", "meta"} <= names


def test_add_returns_ids_in_order_and_stores_verbatim(mem):
    ids = mem.add(ALICE, user="alice", session="s1")
    assert 3 == len(ids) and ids == sorted(ids)
    rows = mem.turns(ids, user="alice")
    assert [m["content"] for m in ALICE] == [r["content"] for r in rows]
    assert [1, 2, 3] == [r["seq"] for r in rows]
    assert ["user", "assistant", "user"] == [r["role"] for r in rows]
    assert "2026-10-05T10:00:00" == rows[0]["ts"]
    assert ["pending"] * 3 == [r["state"] for r in rows]
    more = mem.add([{"role": "user", "content": "later"}], user="alice", session="s1")
    assert 4 == mem.turns(more, user="alice")[0]["seq"]


def test_timezone_aware_ts_is_stored_in_utc_and_marked_so(mem):
    (tid,) = mem.add([{"content": "x", "ts": "2026-10-05T12:00:00+02:00"}], user="u")
    assert "2026-10-05T10:00:00Z" == mem.turns([tid], user="u")[0]["ts"]


def test_a_utc_time_stays_marked_in_views_and_context_and_a_naive_one_unmarked(mem):
    said = [{"content": "Happy new year from Singapore!", "ts": "2026-01-01T07:00:00+08:00"},
            {"content": "Happy new year from somewhere", "ts": "2026-01-01T07:00:00"}]
    aware, naive = mem.add(said, user="u")
    assert ["2025-12-31T23:00:00Z", "2026-01-01T07:00:00"] == [t["ts"] for t in mem.turns([aware, naive], user="u")]
    assert [("2025-12-31T23:00:00Z",), ("2026-01-01T07:00:00",)] == mem.conn.execute(
        "select ts from turns_v order by id").fetchall()
    block = mem.context("happy new year", user="u", layer="turns")
    assert {"2025-12-31 UTC · user: Happy new year from Singapore!",
            "2026-01-01 · user: Happy new year from somewhere"} == set(block.splitlines()[1:])  # after the header
    (clock,) = mem.add([{"content": "no time given"}], user="u")
    assert mem.turns([clock], user="u")[0]["ts"].endswith("Z")  # the time of add, in UTC


def test_turn_content_is_append_only(mem):
    (tid,) = mem.add([{"content": "the original words"}], user="alice")
    with pytest.raises(apsw.ConstraintError, match="append-only"):
        mem.conn.execute('update "turns" set "content" = ? where "id" = ?', ("rewritten", tid))
    assert "the original words" == mem.turns([tid], user="alice")[0]["content"]


@pytest.mark.parametrize("query, expected_index", [("咖啡", 2), ("数据", 2), ("PostgreSQL", 0), ("postgres sql hand", 0)])
def test_keyword_search_finds_english_and_chinese_words(db_path, query, expected_index):
    with memdb.open(db_path, embedder=None, extract="defer") as mem:
        ids = mem.add(ALICE, user="alice")
        hits = mem.search(query, user="alice", layer="turns")
    assert hits and ids[expected_index] == hits[0].id


def test_chinese_two_characters_not_matched_across_words(db_path):
    with memdb.open(db_path, embedder=None, extract="defer") as mem:
        mem.add([{"content": "我喜欢喝咖啡"}], user="u")
        assert [] == mem.search("啡我", user="u", layer="turns")


def test_vector_knn_is_scoped_by_user(mem):
    mem.add([{"content": "my cat is called Miso"}], user="alice")
    (bob_turn,) = mem.add([{"content": "my cat is called Miso"}], user="bob")
    query = vecmath.as_blob(mem.embedder.embed(["cat Miso"])[0])
    rows = mem.conn.execute(
        "select turn_id from turns_vec where embedding match ? and k = 10 and user = ?", (query, "bob")
    ).fetchall()
    assert [(bob_turn,)] == rows
    hits = mem.search("cat Miso", user="bob")
    assert [bob_turn] == [h.id for h in hits]


def test_views_are_readable_without_extensions(mem, db_path):
    mem.add(ALICE, user="alice", session="s1")
    mem.conn.execute("pragma wal_checkpoint(truncate)")
    # Python's own sqlite3 module: a stock SQLite with neither apsw nor sqlite-vec.
    plain = sqlite3.connect(db_path)
    rows = plain.execute("select role, state, content from turns_v order by id").fetchall()
    plain.close()
    assert ("user", "pending", ALICE[0]["content"]) == rows[0]
    if shutil.which("sqlite3"):
        out = subprocess.run(["sqlite3", str(db_path), "select role, speaker from turns_v order by id limit 1; "
                              "select count(*) from atoms_v; select name from kinds order by code;"],
                             capture_output=True, text=True, check=True).stdout
        assert "user|Alice\n0\nfact\npreference\nconstraint\nevent\n" == out


def test_fts_is_searchable_from_stock_sqlite(mem, db_path):
    (tid,) = mem.add([{"content": "我喜欢喝咖啡"}], user="alice")
    mem.conn.execute("pragma wal_checkpoint(truncate)")
    plain = sqlite3.connect(db_path)
    rows = plain.execute("select rowid from turns_fts where turns_fts match ?", ('"咖啡"',)).fetchall()
    plain.close()
    assert [(tid,)] == rows


def test_newer_schema_is_refused_and_file_untouched(db_path):
    memdb.open(db_path, embedder=None).close()
    conn = apsw.Connection(str(db_path))
    conn.execute("pragma user_version = 99")
    conn.close()
    before = db_path.read_bytes()
    with pytest.raises(memdb.SchemaError, match="newer"):
        memdb.open(db_path, embedder=None)
    assert before == db_path.read_bytes()


@pytest.mark.parametrize("sql", ["create table t (x)", "pragma application_id = 1234"],
                         ids=["its own tables", "no table but its application_id"])
def test_foreign_sqlite_file_is_refused_untouched(tmp_path, sql):
    # Another application's file, even a new one with no table yet that says whose it is.
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute(sql)
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(memdb.SchemaError, match="not a memdb file"):
        memdb.open(path, embedder=None)
    assert before == path.read_bytes()


def test_an_empty_path_is_refused():
    # SQLite reads "" as a private temporary file: every acknowledged turn would vanish at close.
    with pytest.raises(memdb.InvalidInput, match="path is empty"):
        memdb.open("", embedder=None)


def test_a_version_1_file_is_migrated_to_fts_secure_delete(db_path):
    memdb.open(db_path, embedder=None).close()
    conn = apsw.Connection(str(db_path))  # what a version-1 file looks like: secure-delete off, no record views
    for table in ("atoms_fts", "turns_fts"):
        conn.execute(f"delete from {table}_config where k = 'secure-delete'")
    _drop_slots(conn)
    conn.execute('drop view "atom_records_v"; drop view "atom_fields_v"; drop table "record_keys"')
    _drop_layers(conn)
    conn.execute("pragma user_version = 1")
    conn.close()
    with memdb.open(db_path, embedder=None) as mem:
        assert connection.SCHEMA_VERSION == mem.conn.execute("pragma user_version").fetchone()[0]
        for table in ("atoms_fts", "turns_fts"):
            assert [(1,)] == mem.conn.execute(f"select v from {table}_config where k = 'secure-delete'").fetchall()


def test_text_file_is_refused_untouched(tmp_path):
    path = tmp_path / "notes.db"
    path.write_bytes(b"just some notes, not a database at all\n" * 200)
    before = path.read_bytes()
    with pytest.raises(memdb.SchemaError, match="not a readable SQLite file"):
        memdb.open(path, embedder=None)
    assert before == path.read_bytes()


def test_embedder_dimension_mismatch_says_both(db_path):
    memdb.open(db_path, embedder=HashEmbedder(64)).close()
    with pytest.raises(memdb.EmbedderMismatch) as err:
        memdb.open(db_path, embedder=HashEmbedder(32, name="small"))
    assert "64-dimensional" in str(err.value) and "32-dimensional" in str(err.value)


def test_reembed_rebuilds_vectors_only(db_path):
    with memdb.open(db_path, embedder=HashEmbedder(64), extract="defer") as mem:
        ids = mem.add(ALICE, user="alice")
    with memdb.open(db_path, embedder=None, extract="defer") as mem:
        assert 3 == mem.reembed(HashEmbedder(32, name="small"))
        assert ("small", "32") == (connection.get_meta(mem.conn, "embedder_name"), connection.get_meta(mem.conn, "embedder_dim"))
        assert 3 == mem.conn.execute("select count(*) from turns_vec").fetchone()[0]
        assert [m["content"] for m in ALICE] == [r["content"] for r in mem.turns(ids, user="alice")]
    with memdb.open(db_path, embedder=HashEmbedder(32, name="small"), extract="defer") as mem:
        assert ids[2] == mem.search("咖啡", user="alice", layer="turns")[0].id


def test_memory_file_works(embedder):
    with memdb.open(":memory:", embedder=embedder, extract="defer") as mem:
        mem.add([{"content": "in memory only"}], user="u")
        assert 1 == mem.stats()["turns"]


def test_stats_counts(mem):
    mem.add(ALICE, user="alice")
    mem.add([{"content": "hello"}], user="bob")
    stats = mem.stats(user="alice")
    assert 3 == stats["turns"] and {"pending": 3} == stats["turns_by_state"]
    assert 0 == stats["atoms"] and not stats["keyword_only"]
    assert 2 == mem.stats()["users"]


def test_an_explicit_embedder_that_cannot_load_is_refused(db_path, tmp_path):
    # It used to warn and run keyword-only: turns stored without vectors, nothing said so.
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf file at all")
    with pytest.raises(memdb.EmbedderUnavailable, match="broken.gguf"):
        memdb.open(db_path, embedder=str(broken), extract="defer")
    with pytest.raises(memdb.EmbedderUnavailable):
        memdb.open(db_path, embedder="/no/such/model.gguf", extract="defer")


def test_the_bundled_embedder_that_cannot_load_degrades_to_keyword_only(db_path, monkeypatch, caplog):
    from memdb.models import embedders

    def fail(*args, **kwargs):
        raise memdb.EmbedderUnavailable("the bundled weights are missing")

    monkeypatch.setattr(embedders, "load", fail)
    with caplog.at_level("WARNING", logger="memdb"):
        with memdb.open(db_path, extract="defer") as mem:
            (tid,) = mem.add([{"content": "The staging server is called Hermes."}], user="u")
            assert [tid] == [h.id for h in mem.search("Hermes", user="u")]
            stats = mem.stats()
    assert stats["keyword_only"] and "bundled weights" in stats["embedder_error"]
    assert 1 == caplog.text.count("running keyword-only")


RECORDS = [
    {"kind": "fact", "subject": "Bob", "predicate": "works as", "object": "a software engineer in Berlin", "lang": "en"},
    {"kind": "preference", "subject": "Alice", "predicate": "喜欢", "object": "美式咖啡", "sentiment": "like",
     "domain": "drinks", "lang": "zh"},
    {"kind": "event", "subject": "team", "predicate": "shipped", "object": "v2", "date": "2026-09-30",
     "when": "last Wednesday", "outcome": "on time"},
    {"kind": "constraint", "subject": "x" * 31, "object": "y" * 32},  # the last short string, the first str8
    {"kind": "fact", "subject": "s" * 255, "object": "o" * 256 + " " + "长" * 40},  # str8's last, str16
    {"kind": "preference", "subject": "林晓", "predicate": "讨厌", "object": "虾" * 300, "sentiment": "dislike"},
    {"kind": "fact", "subject": "Ada", "object": "no longer lives in Turku", "attribute": "lives_in", "value": "Turku",
     "polarity": "ended"},
]


def test_an_atoms_fields_are_readable_with_stock_sqlite3(db_path):
    import sqlite3

    from memdb import codec
    from memdb.lifecycle import absorb

    with memdb.open(db_path, embedder=None, extract="defer") as mem:
        tids = mem.add([{"content": f"turn {i}"} for i in range(len(RECORDS))], user="u")
        with connection.write(mem.conn):
            for tid, record in zip(tids, RECORDS):
                absorb.absorb(mem.conn,
                              absorb.Incoming(user="u", record=codec.validate(record),
                                              confidence=0.9, turn_ids=[tid],
                                              ts="2026-10-01T10:00:00", vector=None),
                              absorb.Engine(mem.settings))
        stored = {row["id"]: row["record"] for row in mem.export("u") if row["type"] == "atom"}
    assert len(RECORDS) == len(stored)
    with sqlite3.connect(db_path) as plain:  # the standard library's SQLite: no extension, no msgpack
        fields: dict = {}
        for atom_id, field, value in plain.execute("select atom_id, field, value from atom_fields_v"):
            fields.setdefault(atom_id, {})[field] = value
        assert stored == fields
        plain.row_factory = sqlite3.Row
        wide = {r["id"]: {k: r[k] for k in r.keys() if k in codec.SHORT_KEYS and r[k] not in (None, "holds")}
                for r in plain.execute("select * from atom_records_v")}  # a record leaves "holds" out
    assert stored == wide


def test_a_version_1_file_gets_the_record_views(db_path):
    with memdb.open(db_path, embedder=None) as mem:
        _drop_slots(mem.conn)
        for view in ("atom_records_v", "atom_fields_v"):
            mem.conn.execute(f'drop view "{view}"')
        mem.conn.execute('drop table "record_keys"')
        _drop_layers(mem.conn)
        mem.conn.execute("pragma user_version = 1")
    with memdb.open(db_path, embedder=None) as mem:
        assert (connection.SCHEMA_VERSION, []) == (mem.conn.execute("pragma user_version").fetchone()[0],
                           mem.conn.execute("select * from atom_records_v").fetchall())


def _drop_slots(conn: apsw.Connection) -> None:
    """What a file before version 5 lacks: the slots' keys and the polarity codes."""
    conn.execute("""delete from "record_keys" where "key" in ('a', 'v', 'n'); drop table "polarities";""")


def test_a_version_4_file_shows_slots_and_its_old_atoms_hold(db_path):
    with memdb.open(db_path, embedder=None, extract="defer") as mem:
        turn = mem.add([{"content": "I live in Gdansk"}], user="ann")[0]
        with connection.write(mem.conn):
            absorb.absorb(mem.conn,
                          absorb.Incoming(user="ann", record={"kind": "fact", "subject": "ann", "predicate": "lives in",
                                                         "object": "Gdansk"},
                                          confidence=0.9, turn_ids=[turn], ts="2026-05-01T10:00:00"),
                          absorb.Engine(mem.settings))
        _drop_slots(mem.conn)
        mem.conn.execute("pragma user_version = 4")
    with memdb.open(db_path, embedder=None, extract="defer") as mem:
        assert (connection.SCHEMA_VERSION, [("Gdansk", None, "holds")]) == (
            mem.conn.execute("pragma user_version").fetchone()[0],
            mem.conn.execute('select "object", "attribute", "polarity" from "atom_records_v"').fetchall())


def _drop_layers(conn: apsw.Connection) -> None:
    """What a file before version 4 lacks: the scenario and persona tables and views."""
    for view in ("scenarios_v", "scenario_atoms_v", "persona_v"):
        conn.execute(f'drop view "{view}"')
    for table in ("scenario_atoms", "persona", "scenarios"):
        conn.execute(f'drop table "{table}"')


def test_a_version_3_file_gets_the_layers_and_builds_them_from_its_atoms(db_path, embedder):
    with memdb.open(db_path, embedder=embedder, extract="defer", settings=memdb.Settings(layers=False)) as mem:
        turn = mem.add([{"content": "I am rebuilding the payment module"}], user="ann")[0]
        for predicate, obj in (("works on", "the payment module rebuild"), ("writes", "unit tests of the payment module")):
            with connection.write(mem.conn):
                absorb.absorb(mem.conn,
                              absorb.Incoming(user="ann", record={"kind": "fact", "subject": "ann", "predicate": predicate,
                                                             "object": obj},
                                              confidence=0.9, turn_ids=[turn], ts="2026-05-01T10:00:00",
                                              vector=embedder.embed([obj])[0]),
                              absorb.Engine(mem.settings))
        _drop_slots(mem.conn)
        _drop_layers(mem.conn)
        mem.conn.execute("pragma user_version = 3")
    with memdb.open(db_path, embedder=embedder, extract="defer") as mem:
        assert (connection.SCHEMA_VERSION, []) == (mem.conn.execute("pragma user_version").fetchone()[0],
                                                   mem.conn.execute("select * from scenarios_v").fetchall())
        assert {"users": 1, "atoms_placed": 2} == mem.build_layers()
        assert [[1, 2]] == [s.atom_ids for s in mem.scenarios(user="ann")]
        assert 2 == len(mem.persona(user="ann").splitlines())
