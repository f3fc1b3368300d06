"""The MCP server end to end: the mcp SDK's own client starts `memdb mcp` as a subprocess and
talks to it over stdio, as Claude Desktop or Cursor would."""

from __future__ import annotations

import asyncio
import sys

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

import memdb
from memdb.cli import main
from tests.conftest import ScriptedLLM
from tests.test_browse import build
from tests.test_endpoint import stub  # noqa: F401 - the stub OpenAI-compatible server, a fixture


# The scripted model's reply to every turn extraction asks about: atoms without the real model.
REPLY = '{"a":["Alice | likes | science fiction movies", "Alice | trip to Kyoto | on 2026-03-14"]}'


def filled(tmp_path) -> str:
    db = str(tmp_path / "agent.db")
    with memdb.open(db, embedder=None, llm=ScriptedLLM(REPLY), settings=memdb.Settings(extract_fill=False)) as mem:
        mem.add([{"role": "user", "name": "Alice", "content": "I love science fiction movies; off to Kyoto on 2026-03-14."}],
                user="alice", ts="2026-01-10T09:00:00")
        mem.add([{"role": "user", "content": "Bob's secret: he keeps bees on the roof."}], user="bob")
    return db


def serve_and_call(db: str, calls: list[tuple[str, dict]], *extra: str,
                   defer: bool = True) -> tuple[list[str], list]:
    """Start `memdb mcp db` with the SDK's stdio client; the tool names it lists and each call's result."""
    server = StdioServerParameters(
        command=sys.executable,
        args=["-c", "import sys; from memdb.cli import main; sys.exit(main())",
              "mcp", db, "--embedder", "none", *(["--defer"] if defer else []), *extra],
    )

    async def session() -> tuple[list[str], list]:
        async with stdio_client(server) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            return tools, [await client.call_tool(name, args) for name, args in calls]

    return asyncio.run(asyncio.wait_for(session(), timeout=120))


def payload(result) -> object:
    """A tool's return value, from the structured result (the SDK wraps lists and strings in "result")."""
    assert not result.is_error, result.content
    found = result.structured_content
    return found["result"] if set(found) == {"result"} else found


def test_an_mcp_client_remembers_recalls_reads_and_forgets(tmp_path):
    db = filled(tmp_path)
    tools, results = serve_and_call(db, [
        ("remember", {"messages": [{"role": "user", "content": "My cat Miso is afraid of the vacuum."}]}),
        ("recall", {"query": "cat vacuum", "k": 3}),
        ("context", {"query": "what movies do I like?", "budget": 200}),
        ("profile", {}),
        ("events", {"since": "2026-01-01"}),
        ("recall", {"query": "bees roof"}),
        ("persona", {}),
    ], "--user", "alice")
    assert ["context", "events", "forget", "history", "persona", "profile", "recall", "remember", "show"] == tools
    remembered, recalled, context, profile, events, other_user, persona = map(payload, results)
    assert [f"Alice likes science fiction movies (#{profile[0]['id']})"] == persona.splitlines()
    assert "My cat Miso is afraid of the vacuum." == recalled[0]["text"]
    assert remembered["turn_ids"] == recalled[0]["turn_ids"]
    assert "Alice likes science fiction movies" in context
    assert ["Alice likes science fiction movies"] == [a["text"] for a in profile]
    assert [("2026-03-14", "event")] == [(e["date"][:10], e["kind"]) for e in events]
    assert [] == other_user  # bob's turn is in the file, never served to alice's client


def test_forget_over_mcp_deletes_only_the_served_users_memory(tmp_path):
    db = filled(tmp_path)
    with memdb.open(db, embedder=None, extract="defer") as mem:
        alice_atom = mem.profile("alice")[0].id
        bob_turn = mem.search("bees", user="bob", k=1)[0].turn_ids[0]
    _, results = serve_and_call(db, [
        ("forget", {"turn_id": bob_turn}),
        ("forget", {"atom_id": alice_atom}),
        ("profile", {}),
        ("recall", {"query": "bees", "user": "bob"}),
        ("forget", {}),
    ], "--user", "alice")
    refused, forgotten, profile, other_user, nothing_named = results
    assert refused.is_error and f"no turn with id {bob_turn} for user 'alice'" in refused.content[0].text
    assert {"turns": 0, "atoms": 1} == payload(forgotten)
    assert [] == payload(profile)
    assert other_user.is_error and "serves user 'alice' only" in other_user.content[0].text
    assert nothing_named.is_error and "exactly one of atom_id, turn_id, everything" in nothing_named.content[0].text
    with memdb.open(db, embedder=None, extract="defer") as mem:
        assert 1 == len(mem.search("bees", user="bob", layer="turns"))


def test_mcp_refuses_to_start_without_user_or_all_users(tmp_path, capsys):
    # Without --user any client could read and delete every user's memory: that form must be asked for.
    with pytest.raises(SystemExit) as exit_:
        main(["mcp", str(tmp_path / "agent.db"), "--embedder", "none"])
    assert 2 == exit_.value.code
    assert "one of the arguments --user/-u --all-users is required" in capsys.readouterr().err
    assert not (tmp_path / "agent.db").exists()


def test_all_users_says_so_loudly(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)  # stop right after the warning
    main(["mcp", str(tmp_path / "agent.db"), "--embedder", "none", "--all-users"])
    assert "WARNING: serving every user" in capsys.readouterr().err


def test_history_and_show_explain_a_memory_to_the_served_user_only(tmp_path):
    db = tmp_path / "agent.db"
    ids = build(db)  # alice liked coffee, then hated it; wang's memories are in Chinese
    _, results = serve_and_call(str(db), [
        ("history", {"atom_id": ids["hates"]}),
        ("show", {"atom_id": ids["likes"]}),
        ("show", {"turn_id": ids["hate_turn"]}),
        ("history", {"atom_id": ids["cake"]}),
        ("show", {"atom_id": ids["cake"]}),
        ("show", {"turn_id": ids["cake_turn"]}),
        ("show", {}),
    ], "--user", "alice")
    history, shown, turn, other_history, other_atom, other_turn, neither = results
    assert [(ids["likes"], "Alice likes coffee", "superseded", ids["hates"], "2026-03-05T09:00:00", [ids["like_turn"]]),
            (ids["hates"], "Alice hates coffee", "active", None, None, [ids["hate_turn"]])] == [
        (v["id"], v["text"], v["status"], v["superseded_by"], v["valid_to"], v["turn_ids"]) for v in payload(history)]
    atom = payload(shown)
    assert {"kind": "preference", "subject": "Alice", "predicate": "likes", "object": "coffee",
            "sentiment": "like", "attribute": "likes", "value": "coffee"} == {
        k: v for k, v in atom["record"].items() if k != "lang"}
    assert (ids["hates"], ["I really like coffee in the morning."]) == (
        atom["superseded_by"], [t["content"] for t in atom["sources"]])
    assert ("I hate coffee now, it hurts my stomach.", "2026-03-05T09:00:00") == (
        payload(turn)["content"], payload(turn)["ts"])
    for refused, what in [(other_history, f"atom with id {ids['cake']}"), (other_atom, f"atom with id {ids['cake']}"),
                          (other_turn, f"turn with id {ids['cake_turn']}")]:
        assert refused.is_error and f"no {what} for user 'alice'" in refused.content[0].text
    assert neither.is_error and "show takes exactly one of atom_id, turn_id" in neither.content[0].text


def test_with_all_users_every_call_names_one(tmp_path):
    db = filled(tmp_path)
    _, (unnamed, named) = serve_and_call(db, [("profile", {}), ("profile", {"user": "alice"})], "--all-users")
    assert unnamed.is_error and "name the user" in unnamed.content[0].text
    assert ["Alice likes science fiction movies"] == [a["text"] for a in payload(named)]


def test_bad_messages_come_back_as_a_tool_error_the_model_can_read(tmp_path):
    db = filled(tmp_path)
    _, (result,) = serve_and_call(db, [("remember", {"messages": [{"role": "robot", "content": "x"}]})], "-u", "alice")
    assert result.is_error and "messages[0].role 'robot' is not one of" in result.content[0].text


def test_the_cli_help_lists_mcp_and_says_where_bigger_models_go(capsys):
    for argv in (["--help"], ["mcp", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
    shown = capsys.readouterr().out
    assert "serve the memory to an MCP client" in shown
    assert "Bigger models: add, extract, context, persona, demo and mcp take --llm" in shown
    assert "--llm LLM" in shown.split("usage: memdb mcp")[1]


def test_without_the_mcp_package_the_command_says_how_to_get_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)  # import fails as if not installed
    assert 2 == main(["mcp", str(tmp_path / "agent.db"), "--embedder", "none", "--user", "alice"])
    assert "the MCP server needs the mcp package (2.x): pip install 'memdb-sqlite[mcp]'" in capsys.readouterr().err


def test_remember_extracts_at_once_with_the_model_given_by_llm(tmp_path, stub):
    # --llm names an OpenAI-compatible server (the stub on 127.0.0.1), as a desktop config would.
    stub.reply = '{"a": ["Anna | likes | green tea"]}'
    db = str(tmp_path / "agent.db")
    _, (remembered, profile) = serve_and_call(db, [
        # A line the rules take nothing from, so the model is asked.
        ("remember", {"messages": [{"role": "user", "name": "Anna", "content": "Green tea, every single time."}]}),
        ("profile", {}),
    ], "--user", "anna", "--llm", stub.url, defer=False)
    assert {"turn_ids": [1]} == payload(remembered)
    assert ["Anna likes green tea"] == [a["text"] for a in payload(profile)]
    assert 1 == len(stub.chats())


def test_remember_names_the_speaker_from_the_served_user_or_the_name_given(tmp_path):
    db = str(tmp_path / "agent.db")
    serve_and_call(db, [
        ("remember", {"messages": [{"role": "user", "content": "I moved to Porto."},
                                   {"role": "assistant", "content": "Porto, lovely."}]}),
        ("remember", {"messages": [{"role": "user", "content": "I teach piano."}], "name": "Ines",
                      "ts": "2026-04-01T10:00:00"}),
    ], "--user", "ines")
    with memdb.open(db, embedder=None, extract="defer") as mem:
        turns = [(t["role"], t["speaker"], t["content"]) for t in mem.export("ines") if t["type"] == "turn"]
        taught = [t for t in mem.export("ines") if t["type"] == "turn" and t["content"] == "I teach piano."]
    assert [("user", "ines", "I moved to Porto."), ("assistant", None, "Porto, lovely."),
            ("user", "Ines", "I teach piano.")] == turns
    assert "2026-04-01T10:00:00" == taught[0]["ts"]
