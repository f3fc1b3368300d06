"""The memdb command: each subcommand end to end on a temporary file (no model needed)."""

from __future__ import annotations

import json

import pytest

from memdb import cli

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
    assert 2 == json.loads(out)["turns"] and json.loads(out)["keyword_only"]
    _, out, _ = run(capsys, "show", filled, "turn", "2", "-u", "alice", "--embedder", "none")
    assert "Noted: PostgreSQL." in out
    _, out, _ = run(capsys, "export", filled, "-u", "alice", "--embedder", "none")
    rows = [json.loads(line) for line in out.splitlines()]
    assert ["turn", "turn"] == [r["type"] for r in rows] and MESSAGES[0]["content"] == rows[0]["content"]
    _, out, _ = run(capsys, "forget", filled, "--turn", "1", "-u", "alice", "--embedder", "none")
    assert "removed 1 turns and 0 atoms\n" == out
    _, out, _ = run(capsys, "forget", filled, "--user", "alice", "--embedder", "none", "--json")
    assert {"turns": 1, "atoms": 0} == json.loads(out)


def test_errors_are_one_line_and_exit_2(filled, tmp_path, capsys):
    code, _, err = run(capsys, "show", filled, "atom", "99", "-u", "alice", "--embedder", "none")
    assert 2 == code and "memdb: no atom with id 99 for user 'alice'\n" == err
    bad = tmp_path / "bad.json"
    bad.write_text('[{"role": "robot", "content": "x"}]')
    code, _, err = run(capsys, "add", filled, str(bad), "-u", "alice", "--defer", "--embedder", "none")
    assert 2 == code and "messages[0].role" in err
    code, _, err = run(capsys, "search", str(bad), "-u", "alice", "x", "--embedder", "none")
    assert 2 == code and "not a readable SQLite file" in err


def test_profile_and_events_empty(filled, capsys):
    assert (0, "(empty)\n") == run(capsys, "profile", filled, "-u", "alice", "--embedder", "none")[:2]
    assert (0, "(no events)\n") == run(capsys, "events", filled, "-u", "alice", "--embedder", "none")[:2]


class OneAtomLLM:
    """A scripted model: one atom about the database for every turn it is asked about."""

    name, sha256 = "one-atom", "0" * 64

    def complete(self, messages, *, schema, max_tokens):
        return '{"a":["Alice | 数据库是 | PostgreSQL"]}'


def test_export_pairs_gives_each_extracted_turn_its_context_and_atoms(tmp_path, capsys):
    import memdb

    db = str(tmp_path / "pairs.db")
    no_fill = memdb.Settings(extract_fill=False)  # only the scripted model's notes
    with memdb.open(db, embedder=None, extract="now", llm=OneAtomLLM(), settings=no_fill) as mem:
        said = [{"role": "user", "name": "Alice", "content": "我们的数据库是 PostgreSQL，用了五年，很稳定。"},
                MESSAGES[1], {"role": "user", "name": "Alice", "content": "Thanks!"}]
        mem.add(said, user="alice")
        mem.add([{"role": "user", "name": "Alice", "content": "还没提取的一句"}], user="alice", session="later")
        mem.conn.execute("update turns set state = 0 where content = '还没提取的一句'")  # pending: no answer yet
    code, out, _ = run(capsys, "export", db, "-u", "alice", "--pairs", "--embedder", "none")
    pairs = [json.loads(line) for line in out.splitlines()]
    assert 0 == code
    assert [m["content"] for m in said] == [p["turn"]["content"] for p in pairs]
    assert [[], [1], [1, 2]] == [[c["id"] for c in p["context"]] for p in pairs]
    assert [["Alice 数据库是 PostgreSQL"], [], []] == [[a["text"] for a in p["atoms"]] for p in pairs]
