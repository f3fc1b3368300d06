"""`memdb browse`: the file in Datasette, driven with Datasette's own test client on a small file
built with the public API (a scripted model, the hashing embedder): the canned queries, the
search box in Chinese and English, hidden tables, decoded cells, the --user filter, and a file
that is never written."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import memdb
from memdb import browse
from memdb.cli import main
from memdb.db.connection import SCHEMA_VERSION
from tests.conftest import HashEmbedder, ScriptedLLM


def by_turn(script: dict[str, list[str]]) -> ScriptedLLM:
    """A model that replies with the atoms scripted for the turn being read (the prompt's "* "
    line), so each turn yields its own atoms whatever the turns around it."""

    def reply(messages: list[dict[str, str]]) -> str:
        current = [line for line in messages[-2]["content"].splitlines() if line.startswith("* ")][-1]
        atoms = next((atoms for said, atoms in script.items() if said in current), [])
        return json.dumps({"a": atoms}, ensure_ascii=False)

    return ScriptedLLM(reply)


SCRIPT = {
    "I really like coffee in the morning.": ["Alice | likes | coffee"],
    "I hate coffee now, it hurts my stomach.": ["Alice | hates | coffee"],
    "我下周六去杭州看西湖。": ["小王 | 去杭州看 | 西湖 | on 2026-03-14"],
    "我很喜欢巧克力蛋糕。": ["小王 | 喜欢 | 巧克力蛋糕"],
}


def build(path: Path) -> dict[str, int]:
    """alice likes coffee, then hates it (a supersession); wang, in Chinese, plans a trip (an
    event) and likes chocolate cake. Returns the atom and turn ids by name."""
    with memdb.open(path, embedder=HashEmbedder(), llm=by_turn(SCRIPT),
                    settings=memdb.Settings(extract_fill=False)) as mem:
        like_turn, hate_turn = (mem.add([{"role": "user", "name": "Alice", "content": said, "ts": ts}],
                                        user="alice", session="s1")[0]
                                for said, ts in [("I really like coffee in the morning.", "2026-03-01T09:00:00"),
                                                 ("I hate coffee now, it hurts my stomach.", "2026-03-05T09:00:00")])
        trip_turn, cake_turn = mem.add([
            {"role": "user", "name": "小王", "content": "我下周六去杭州看西湖。", "ts": "2026-03-06T10:00:00"},
            {"role": "user", "name": "小王", "content": "我很喜欢巧克力蛋糕。", "ts": "2026-03-06T10:01:00"},
        ], user="wang", session="s2")
        # A forgotten turn: FTS5 secure-delete rewrites the index in a format SQLite < 3.42 refuses,
        # so the search tests also show that browse reads it wherever Python's SQLite is older.
        mem.forget(user="alice", turn_id=mem.add([{"role": "user", "content": "Forget this."}], user="alice")[0])
        (hates,) = mem.profile("alice")
        likes, _ = (a.id for a in mem.history(hates.id, user="alice"))
        (trip,) = mem.events("wang")
        (cake,) = mem.profile("wang")
    return {"likes": likes, "hates": hates.id, "trip": trip.id, "cake": cake.id, "like_turn": like_turn,
            "hate_turn": hate_turn, "trip_turn": trip_turn, "cake_turn": cake_turn}


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict[str, int]]:
    path = tmp_path_factory.mktemp("browse") / "mem.db"
    return path, build(path)


def get(instance, path: str):
    return asyncio.run(instance.client.get(path))


def rows(instance, path: str) -> list[dict]:
    """The rows of a table, view or canned query page, from its JSON."""
    page, _, query = path.partition("?")
    response = get(instance, f"{page}.json?_shape=array&{query}")
    assert 200 == response.status_code, response.text
    return response.json()


def test_every_canned_query_returns_the_rows_it_promises(made):
    path, ids = made
    ds = browse.datasette(path)
    history = [(r["id"], r["status"], r["text"], r["replaced_at"], r["replaced_by"], r["replaced_by_text"],
                r["replaced_because"]) for r in rows(ds, f"/mem/atom_history?atom_id={ids['likes']}")]
    assert [(ids["likes"], "superseded", "Alice likes coffee", "2026-03-05T09:00:00", ids["hates"],
             "Alice hates coffee", "I hate coffee now, it hurts my stomach."),
            (ids["hates"], "active", "Alice hates coffee", None, None, None, None)] == history
    assert history == [(r["id"], r["status"], r["text"], r["replaced_at"], r["replaced_by"], r["replaced_by_text"],
                        r["replaced_because"]) for r in rows(ds, f"/mem/atom_history?atom_id={ids['hates']}")]
    assert [(ids["trip_turn"], "小王", "我下周六去杭州看西湖。", "2026-03-06T10:00:00")] == [
        (r["turn_id"], r["speaker"], r["content"], r["ts"]) for r in rows(ds, f"/mem/atom_sources?atom_id={ids['trip']}")]
    assert [(ids["hates"], "preference", "Alice", "hates", "coffee", "dislike")] == [
        (r["id"], r["kind"], r["subject"], r["predicate"], r["object"], r["sentiment"])
        for r in rows(ds, "/mem/profile?user=alice")]
    assert [("小王喜欢巧克力蛋糕", "like")] == [(r["text"], r["sentiment"]) for r in rows(ds, "/mem/profile?user=wang")]
    assert [("2026-03-06", "new", ids["trip"], None), ("2026-03-06", "new", ids["cake"], None),
            ("2026-03-05", "new", ids["hates"], None), ("2026-03-05", "superseded", ids["likes"], ids["hates"]),
            ("2026-03-01", "new", ids["likes"], None)] == [
        (r["day"], r["change"], r["atom_id"], r["replaced_by"]) for r in rows(ds, "/mem/this_week")]
    # from a date: only what changed since
    assert [("2026-03-06", ids["trip"]), ("2026-03-06", ids["cake"])] == [
        (r["day"], r["atom_id"]) for r in rows(ds, "/mem/this_week?since=2026-03-06")]
    assert [("2026-03-14", "下周六", "小王去杭州看西湖", ids["trip"])] == [
        (r["date"], r["said_as"], r["text"], r["id"]) for r in rows(ds, "/mem/events?user=wang")]
    assert [] == rows(ds, "/mem/events?user=alice")


def test_the_search_box_finds_chinese_and_english_words(made):
    path, ids = made
    ds = browse.datasette(path)
    # 巧克力 is three characters: memdb indexed its characters and bigrams, and so is the query
    for word, expected in [("巧克力", [ids["cake"]]), ("西湖", [ids["trip"]]), ("杭州", [ids["trip"]]),
                           ("coffee", [ids["hates"], ids["likes"]]), ("Coffee", [ids["hates"], ids["likes"]]),
                           ("stomach", [ids["hates"]]),  # a word of the atom's source turn
                           ("tea", []), ("巧克力 coffee", [])]:
        assert expected == [r["id"] for r in rows(ds, f"/mem/atoms_v?_search={word}")], word
    assert [{"k": "version", "v": 5}] == rows(ds, "/mem?sql=select+k,+v+from+turns_fts_config+where+k='version'")
    assert [ids["trip_turn"]] == [r["id"] for r in rows(ds, "/mem/turns_v?_search=下周六")]
    assert [ids["hate_turn"]] == [r["id"] for r in rows(ds, "/mem/turns?_search=hurts")]
    # FTS5 syntax typed into the box is taken as words, never as an error
    for typed in ['coffee"', "coffee OR", "NEAR(", "*", ""]:
        assert 200 == get(ds, f"/mem/atoms_v.json?_search={typed}").status_code, typed


def test_the_box_query_is_segmented_like_the_index_and_quoted():
    from memdb.browse.plugin import search_expression

    assert '"巧" "克" "力" "巧克" "克力"' == search_expression("巧克力")
    assert '"Rust" "杭" "州" "杭州"' == search_expression("Rust杭州")
    assert '"coffee""" "OR" "NEAR(x"' == search_expression('coffee" OR NEAR(x')
    assert '""' == search_expression("  ")  # matches nothing, as an empty box does in Datasette


def test_shadow_and_lookup_tables_are_hidden(made):
    path, _ = made
    listing = get(browse.datasette(path), "/mem.json").json()
    shown = sorted(t["name"] for t in listing["tables"] if not t["hidden"])
    hidden = {t["name"] for t in listing["tables"] if t["hidden"]}
    assert ["atom_conflicts", "atom_sources", "atoms", "meta", "persona", "scenario_atoms", "scenarios", "turns"] == shown
    assert {"kinds", "sentiments", "statuses", "roles", "states", "polarities", "record_keys", "sqlite_sequence",
            "atoms_fts", "atoms_fts_data", "turns_fts_config", "atoms_vec", "atoms_vec_chunks",
            "turns_vec_rowids"} <= hidden
    assert all(n.startswith(("atoms_fts", "turns_fts", "atoms_vec", "turns_vec")) for n in hidden - {
        "kinds", "sentiments", "statuses", "roles", "states", "polarities", "record_keys", "sqlite_sequence"})
    assert {"atoms_v", "turns_v", "atom_sources_v", "atom_records_v", "atom_fields_v", "scenarios_v",
            "scenario_atoms_v", "persona_v"} == {v["name"] for v in listing["views"]}
    page = get(browse.datasette(path), "/mem").text
    assert 'Start with <a href="/mem/atoms_v">Atoms</a> (what memory holds)' in page
    assert "One atom&#39;s history" in page
    assert "atoms_fts_data" not in page and "statuses" not in page
    assert "Atoms: what memory holds" in get(browse.datasette(path), "/mem/atoms_v").text


def test_facets_on_user_kind_status_and_speaker(made):
    path, _ = made
    ds = browse.datasette(path)
    facets = get(ds, "/mem/atoms_v.json?_size=0").json()["facet_results"]
    assert {"alice": 2, "wang": 2} == {r["value"]: r["count"] for r in facets["user"]["results"]}
    assert {"preference": 3, "event": 1} == {r["value"]: r["count"] for r in facets["kind"]["results"]}
    assert {"active": 3, "superseded": 1} == {r["value"]: r["count"] for r in facets["status"]["results"]}
    speakers = get(ds, "/mem/turns_v.json?_size=0").json()["facet_results"]["speaker"]["results"]
    assert {"Alice": 2, "小王": 2} == {r["value"]: r["count"] for r in speakers}


def test_records_are_decoded_enums_named_and_chinese_shown_as_written(made):
    import markupsafe  # Datasette's, as it escapes cells

    path, ids = made
    ds = browse.datasette(path)
    page = get(ds, "/mem/atoms?user=wang").text
    record = '{"kind": "preference", "subject": "小王", "predicate": "喜欢", "object": "巧克力蛋糕", "lang": "zh", ' \
             '"attribute": "likes", "value": "巧克力蛋糕", "sentiment": "like"}'
    assert str(markupsafe.escape(record)) in page
    assert '<a href="/mem/kinds/1">preference</a>' in page and '<a href="/mem/statuses/0">active</a>' in page
    assert "&lt;Binary" not in page
    assert "小王喜欢巧克力蛋糕" in get(ds, f"/mem/atoms/{ids['cake']}").text
    assert '<a href="/mem/roles/0">user</a>' in get(ds, "/mem/turns").text


def test_views_and_queries_link_an_atom_to_its_history_and_a_turn_to_its_row(made):
    path, ids = made
    ds = browse.datasette(path)
    history = f'<a href="/mem/atom_history?atom_id={ids["hates"]}" title="its history">{ids["hates"]}</a>'
    turn = f'<a href="/mem/turns/{ids["hate_turn"]}" title="the turn">{ids["hate_turn"]}</a>'
    atoms = get(ds, "/mem/atoms_v?user=alice").text
    assert history in atoms and turn in atoms  # the id, the superseded_by of the old version, turn_ids
    assert atoms.count(history) == 2
    assert history in get(ds, "/mem/this_week").text
    assert turn in get(ds, f"/mem/atom_history?atom_id={ids['likes']}").text
    # the stored tables keep Datasette's own links (row pages, foreign-key labels)
    assert "atom_history" not in get(ds, "/mem/atoms").text


def test_with_user_every_page_and_query_keeps_to_that_user(made):
    path, ids = made
    ds = browse.datasette(path, user="wang")
    assert {"wang"} == {r["user"] for r in rows(ds, "/mem/atoms_v")}
    assert {"wang"} == {r["user"] for r in rows(ds, "/mem/turns")}
    assert {ids["trip"], ids["cake"]} == {r["atom_id"] for r in rows(ds, "/mem/atom_sources_v")}
    assert [] == rows(ds, "/mem/atoms_v?_search=coffee")
    assert [] == rows(ds, f"/mem/atom_history?atom_id={ids['likes']}")
    assert [] == rows(ds, f"/mem/atom_sources?atom_id={ids['hates']}")
    assert ["小王喜欢巧克力蛋糕"] == [r["text"] for r in rows(ds, "/mem/profile")]  # no user to type
    assert {"wang"} == {r["user"] for r in rows(ds, "/mem/this_week")}
    assert [ids["trip"]] == [r["id"] for r in rows(ds, "/mem/events")]
    assert 403 == get(ds, "/mem.db").status_code  # no download of everyone's file


def test_browsing_never_writes_the_file(tmp_path):
    path = tmp_path / "mem.db"
    ids = build(path)
    before = path.read_bytes()
    ds = browse.datasette(path)
    pages = ["/", "/mem", "/mem/atoms_v", "/mem/turns_v", "/mem/atom_records_v", "/mem/atoms", "/mem/turns",
             f"/mem/atoms/{ids['cake']}", "/mem/scenarios", "/mem/persona_v", "/mem/atoms_v?_search=巧克力",
             "/mem/turns_v?_search=coffee", f"/mem/atom_history?atom_id={ids['likes']}", "/mem/this_week",
             "/mem/profile?user=alice", "/mem/events?user=wang", f"/mem/atom_sources?atom_id={ids['hates']}",
             "/mem?sql=select+count(*)+from+atoms_vec", "/mem/atoms_v.json"]
    assert [200] * len(pages) == [get(ds, p).status_code for p in pages]
    # a write through the SQL page is refused: the file is open immutable
    assert 400 == get(ds, "/mem?sql=delete+from+atoms").status_code
    assert hashlib.sha256(before).hexdigest() == hashlib.sha256(path.read_bytes()).hexdigest()
    assert ["mem.db"] == sorted(p.name for p in tmp_path.iterdir())  # no -wal, -shm or journal made


def test_a_writers_wal_is_read_not_checkpointed(tmp_path):
    path = tmp_path / "mem.db"
    build(path)
    with memdb.open(path, embedder=None, extract="defer") as writer:
        before = path.read_bytes()
        (turn,) = writer.add([{"role": "user", "content": "A note still in the WAL."}], user="alice")
        assert Path(f"{path}-wal").stat().st_size > 0
        found = rows(browse.datasette(path), "/mem/turns_v?_search=note")
        assert [turn] == [r["id"] for r in found]
        assert before == path.read_bytes()


def test_bad_files_and_arguments_get_a_clear_error(tmp_path, capsys):
    foreign = tmp_path / "other.db"
    sqlite3.connect(foreign).execute("create table t (x)").connection.close()
    made = tmp_path / "mem.db"
    build(made)
    older, newer = tmp_path / "older.db", tmp_path / "newer.db"
    for copy, version in [(older, SCHEMA_VERSION - 1), (newer, 99)]:
        copy.write_bytes(made.read_bytes())
        sqlite3.connect(copy).execute(f"pragma user_version = {version}").connection.close()
    cases = [
        (["browse", str(tmp_path / "missing.db")], "missing.db does not exist; check the path"),
        (["browse", str(tmp_path)], "is a directory; give a memdb file"),
        (["browse", str(foreign)], "other.db is not a memdb file (application_id 0)"),
        (["browse", str(made), "--user", ""], "--user is empty"),
        (["browse", str(older)],
         f"schema version {SCHEMA_VERSION - 1}, and this memdb reads {SCHEMA_VERSION}: open it once with memdb"),
        (["browse", str(newer)], f"schema version 99, and this memdb reads {SCHEMA_VERSION}: upgrade memdb"),
    ]
    for argv, message in cases:
        assert 2 == main(argv), argv
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["browse", str(made), "--port", "70000"])
    assert "70000 is not from 1 to 65535" in capsys.readouterr().err


def test_without_datasette_the_command_says_how_to_get_it(monkeypatch, made, capsys):
    path, _ = made
    monkeypatch.setitem(sys.modules, "datasette.app", None)  # import fails as if not installed
    assert 2 == main(["browse", str(path)])
    assert "memdb browse needs Datasette: pip install 'memdb-sqlite[browse]'" in capsys.readouterr().err


def test_the_command_serves_the_file_on_localhost(made):
    path, _ = made
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-c", "import sys; from memdb.cli import main; sys.exit(main())", "browse", str(path),
         "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline, listing = time.monotonic() + 60, None
        while listing is None and time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/mem/atoms_v.json?_shape=array", timeout=5) as r:
                    listing = json.load(r)
            except OSError:
                time.sleep(0.2)
        assert listing is not None, server.stderr.read() if server.poll() is not None else "no answer in 60 s"
        assert {"Alice hates coffee", "小王喜欢巧克力蛋糕"} <= {r["text"] for r in listing}
        # a second server on the same port is refused with a readable message
        again = subprocess.run([sys.executable, "-c", "import sys; from memdb.cli import main; sys.exit(main())",
                                "browse", str(path), "--port", str(port)], capture_output=True, text=True, timeout=60)
        assert 2 == again.returncode and f"port {port} on 127.0.0.1 is taken" in again.stderr
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert f"memdb browse: http://127.0.0.1:{port}/mem" in server.stdout.read()
