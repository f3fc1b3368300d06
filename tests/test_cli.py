"""The memdb command: each subcommand end to end on a temporary file (no model needed)."""

from __future__ import annotations

import json

import pytest

from memdb import cli
from tests.conftest import HashEmbedder, ScriptedLLM
from tests.test_endpoint import stub  # noqa: F401 - the stub OpenAI-compatible server, a fixture

MESSAGES = [
    {"role": "user", "name": "Alice", "content": "我们的数据库是 PostgreSQL。", "ts": "2026-10-05T10:00:00"},
    {"role": "assistant", "content": "Noted: PostgreSQL.", "ts": "2026-10-05T10:00:05"},
]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def filled(tmp_path, capsys):
    db = str(tmp_path / "cli.db")
    src = tmp_path / "messages.jsonl"
    src.write_text("\n".join(json.dumps(m, ensure_ascii=False) for m in MESSAGES))
    code, out, _ = run(capsys, "add", db, str(src), "--user", "alice", "--defer", "--embedder", "none", "--json")
    assert 0 == code and [1, 2] == json.loads(out)["turn_ids"]
    return db


def test_search_json_and_text(filled, capsys):
    code, out, _ = run(capsys, "search", filled, "-u", "alice", "数据库", "--embedder", "none", "--json")
    hits = json.loads(out)
    assert 0 == code and [1] == hits[0]["turn_ids"] and "turn" == hits[0]["layer"]
    code, out, _ = run(capsys, "search", filled, "-u", "bob", "数据库", "--embedder", "none")
    assert "(nothing found)\n" == out


def test_context_stats_show_export_forget(filled, capsys):
    _, out, _ = run(capsys, "context", filled, "-u", "alice", "PostgreSQL", "--embedder", "none")
    assert "2026-10-05 · Alice: 我们的数据库是 PostgreSQL。" in out
    _, out, _ = run(capsys, "stats", filled, "--embedder", "none", "--json")
    assert 2 == json.loads(out)["turns"] and "keyword_only" not in json.loads(out)  # the file's, not this process's
    _, out, _ = run(capsys, "show", filled, "turn", "2", "-u", "alice")
    assert "Noted: PostgreSQL." in out
    _, out, _ = run(capsys, "export", filled, "-u", "alice")
    rows = [json.loads(line) for line in out.splitlines()]
    assert ["turn", "turn"] == [r["type"] for r in rows] and MESSAGES[0]["content"] == rows[0]["content"]
    _, out, _ = run(capsys, "forget", filled, "--turn", "1", "-u", "alice")
    assert "removed 1 turn and 0 atoms\n" == out
    _, out, _ = run(capsys, "forget", filled, "--user", "alice", "--json")
    assert {"turns": 1, "atoms": 0} == json.loads(out)


def test_errors_are_one_line_and_exit_2(filled, tmp_path, capsys):
    code, _, err = run(capsys, "show", filled, "atom", "99", "-u", "alice")
    assert 2 == code and "memdb: no atom with id 99 for user 'alice'\n" == err
    bad = tmp_path / "bad.json"
    bad.write_text('[{"role": "robot", "content": "x"}]')
    code, _, err = run(capsys, "add", filled, str(bad), "-u", "alice", "--defer", "--embedder", "none")
    assert 2 == code and "messages[0].role" in err
    code, _, err = run(capsys, "search", str(bad), "-u", "alice", "x", "--embedder", "none")
    assert 2 == code and "not a readable SQLite file" in err


def test_profile_and_events_empty(filled, capsys):
    assert (0, "(empty)\n") == run(capsys, "profile", filled, "-u", "alice")[:2]
    assert (0, "(no events)\n") == run(capsys, "events", filled, "-u", "alice")[:2]


ONE_ATOM = '{"a":["Alice | 数据库是 | PostgreSQL"]}'  # the scripted model's reply to every turn it is asked about


def test_export_pairs_gives_each_extracted_turn_its_context_and_atoms(tmp_path, capsys):
    import memdb

    db = str(tmp_path / "pairs.db")
    no_fill = memdb.Settings(extract_fill=False)  # only the scripted model's notes
    with memdb.open(db, embedder=None, extract="now", llm=ScriptedLLM(ONE_ATOM), settings=no_fill) as mem:
        said = [{"role": "user", "name": "Alice", "content": "我们的数据库是 PostgreSQL，用了五年，很稳定。",
                 "ts": "2026-10-05T10:00:00"},
                MESSAGES[1], {"role": "user", "name": "Alice", "content": "Thanks!", "ts": "2026-10-05T10:00:09"}]
        mem.add(said, user="alice")
        mem.add([{"role": "user", "name": "Alice", "content": "还没提取的一句"}], user="alice", session="later")
        mem.conn.execute("update turns set state = 0 where content = '还没提取的一句'")  # pending: no answer yet
    code, out, _ = run(capsys, "export", db, "-u", "alice", "--pairs")
    pairs = [json.loads(line) for line in out.splitlines()]
    assert 0 == code
    assert [m["content"] for m in said] == [p["turn"]["content"] for p in pairs]
    assert [[], [1], [1, 2]] == [[c["id"] for c in p["context"]] for p in pairs]
    assert [["Alice数据库是 PostgreSQL"], [], []] == [[a["text"] for a in p["atoms"]] for p in pairs]


# ---------------------------------------------------------------- rough edges a new user hits (issues 15, 16)

READ_ONLY = [["search", "-u", "a", "x"], ["context", "-u", "a", "x"], ["profile", "-u", "a"],
             ["events", "-u", "a"], ["show", "-u", "a", "turn", "1"], ["stats"], ["export", "-u", "a"]]


@pytest.mark.parametrize("argv", READ_ONLY, ids=[a[0] for a in READ_ONLY])
def test_read_only_commands_refuse_a_missing_file_and_do_not_create_it(tmp_path, capsys, argv):
    db = tmp_path / "typo.db"
    code, out, err = run(capsys, argv[0], str(db), *argv[1:])
    assert (2, "", f"memdb: {db} does not exist; check the path (only add, mcp and demo create a file)\n") == (
        code, out, err)
    assert [] == list(tmp_path.iterdir())


def _add(capsys, db, source, *extra):
    return run(capsys, "add", str(db), str(source), "-u", "alice", "--defer", "--embedder", "none", *extra)


@pytest.mark.parametrize("content, expected", [
    (None, "no such file"),
    ("dir", "is a directory; give a messages file"),
    (b'{"role": "user", "content": "caf\xe9"}', "is not UTF-8 (byte 32); convert it first"),
    (b"[" * 100_000 + b"]" * 100_000, "nests JSON too deeply for a message"),
    (b'{"a": ' * 100_000, "nests JSON too deeply for a message"),
])
def test_add_reports_a_bad_messages_file_in_one_line(tmp_path, capsys, content, expected):
    source = tmp_path / "messages.jsonl"
    if content == "dir":
        source.mkdir()
    elif content is not None:
        source.write_bytes(content)
    code, out, err = _add(capsys, tmp_path / "x.db", source)
    assert 2 == code and err.startswith(f"memdb: {source}") and err.endswith(expected + "\n"), err
    assert 1 == err.count("\n")


def test_a_bad_jsonl_line_is_reported_with_its_own_line_number(tmp_path, capsys):
    source = tmp_path / "messages.jsonl"
    good = json.dumps(MESSAGES[0], ensure_ascii=False)
    source.write_text(f"{good}\n\n{good}\n{{'role': 'user'}}\n")
    code, _, err = _add(capsys, tmp_path / "x.db", source)
    assert (2, f"memdb: {source} line 4 is not JSON: Expecting property name enclosed in double quotes "
               "at column 2\n") == (code, err)
    assert ["messages.jsonl"] == sorted(p.name for p in tmp_path.iterdir())  # the input is read before any file is made


@pytest.mark.parametrize("argv", [["show", "{db}", "atom", "99999999999999999999"],
                                  ["forget", "{db}", "--turn", "18446744073709551616"],
                                  ["show", "{db}", "turn", "0"],
                                  ["extract", "{db}", "--limit", "-1"],
                                  ["search", "{db}", "-u", "alice", "x", "-k", "100000000000000000000"]])
def test_out_of_range_numbers_are_usage_errors(filled, capsys, argv):
    with pytest.raises(SystemExit) as exited:
        cli.main([a.format(db=filled) for a in argv])
    err = capsys.readouterr().err
    assert 2 == exited.value.code and "is not from 1 to" in err and "Traceback" not in err


def test_a_closed_pipe_ends_quietly(filled, tmp_path):
    import subprocess
    import sys

    import memdb

    with memdb.open(filled, embedder=None, extract="defer") as mem:
        mem.add([{"role": "user", "content": f"line {i} " + "x" * 200} for i in range(2000)], user="alice")
    shell = f"{sys.executable} -m memdb.cli export {filled} -u alice | head -n 1"
    done = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, timeout=120)
    assert ("", 1) == (done.stderr, len(done.stdout.splitlines()))


def test_broken_pipe_exit_code_without_traceback(filled, capsys, monkeypatch):
    class Closed:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

    monkeypatch.setattr("sys.stdout", Closed())
    assert 141 == cli.main(["export", filled, "-u", "alice"])


def test_version(capsys):
    import memdb

    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert (0, f"memdb {memdb.__version__}\n") == (exited.value.code, capsys.readouterr().out)


@pytest.mark.parametrize("argv", [["search", "{db}", "-u", "alice", "x", "--budget", "10"],
                                  ["profile", "{db}", "-u", "alice", "--embedder", "none"],
                                  ["show", "{db}", "-u", "alice", "turn", "1", "--llm", "x.gguf"],
                                  ["export", "{db}", "-u", "alice", "--threads", "2"],
                                  ["search", "{db}", "-u", "alice", "x", "--llm", "x.gguf"]])
def test_options_that_would_do_nothing_are_refused(filled, capsys, argv):
    with pytest.raises(SystemExit) as exited:
        cli.main([a.format(db=filled) for a in argv])
    assert 2 == exited.value.code and "unrecognized arguments" in capsys.readouterr().err


def test_context_k_limits_the_hits_considered(tmp_path, capsys):
    import memdb

    db = str(tmp_path / "k.db")
    with memdb.open(db, embedder=None, extract="defer") as mem:
        mem.add([{"role": "user", "content": "Our database is PostgreSQL."},
                 {"role": "user", "content": "PostgreSQL backups run nightly."}], user="alice")
    args = ["context", db, "-u", "alice", "PostgreSQL", "--embedder", "none"]
    assert 1 + 2 == len(run(capsys, *args)[1].splitlines())  # the header, then the lines
    assert 1 + 1 == len(run(capsys, *args, "-k", "1")[1].splitlines())


def test_reembed_to_none_is_refused_and_leaves_the_file_alone(filled, capsys):
    import memdb

    with memdb.open(filled, embedder=None) as mem:
        before = mem.conn.execute("select * from meta order by key").fetchall()
    code, out, err = run(capsys, "reembed", filled, "--to", "none")
    assert (2, "") == (code, out) and "reembed --to none is not supported" in err
    with memdb.open(filled, embedder=None) as mem:
        assert before == mem.conn.execute("select * from meta order by key").fetchall()


def test_every_option_and_command_has_help():
    parser = cli._parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, sub in commands.items():
        assert sub.description, name
        for action in sub._actions:
            if action.option_strings:
                assert action.help, f"{name} {action.option_strings}"


def test_stats_prints_readable_lines_and_json(filled, capsys):
    code, out, _ = run(capsys, "stats", filled, "--embedder", "none")
    assert 0 == code and "{" not in out
    assert "turns              2 (pending 2)" in out.splitlines()
    assert not any(line.startswith(("keyword only", "extract mode")) for line in out.splitlines())
    assert any(line.startswith("file bytes") and line.endswith("kB") for line in out.splitlines())
    assert {"pending": 2} == json.loads(run(capsys, "stats", filled, "--embedder", "none", "--json")[1])[
        "turns_by_state"]


def test_demo_json_is_one_json_document(tmp_path, capsys, monkeypatch):
    import memdb

    monkeypatch.setattr(memdb.Memory, "llm", lambda self: ScriptedLLM(ONE_ATOM))
    code, out, _ = run(capsys, "demo", str(tmp_path / "demo.db"), "--embedder", "none", "--json")
    shown = json.loads(out)
    assert 0 == code and 13 == shown["done"] + shown["skipped"]
    assert ["alice", "alice", "bob", "bob"] == [q["user"] for q in shown["queries"]]


def test_progress_bar_starts_at_zero_with_rate_and_eta(tmp_path):
    import io

    import memdb

    calls = []
    with memdb.open(tmp_path / "p.db", embedder=None, extract="defer", llm=ScriptedLLM(ONE_ATOM)) as mem:
        mem.add([{"role": "user", "content": f"我们的数据库是 PostgreSQL {i}"} for i in range(8)], user="alice")
        mem.extract(progress=lambda done, total: calls.append((done, total)))
    assert [(0, 8), (6, 8), (8, 8)] == calls
    stream, ticks = io.StringIO(), iter([100.0, 100.0, 104.0])
    show = cli.progress_bar("extract", stream, clock=lambda: next(ticks))
    show(0, 8)
    show(6, 8)
    assert ("\rextract [" + " " * 30 + "] 0/8  0.0 turns/s ETA     ?s"
            "\rextract [" + "#" * 22 + " " * 8 + "] 6/8  1.5 turns/s ETA     1s") == stream.getvalue()


# ---------------------------------------------------------------- a new user's first hour (issue 26)


@pytest.mark.parametrize("argv", [["forget", "-u", "bob"], ["extract"], ["reembed", "--to", "default"],
                                  ["search", "-u", "bob", "x"], ["users"]])
def test_commands_that_do_not_create_files_refuse_a_missing_or_empty_path(tmp_path, capsys, argv):
    missing = tmp_path / "nope.db"
    code, out, err = run(capsys, argv[0], str(missing), *argv[1:])
    assert (2, "", f"memdb: {missing} does not exist; check the path (only add, mcp and demo create a file)\n") == (
        code, out, err)
    assert not missing.exists()
    empty = tmp_path / "zero.db"
    empty.touch()
    code, out, err = run(capsys, argv[0], str(empty), *argv[1:])
    assert (2, f"memdb: {empty} is empty (0 bytes), not a memdb file; check the path, or remove it and let add "
               "create it\n") == (code, err)
    assert 0 == empty.stat().st_size


def test_add_says_turn_for_one_and_turns_for_more(tmp_path, capsys):
    source = tmp_path / "one.jsonl"
    source.write_text(json.dumps(MESSAGES[0], ensure_ascii=False))
    assert (0, "stored 1 turn (1)\n") == run(capsys, "add", str(tmp_path / "a.db"), str(source), "-u", "alice",
                                              "--defer", "--embedder", "none")[:2]
    source.write_text("\n".join(json.dumps(m, ensure_ascii=False) for m in MESSAGES))
    assert (0, "stored 2 turns (2..3)\n") == run(capsys, "add", str(tmp_path / "a.db"), str(source), "-u", "alice",
                                                  "--defer", "--embedder", "none")[:2]


def test_a_bad_llm_is_refused_before_any_turn_is_stored(tmp_path, capsys):
    db, source = tmp_path / "a.db", tmp_path / "m.jsonl"
    source.write_text(json.dumps(MESSAGES[0], ensure_ascii=False))
    code, _, err = run(capsys, "add", str(db), str(source), "-u", "alice", "--embedder", "none",
                       "--llm", "qwen2.5:7b")
    assert (2, "memdb: --llm 'qwen2.5:7b' is neither a .gguf file nor an http(s) URL; to use a model a server "
               "has (Ollama, llama-server), pass --llm URL --llm-model qwen2.5:7b\n") == (code, err)
    fake = tmp_path / "broken.gguf"
    fake.write_bytes(b"not a model")
    code, _, err = run(capsys, "add", str(db), str(source), "-u", "alice", "--embedder", "none", "--llm", str(fake))
    assert 2 == code and err.startswith("memdb: ")
    # the refused runs stored nothing, so the fixed command stores the turn once
    code, out, _ = run(capsys, "add", str(db), str(source), "-u", "alice", "--embedder", "none", "--defer")
    assert (0, "stored 1 turn (1)\n") == (code, out)


def test_llm_model_names_the_servers_model_and_an_unknown_one_is_refused_first(tmp_path, capsys, stub):
    db, source = tmp_path / "a.db", tmp_path / "m.jsonl"
    source.write_text(json.dumps(MESSAGES[0], ensure_ascii=False))
    code, _, err = run(capsys, "add", str(db), str(source), "-u", "alice", "--embedder", "none",
                       "--llm", stub.url, "--llm-model", "no-such-model")
    assert 2 == code and f"lists no model 'no-such-model'; it has: {', '.join(stub.models)}" in err
    assert not db.exists()  # refused before the file was opened
    code, out, _ = run(capsys, "add", str(db), str(source), "-u", "alice", "--embedder", "none",
                       "--llm", stub.url, "--llm-model", stub.models[0], "--json")
    assert 0 == code and 1 == len(json.loads(out)["turn_ids"])
    assert stub.models[0] == json.loads(run(capsys, "stats", str(db), "--json")[1])["llm"]


def test_stats_describes_the_file_not_the_process_that_opened_it(tmp_path, capsys):
    import memdb

    db = str(tmp_path / "s.db")
    with memdb.open(db, embedder=HashEmbedder(), extract="defer") as mem:
        mem.add(MESSAGES, user="alice")
    shown = json.loads(run(capsys, "stats", db, "--embedder", "none", "--json")[1])
    assert ("hash-test", {"pending": 2}) == (shown["embedder"], shown["turns_by_state"])
    assert not {"keyword_only", "extract_mode", "embedder_error"} & set(shown)


def test_users_lists_the_files_users(tmp_path, capsys):
    import memdb

    db = str(tmp_path / "u.db")
    with memdb.open(db, embedder=None, extract="defer") as mem:
        mem.add(MESSAGES, user="alice")
        mem.add([{"role": "user", "content": "hello", "ts": "2026-11-01T08:00:00"}], user="bob")
    code, out, _ = run(capsys, "users", db)
    assert 0 == code
    assert ["alice", "bob"] == [line.split()[0] for line in out.splitlines()]
    assert [{"user": "alice", "turns": 2, "atoms": 0, "last_ts": "2026-10-05T10:00:05"},
            {"user": "bob", "turns": 1, "atoms": 0, "last_ts": "2026-11-01T08:00:00"}] == json.loads(
        run(capsys, "users", db, "--json")[1])


def test_export_pairs_come_in_time_order_across_sessions(tmp_path, capsys):
    import memdb

    db = str(tmp_path / "p.db")
    with memdb.open(db, embedder=None, extract="now", llm=ScriptedLLM(ONE_ATOM)) as mem:
        # session names sort the other way round from when they were said
        mem.add([{"role": "user", "content": "We ship the beta on Friday.", "ts": "2026-03-02T09:00:00"}],
                user="alice", session="z-first")
        mem.add([{"role": "user", "content": "The beta slipped to Monday.", "ts": "2026-03-05T09:00:00"}],
                user="alice", session="a-second")
        mem.add([{"role": "user", "content": "Monday went fine.", "ts": "2026-03-09T09:00:00"}],
                user="alice", session="z-first")
    pairs = [json.loads(line) for line in run(capsys, "export", db, "-u", "alice", "--pairs")[1].splitlines()]
    assert ["2026-03-02T09:00:00", "2026-03-05T09:00:00", "2026-03-09T09:00:00"] == [p["turn"]["ts"] for p in pairs]
    assert [[], [], ["We ship the beta on Friday."]] == [[c["content"] for c in p["context"]] for p in pairs]


def test_events_since_takes_a_relative_date(tmp_path, capsys):
    import memdb
    from memdb.db import connection
    from memdb.lifecycle import absorb

    db = str(tmp_path / "e.db")
    with memdb.open(db, embedder=None, extract="defer") as mem:
        for day, place in (("2026-05-06", "the harbour museum"), ("2026-05-09", "the tram depot")):
            (turn,) = mem.add([{"role": "user", "name": "Alice", "content": f"I visited {place}.",
                                "ts": f"{day}T18:00:00"}], user="alice")
            record = {"kind": "event", "subject": "Alice", "predicate": "visited", "object": place, "date": day}
            with connection.write(mem.conn):
                absorb.absorb(mem.conn,
                              absorb.Incoming(user="alice", record=record,
                                              confidence=0.9, turn_ids=[turn],
                                              ts=f"{day}T18:00:00", vector=None),
                              absorb.Engine(mem.settings, copies=mem.copies, term_counts=mem.term_counts))
        mem.add([{"role": "user", "content": "note", "ts": "2026-05-10T12:00:00"}], user="alice")
    # "yesterday" from alice's latest turn (2026-05-10), as a query's "yesterday" is
    code, out, _ = run(capsys, "events", db, "-u", "alice", "--since", "yesterday")
    assert (0, ["2026-05-09"]) == (code, [line[:10] for line in out.splitlines()])
    code, out, _ = run(capsys, "events", db, "-u", "alice", "--until", "4 days ago")
    assert (0, ["2026-05-06"]) == (code, [line[:10] for line in out.splitlines()])
    code, _, err = run(capsys, "events", db, "-u", "alice", "--since", "whenever")
    assert 2 == code and "'whenever' is neither an ISO 8601 time" in err


def test_mcp_takes_no_json_flag_it_could_not_honour(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["mcp", str(tmp_path / "a.db"), "--user", "ana", "--json"])
    assert 2 == exited.value.code and "unrecognized arguments: --json" in capsys.readouterr().err
