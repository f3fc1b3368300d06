"""add() takes a transcript as chat APIs emit it (OpenAI's chat format): parts, tool calls,
tool results. The rule is ingest.check_messages's docstring; each shape is checked here."""

from __future__ import annotations

import pytest

import memdb
from tests.conftest import ScriptedLLM

TRANSCRIPT = [
    {"role": "developer", "content": "You are a travel assistant."},
    {"role": "user", "content": [{"type": "text", "text": "I'm flying to Lisbon on Friday."},
                                 {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                                 {"type": "text", "text": "What's the weather there?"}]},
    {"role": "assistant", "content": None, "refusal": None, "annotations": [],
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Lisbon"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21, "sky": "clear"}'},
    {"role": "assistant", "content": [{"type": "output_text", "text": "21°C and clear.", "annotations": []}]},
]


def stored(mem, ids):
    return [(t["role"], t["speaker"], t["content"]) for t in mem.turns(ids, user="alice")]


def test_an_openai_transcript_is_stored_as_is_with_tool_turns_kept_as_evidence(mem):
    ids = mem.add(TRANSCRIPT, user="alice")
    assert [
        ("system", None, "You are a travel assistant."),
        ("user", None, "I'm flying to Lisbon on Friday.\nWhat's the weather there?"),
        ("assistant", None, 'tool call: get_weather({"city": "Lisbon"})'),
        ("tool", "get_weather", '{"temp_c": 21, "sky": "clear"}'),
        ("assistant", None, "21°C and clear."),
    ] == stored(mem, ids)


def test_tool_and_assistant_turns_are_never_extracted(db_path, embedder):
    llm = ScriptedLLM('{"a": []}')
    every_turn = memdb.Settings(extract_rules_cover=1.0)  # the model reads every turn extraction keeps
    with memdb.open(db_path, embedder=embedder, llm=llm, extract="now", settings=every_turn) as mem:
        mem.add(TRANSCRIPT, user="alice")
        states = [row["state"] for row in mem.export("alice") if row["type"] == "turn"]
    assert ["skipped", "done", "skipped", "skipped", "skipped"] == states
    asked = [messages[-2]["content"] for messages in llm.calls]
    assert 1 == len(asked) and "flying to Lisbon" in asked[0]


def test_text_alongside_tool_calls_comes_first_and_legacy_function_calls_count_too(mem):
    ids = mem.add([
        {"role": "assistant", "content": "Let me check.",
         "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                        {"id": "b", "type": "function", "function": {"name": "g", "arguments": {"x": 1}}}]},
        {"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "text": "ok"}]},
        {"role": "assistant", "content": None, "function_call": {"name": "h", "arguments": "{}"}},
        {"role": "function", "name": "h", "content": "done"},
        {"role": "tool", "tool_call_id": "from-an-earlier-call", "content": "late result"},
        {"role": "assistant", "content": None, "refusal": "I can't help with that."},
    ], user="alice")
    assert [
        ("assistant", None, 'Let me check.\ntool call: f({})\ntool call: g({"x": 1})'),
        ("tool", "g", "ok"),
        ("assistant", None, "tool call: h({})"),
        ("tool", "h", "done"),
        ("tool", None, "late result"),
        ("assistant", None, "I can't help with that."),
    ] == stored(mem, ids)


def test_a_message_with_no_text_is_skipped_and_has_no_id(mem):
    image = {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}}
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    blank = {"type": "text", "text": " \n"}
    ids = mem.add([{"role": "user", "content": [image, blank]}, {"role": "user", "content": [audio, "plain string part"]}],
                  user="alice")
    assert [("user", None, "plain string part")] == stored(mem, ids)
    assert [] == mem.add([{"role": "user", "content": [image]}], user="alice")
    assert 1 == mem.stats()["turns"]


BAD_SHAPES: list[tuple[object, str]] = [
    ([{"content": [{"text": "no type"}]}], "messages[0].content[0] must be a part like {'type': 'text'"),
    ([{"content": [42]}], "messages[0].content[0] must be a part"),
    ([{"content": [{"type": "text", "text": None}]}], "messages[0].content[0].text must be a string"),
    ([{"content": [{"type": "text", "text": "nul \x00"}]}], "messages[0].content holds control character"),
    ([{"content": {"type": "text", "text": "x"}}], "messages[0].content must be a string or a list of parts"),
    ([{"role": "assistant", "content": None, "tool_calls": "f()"}], "messages[0].tool_calls must be a list"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"id": "a"}]}],
     "messages[0].tool_calls[0] must be {'function': {'name'"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": 3}}]}], "messages[0].tool_calls[0]"),
    ([{"role": "tool", "tool_call_id": 7, "content": "x"}], "messages[0].tool_call_id must be a string"),
    ([{"role": "assistant", "content": None}], "messages[0].content must be a string"),
    ([{"content": "x", "tool_results": []}], "messages[0] has unknown key(s) ['tool_results']"),
]


@pytest.mark.parametrize("messages, words", BAD_SHAPES, ids=range(len(BAD_SHAPES)))
def test_bad_shapes_are_refused_naming_the_field_and_write_nothing(mem, messages, words):
    with pytest.raises(memdb.InvalidInput) as err:
        mem.add([{"content": "fine"}, *messages], user="alice")
    assert words.replace("messages[0]", "messages[1]") in str(err.value)
    assert 0 == mem.stats()["turns"]
