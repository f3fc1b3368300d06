"""L1 extraction with a scripted model: pre-filter, parsing, retry, grounding, normalisation, time."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memdb import codec, text, timeparse
from memdb.errors import ModelError
from memdb.settings import Settings
from memdb.extraction import records
from memdb.models import assets
from memdb.models import llama
from memdb.extraction import prompt
from memdb.extraction import parse
from memdb.extraction import prefilter
from memdb.extraction import extract
from tests.conftest import ScriptedLLM

TS = "2023-05-08T13:56:00"  # a Monday
MODEL_ONLY = Settings(extract_fill=False)


def model_only(turns, llm, **kwargs):
    """extract() with only the model's notes: these tests are about what happens to them
    (the notes taken from the turn's words are tested apart)."""
    return extract.extract(turns, llm, settings=MODEL_ONLY, **kwargs)


# The pronouns the scripted model answers with (others are "they").
PRONOUNS = {"Tobias": "he", "Beatrix": "she", "Rosalind": "she"}


def fake_llm(*replies: object) -> ScriptedLLM:
    """The scripted model, replies in order and cycling, pronoun questions answered apart."""
    return ScriptedLLM(*replies, pronouns=PRONOUNS)


def turn(id_: int, content: str, speaker: str | None = "Rosalind", ts: str = TS, role: str = "user") -> records.Turn:
    return records.Turn(id=id_, user="u", session="s1", role=role, speaker=speaker, content=content, ts=ts)


def reply(*atoms: str) -> str:
    return json.dumps({"a": list(atoms)}, ensure_ascii=False)


def texts(candidates: list[records.Candidate]) -> list[str]:
    return [codec.canonical_text(c.record) for c in candidates]


# --- pre-filter ---------------------------------------------------------------------------------

@pytest.mark.parametrize("content, reason", [
    ("Hey Bea! Good to see you! How have you been?", "greeting+question"),
    ("Thanks so much!", "thanks"),
    ("ok", "acknowledgement"),
    ("Wow, that's awesome!", "acknowledgement"),
    ("What kind of jobs are you thinking of?", "question"),
    ("You'd be a great counselor! Your empathy will really help people.", "reaction"),
    ("你好！", "greeting"),
    ("谢谢！", "thanks"),
    ("好的，收到。", "acknowledgement"),
    ("你周末去哪儿了？", "question"),
    ("", "empty"),
])
def test_prefilter_skips_turns_without_durable_content(content, reason):
    assert reason == prefilter.prefilter(turn(1, content), names={"Beatrix", "Rosalind"})


@pytest.mark.parametrize("content", [
    "I went to a LGBTQ support group yesterday and it was so powerful.",
    "Thanks, Beatrix! I painted that lake sunrise last year.",
    "I love pottery.",
    "我们后端用 Go，数据库是 PostgreSQL。",
    "谢谢！我对花生过敏。",
])
def test_prefilter_keeps_turns_with_content(content):
    assert None is prefilter.prefilter(turn(1, content), names={"Beatrix"})


def test_prefilter_skips_assistant_and_tool_turns():
    assert "assistant turn" == prefilter.prefilter(turn(1, "Your meeting is booked.", role="assistant"))
    assert "tool turn" == prefilter.prefilter(turn(1, "{}", role="tool"))


def test_skipped_turns_never_reach_the_model():
    llm = fake_llm(reply())
    _, outcomes = model_only([turn(1, "Hi!"), turn(2, "Thanks!")], llm)
    assert [] == llm.calls
    assert {1: ("skipped", "greeting"), 2: ("skipped", "thanks")} == {k: (v.state, v.reason) for k, v in outcomes.items()}


# --- parsing ------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw", [
    '{"a":["Rosalind | went to | a support group | yesterday"]}',
    '```json\n{"a":["Rosalind | went to | a support group | yesterday"]}\n```',
    'Sure! {"a":["Rosalind | went to | a support group | yesterday"]} Hope it helps.',
    '{"atoms":[{"subject":"Rosalind","predicate":"went to","object":"a support group","when":"yesterday"}]}',
    '[{"s":"Rosalind","p":"went to","o":"a support group","w":"yesterday"}]',
    '{"a":[[1,"e","Rosalind","went to","a support group","yesterday"]]}',
])
def test_parser_accepts_the_shapes_models_write(raw):
    atoms, error = parse.parse_output(raw, 1)
    assert None is error
    assert [("Rosalind", "went to", "a support group", "yesterday")] == [
        (a["subject"], a["predicate"], a["object"], a["when"]) for a in atoms]


def test_parser_keeps_the_complete_atoms_of_a_truncated_reply():
    atoms, error = parse.parse_output('{"a":["Rosalind | likes | tea","Rosalind | went to | the ci', 1)
    assert (None, [("Rosalind", "likes", "tea")]) == (error, [(a["subject"], a["predicate"], a["object"]) for a in atoms])


@pytest.mark.parametrize("raw, error", [
    ("", "empty output"),
    ("I'm sorry, I cannot help with that.", "invalid JSON"),
    ('{"a": 5}', "'a' is int, not a list"),
    ('{"x": 1}', "no atom list in output"),
    ("42", "output is a JSON int, not an object"),
    ("[" * 5000, "invalid JSON"),
])
def test_parser_reports_unusable_replies(raw, error):
    atoms, why = parse.parse_output(raw, 1)
    assert [] == atoms
    assert why.startswith(error)


def test_parser_marks_malformed_atoms_instead_of_failing_the_reply():
    atoms, error = parse.parse_output('{"a":["Rosalind | likes | tea", 7, "no pipes", {"o": [1]}]}', 1)
    assert None is error
    assert [False, True, True, True] == ["_invalid" in a for a in atoms]


# --- retry, failure -----------------------------------------------------------------------------

def test_invalid_output_is_retried_once_then_the_turns_fail_with_the_reason():
    llm = fake_llm("not json at all")
    candidates, outcomes = model_only([turn(1, "I moved to Lisbon."), turn(2, "Hi!")], llm)
    assert 2 == len(llm.calls)
    assert [] == candidates
    assert ("failed", "invalid output after retry: invalid JSON: 'not json at all'") == (outcomes[1].state, outcomes[1].reason)
    assert "skipped" == outcomes[2].state


def test_a_good_retry_recovers_the_turns():
    llm = fake_llm("{", reply("Rosalind | moved to | Lisbon"))
    candidates, outcomes = model_only([turn(1, "I moved to Lisbon.")], llm)
    assert (["Rosalind moved to Lisbon"], "done") == (texts(candidates), outcomes[1].state)
    assert "Reply with the JSON only." in llm.calls[1][-2]["content"]


def test_a_crashing_model_call_fails_the_turns_and_never_raises():
    llm = fake_llm(RuntimeError("llama_decode returned -3"))
    _, outcomes = model_only([turn(1, "I moved to Lisbon.")], llm)
    assert ("failed", "invalid output after retry: model error: RuntimeError: llama_decode returned -3") == (
        outcomes[1].state, outcomes[1].reason)


def test_a_model_that_cannot_load_propagates_so_the_caller_keeps_turns_pending():
    with pytest.raises(ModelError):
        model_only([turn(1, "I moved to Lisbon.")], fake_llm(ModelError("no model")))


# --- grounding ----------------------------------------------------------------------------------

@pytest.mark.parametrize("atom, why", [
    ("Rosalind | adopted | a ferret named Biscuit", "copied from examples"),
    ("Rosalind | went to | a support group yesterday and it was so powerful", "whole line pasted"),
    ("Rosalind | went to | Paris", "entity not in source"),
    ("Rosalind | enjoys | hiking in mountains", "words not in source"),
    ("Rosalind | went to | 支持小组", "not in the turn's language"),
    ("Rosalind | is | so awesome", "small talk"),
    ("Rosalind | thinks | you are great", "addressed to the listener"),
])
def test_grounding_drops_unsupported_atoms_and_counts_why(atom, why):
    source = turn(1, "I went to a support group yesterday and it was so powerful.")
    candidates, outcomes = model_only([source], fake_llm(reply(atom, "Rosalind | went to | a support group")))
    assert ["Rosalind went to a support group"] == texts(candidates)
    assert (2, {why: 1}) == (outcomes[1].proposed, outcomes[1].dropped)


def test_grounding_allows_speaker_names_and_paraphrased_predicates():
    source = turn(1, "I'm keen on counseling or working in mental health.")
    candidates, _ = model_only([source], fake_llm(reply("Rosalind | wants to work in | mental health")))
    assert ["Rosalind wants to work in mental health"] == texts(candidates)


def test_grounding_drops_a_chinese_atom_with_words_the_turn_never_said():
    source = turn(1, "我们后端用 Go，数据库是 PostgreSQL。", speaker=None)
    candidates, outcomes = model_only([source], fake_llm(reply("用户 | 喜欢 | 美式咖啡", "后端 | 用 | Go")))
    assert ["后端用 Go"] == texts(candidates)
    assert {"words not in source": 1} == outcomes[1].dropped


def test_atoms_go_to_the_turn_whose_words_they_share():
    turns = [turn(1, "I went to a support group yesterday."), turn(2, "I'm painting a lake sunrise.", speaker="Beatrix")]
    candidates, _ = model_only(turns, fake_llm(reply("Beatrix | is painting | a lake sunrise",
                                                         "Rosalind | went to | a support group")))
    assert {"Beatrix is painting a lake sunrise": [2], "Rosalind went to a support group": [1]} == {
        codec.canonical_text(c.record): c.turn_ids for c in candidates}


def test_history_is_context_only_never_a_source():
    history = [turn(1, "I adopted two cats last month.", speaker="Beatrix")]
    llm = fake_llm(reply("Beatrix | adopted | two cats", "Rosalind | moved to | Lisbon"))
    candidates, outcomes = model_only([turn(2, "I moved to Lisbon.")], llm, history=history, context=1)
    assert ["Rosalind moved to Lisbon"] == texts(candidates)
    assert {2} == set(outcomes)
    assert "- Beatrix: I adopted two cats last month.\n* Rosalind: I moved to Lisbon." == llm.calls[0][-2]["content"]


def test_by_default_history_only_lends_speaker_names():
    history = [turn(1, "I adopted two cats last month.", speaker="Beatrix")]
    llm = fake_llm(reply("Bea | moved to | Lisbon"))
    candidates, _ = model_only([turn(2, "Bea moved to Lisbon.")], llm, history=history)
    assert "* Rosalind: Bea moved to Lisbon." == llm.calls[0][-2]["content"]
    assert ["Beatrix moved to Lisbon"] == texts(candidates)


# --- normalisation ------------------------------------------------------------------------------

@pytest.mark.parametrize("atom, kind, sentiment", [
    ("Rosalind | loves | pottery", "preference", "like"),
    ("Rosalind | is fond of | pottery", "preference", "like"),
    ("Rosalind | hates | pottery", "preference", "dislike"),
    ("Rosalind | doesn't like | pottery", "preference", "dislike"),
    ("Rosalind | can't eat | pottery", "constraint", None),
    ("Rosalind | made | pottery", "event", None),
    ("Rosalind | has | pottery", "fact", None),
    ("Rosalind | is so busy with | pottery", "fact", None),  # a state, not something that happened
    ("Rosalind | has only visited | pottery", "event", None),  # "only" alone is no rule
    ("Rosalind | lost | pottery", "event", None),
    ("Rosalind | says pottery is her go-to for | pottery", "preference", "like"),
])
def test_kind_and_sentiment_come_from_a_closed_set(atom, kind, sentiment):
    # The turn says "I'm …" of the two "is" notes: a model's "is X" the turn never says of a person is dropped.
    said = "Pottery, pottery, pottery. I'm fond of it, I'm so busy with it."
    candidates, _ = model_only([turn(1, said)], fake_llm(reply(atom)))
    assert (kind, sentiment) == (candidates[0].record["kind"], candidates[0].record.get("sentiment"))


@pytest.mark.parametrize("model_kind, model_sentiment, kind, sentiment", [
    ("preferences", "positive", "preference", "like"),
    ("Fact", "negative", "preference", "dislike"),
    ("rule", None, "constraint", None),
    ("events", None, "event", None),
    ("偏好", "喜欢", "preference", "like"),
    ("whatever", None, "fact", None),
])
def test_model_written_kinds_and_sentiments_are_mapped(model_kind, model_sentiment, kind, sentiment):
    atom = {"kind": model_kind, "subject": "Rosalind", "predicate": "has", "object": "pottery"}
    if model_sentiment:
        atom["sentiment"] = model_sentiment
    candidates, _ = model_only([turn(1, "Pottery!!")], fake_llm(json.dumps({"a": [atom]}, ensure_ascii=False)))
    assert (kind, sentiment) == (candidates[0].record["kind"], candidates[0].record.get("sentiment"))


@pytest.mark.parametrize("speaker, content, subject, expected", [
    ("Rosalind", "I moved to Lisbon.", "I", "Rosalind moved to Lisbon"),
    ("Rosalind", "I moved to Lisbon.", "me", "Rosalind moved to Lisbon"),
    ("Rosalind", "I moved to Lisbon.", "User", "Rosalind moved to Lisbon"),
    ("Rosalind", "I moved to Lisbon.", "Beatrix", "Rosalind moved to Lisbon"),  # the other speaker on "I…"
    (None, "I moved to Lisbon.", "I", "user moved to Lisbon"),
    (None, "我搬到了里斯本。", "我", "用户搬到了里斯本"),
    ("小王", "我搬到了里斯本。", "我", "小王搬到了里斯本"),
])
def test_first_person_subjects_become_the_speaker(speaker, content, subject, expected):
    zh = "里斯本" in content
    atom = f"{subject} | 搬到了 | 里斯本" if zh else f"{subject} | moved to | Lisbon"
    history = [turn(0, "Hello there", speaker="Beatrix")]
    candidates, _ = model_only([turn(1, content, speaker=speaker)], fake_llm(reply(atom)), history=history)
    assert [expected] == texts(candidates)


def test_a_short_form_of_a_speaker_name_becomes_the_name():
    history = [turn(0, "Hey Rosalind!", speaker="Beatrix")]
    source = turn(1, "Bea ran a charity race for mental health last Saturday.", speaker="Rosalind")
    candidates, _ = model_only([source], fake_llm(reply("Bea | ran | a charity race")), history=history)
    assert ["Beatrix ran a charity race"] == texts(candidates)


def test_chinese_turns_give_chinese_atoms():
    source = turn(1, "我们后端用 Go，数据库是 PostgreSQL，禁止 ORM。对了上周三刚做完 v2 发布。", speaker="阿明")
    llm = fake_llm(reply("后端 | 用 | Go", "数据库 | 是 | PostgreSQL", "阿明 | 禁止 | ORM", "阿明 | 做完 | v2 发布 | 上周三",
                        "阿明 | 负责 | 后端"))
    candidates, outcomes = model_only([source], llm)
    assert ["后端用 Go", "数据库是 PostgreSQL", "阿明禁止 ORM", "阿明做完 v2 发布"] == texts(candidates)
    assert {"zh"} == {c.record["lang"] for c in candidates}
    assert ["fact", "fact", "constraint", "event"] == [c.record["kind"] for c in candidates]
    assert {"over the per-turn cap": 1} == outcomes[1].dropped
    assert "阿青" in llm.calls[0][1]["content"]  # the Chinese example, not the English one


# --- time ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("expression, expected", [
    ("yesterday", "2023-05-07"),
    ("last night", "2023-05-07"),
    ("today", "2023-05-08"),
    ("tomorrow", "2023-05-09"),
    ("last Wednesday", "2023-05-03"),
    ("last Monday", "2023-05-01"),
    ("next Friday", "2023-05-12"),
    ("this Friday", "2023-05-12"),
    ("last week", "2023-05-01"),
    ("next week", "2023-05-15"),
    ("last weekend", "2023-05-06"),
    ("last month", "2023-04"),
    ("next month", "2023-06"),
    ("last year", "2022"),
    ("this year", "2023"),
    ("two days ago", "2023-05-06"),
    ("3 days ago", "2023-05-05"),
    ("a couple of weeks ago", "2023-04-24"),
    ("a few days ago", "2023-05-05"),
    ("four years ago", "2019"),
    ("in two weeks", "2023-05-22"),
    ("May 7, 2023", "2023-05-07"),
    ("May 7th, 2023", "2023-05-07"),
    ("7 May 2023", "2023-05-07"),
    ("7 May, 2023", "2023-05-07"),
    ("May 7", "2023-05-07"),
    ("2023-05-07", "2023-05-07"),
    ("in 2019", "2019"),
    ("in March", "2023-03"),
    ("May 2022", "2022-05"),
    ("昨天", "2023-05-07"),
    ("前天", "2023-05-06"),
    ("明天", "2023-05-09"),
    ("上周三", "2023-05-03"),
    ("上星期五", "2023-05-05"),
    ("下周一", "2023-05-15"),
    ("本周五", "2023-05-12"),
    ("上周", "2023-05-01"),
    ("上个月", "2023-04"),
    ("下个月", "2023-06"),
    ("去年", "2022"),
    ("前年", "2021"),
    ("明年", "2024"),
    ("三天前", "2023-05-05"),
    ("两个月前", "2023-03"),
    ("十年前", "2013"),
    ("2023年5月7日", "2023-05-07"),
    ("5月7日", "2023-05-07"),
    ("2022年3月", "2022-03"),
    ("recently", None),
    ("the other day", None),
    ("I may 5 things", None),
    ("February 30, 2023", None),
    ("", None),
])
def test_time_expressions_resolve_against_the_turn_date(expression, expected):
    assert expected == timeparse.resolve(expression, TS)


def test_time_resolution_crosses_year_and_month_boundaries():
    assert ("2022-12-31", "2022-12", "2022-12-28") == (
        timeparse.resolve("yesterday", "2023-01-01T09:00:00"),
        timeparse.resolve("last month", "2023-01-15"),
        timeparse.resolve("last Wednesday", "2023-01-01"))


def test_find_returns_each_phrase_with_its_date():
    assert [("yesterday", "2023-05-07"), ("last Friday", "2023-05-05")] == timeparse.find(
        "I went yesterday, and also last Friday.", TS)


def test_an_event_keeps_the_time_words_and_gets_an_absolute_date():
    candidates, _ = model_only([turn(1, "I went to a support group yesterday.")],
                                    fake_llm(reply("I | went to | a support group | yesterday")))
    assert {"kind": "event", "subject": "Rosalind", "predicate": "went to", "object": "a support group",
            "when": "yesterday", "date": "2023-05-07", "lang": "en", "attribute": "visited",
            "value": "support group"} == candidates[0].record


def test_a_time_phrase_left_in_the_object_moves_to_when():
    candidates, _ = model_only([turn(1, "I went to a support group yesterday.")],
                                    fake_llm(reply("Rosalind | went to | a support group yesterday")))
    assert ("a support group", "yesterday", "2023-05-07") == tuple(candidates[0].record.get(k) for k in ("object", "when", "date"))


def test_a_last_slot_that_is_no_time_goes_back_into_the_object():
    candidates, _ = model_only([turn(1, "I'm off to go swimming with the kids.")],
                                    fake_llm(reply("Rosalind | is going | swimming with | the kids")))
    assert ("swimming with the kids", None) == (candidates[0].record["object"], candidates[0].record.get("when"))


def test_vague_times_stay_as_words_without_a_date():
    candidates, _ = model_only([turn(1, "I started pottery recently.")],
                                    fake_llm(reply("Rosalind | started | pottery | recently")))
    assert ("recently", None) == (candidates[0].record.get("when"), candidates[0].record.get("date"))


def test_time_words_the_turn_never_said_are_dropped():
    candidates, _ = model_only([turn(1, "I went to a support group.")],
                                    fake_llm(reply("Rosalind | went to | a support group | last year")))
    assert ("when" in candidates[0].record, "date" in candidates[0].record) == (False, False)


def test_a_time_phrase_the_turn_never_said_is_cut_from_the_object():
    source = turn(1, "我们后端用 Go，禁止 ORM。对了上周三刚做完 v2 发布。", speaker=None, ts="2026-11-26T10:00:00")
    candidates, _ = model_only([source], fake_llm(reply("用户 | ORM | 前天刚做完 v2 发布")))
    assert ("event", "刚做完 v2 发布", "上周三", "2026-11-18") == tuple(
        candidates[0].record.get(k) for k in ("kind", "object", "when", "date"))


def test_chinese_event_date_is_resolved():
    source = turn(1, "对了上周三刚做完 v2 发布。", speaker=None, ts="2026-11-26T10:00:00")  # a Thursday
    candidates, _ = model_only([source], fake_llm(reply("用户 | 做完 | v2 发布 | 上周三")))
    assert ("event", "上周三", "2026-11-18") == tuple(candidates[0].record.get(k) for k in ("kind", "when", "date"))


# --- confidence, duplicates, caps ----------------------------------------------------------------

def test_hedged_statements_get_lower_confidence_than_direct_ones():
    direct, _ = model_only([turn(1, "I moved to Lisbon.")], fake_llm(reply("Rosalind | moved to | Lisbon")))
    hedged, _ = model_only([turn(1, "Maybe I'll move to Lisbon.")], fake_llm(reply("Rosalind | move to | Lisbon")))
    assert (0.9, 0.6) == (direct[0].confidence, hedged[0].confidence)


def test_repeated_atoms_merge_into_one_candidate():
    candidates, outcomes = model_only([turn(1, "I moved to Lisbon.")], fake_llm(reply(
        "Rosalind | moved to | Lisbon", "Rosalind | moved to | Lisbon")))
    assert (["Rosalind moved to Lisbon"], {"duplicate": 1}) == (texts(candidates), outcomes[1].dropped)


def test_every_turn_gets_an_outcome_and_every_candidate_is_valid():
    turns = [turn(1, "Hi!"), turn(2, "I moved to Lisbon."), turn(3, "What about you?"), turn(4, "I love tea.")]
    candidates, outcomes = model_only(turns, fake_llm(reply("Rosalind | moved to | Lisbon", "Rosalind | loves | tea")))
    assert {1: "skipped", 2: "done", 3: "skipped", 4: "done"} == {k: v.state for k, v in outcomes.items()}
    assert all(c.record == codec.validate(c.record) for c in candidates)


def test_each_turn_is_its_own_model_call():
    llm = fake_llm(reply())
    _, outcomes = model_only([turn(i, f"I moved to city number {i}.") for i in range(1, 6)], llm)
    assert (5, {"done"}) == (len(llm.calls), {o.state for o in outcomes.values()})


# --- the prompt -----------------------------------------------------------------------------------

def test_the_prompt_prefix_is_byte_identical_between_calls():
    a = llama._render_chatml(prompt.build_messages([turn(1, "I moved to Lisbon.")], [], [turn(1, "I moved to Lisbon.")]))
    b = llama._render_chatml(prompt.build_messages([turn(7, "I love tea.")], [turn(6, "Hi")], [turn(7, "I love tea.")]))
    prefix = llama._render_chatml(prompt.prompt_prefix("en")).removesuffix("<|im_start|>assistant\n")
    assert a.startswith(prefix) and b.startswith(prefix)
    assert "* Rosalind: I moved to Lisbon." in a and "- Rosalind: Hi\n* Rosalind: I love tea." in b


def test_the_fewshot_markers_occur_in_the_examples():
    examples = " ".join(u + a for pairs in prompt._EXAMPLES.values() for u, a in pairs).lower()
    assert [] == [m for m in prompt.FEWSHOT_MARKERS if m not in examples]


def test_the_fewshot_replies_parse_into_atoms_grounded_in_their_own_lines():
    for user, assistant in (pair for pairs in prompt._EXAMPLES.values() for pair in pairs):
        atoms, error = parse.parse_output(assistant, 1)
        assert None is error
        assert all("_invalid" not in a for a in atoms)


# --- hostile model output -------------------------------------------------------------------------

_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30)
    | st.sampled_from(["Rosalind | went to | a support group | yesterday", "I | love | tea", "a|b", "||||", "我 | 喜欢 | 茶"]),
    lambda inner: st.lists(inner, max_size=8) | st.dictionaries(
        st.sampled_from(["a", "atoms", "kind", "k", "subject", "s", "predicate", "object", "o", "when", "turn", "sentiment"]),
        inner, max_size=6),
    max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(raw=st.text(max_size=300) | _JSONISH.map(lambda v: json.dumps(v, ensure_ascii=False))
       | _JSONISH.map(lambda v: json.dumps(v)[: len(json.dumps(v)) // 2]))
def test_random_and_jsonish_garbage_never_breaks_extraction(raw):
    atoms, error = parse.parse_output(raw, 2)
    if error is not None:  # unusable as a whole: no atoms, and a reason
        assert ([], str) == (atoms, type(error)) and error
    assert isinstance(atoms, list)
    turns = [turn(1, "I went to a support group yesterday. I love tea."), turn(2, "我喜欢茶。", speaker="Beatrix")]
    candidates, outcomes = model_only(turns, fake_llm(raw))
    assert {1, 2} == set(outcomes)
    assert {"done", "failed"} >= {o.state for o in outcomes.values()}
    assert [] == [o for o in outcomes.values() if o.state == "failed" and not o.reason]  # a failure says why
    for cand in candidates:
        assert cand.record == codec.validate(cand.record)
        assert 0 <= cand.confidence <= 1 and set(cand.turn_ids) <= {1, 2}


def test_huge_and_deep_replies_are_refused_without_crashing():
    for raw in ['{"a":[' + ",".join(['"Rosalind | went to | a support group"'] * 5000) + "]}",
                "[" * 100_000, '{"a":' * 5000 + "1" + "}" * 5000]:
        candidates, outcomes = model_only([turn(1, "I went to a support group.")], fake_llm(raw))
        assert len(candidates) <= prompt.MAX_ATOMS_PER_TURN
        assert outcomes[1].state in ("done", "failed")


# --- the model files ------------------------------------------------------------------------------

def _fake_parts(tmp_path, monkeypatch, contents: list[bytes], expected: str) -> None:
    parts = []
    for i, blob in enumerate(contents, start=1):
        part = tmp_path / f"part{i:02d}.bin"
        part.write_bytes(blob)
        parts.append(part)
    monkeypatch.setattr(assets, "part_files", lambda: parts)
    monkeypatch.setattr(assets, "DEFAULT_MODEL_SHA256", expected)
    monkeypatch.setenv("MEMDB_CACHE", str(tmp_path / "cache"))


def test_the_default_model_is_assembled_once_into_the_cache(tmp_path, monkeypatch):
    blobs = [b"GGUF", b"-part-two", b"-three"]
    _fake_parts(tmp_path, monkeypatch, blobs, hashlib.sha256(b"".join(blobs)).hexdigest())
    path = assets.default_model_path()
    assert (tmp_path / "cache" / f"{assets.DEFAULT_MODEL_NAME}.gguf", b"GGUF-part-two-three") == (path, path.read_bytes())
    assert [path.name] == [p.name for p in path.parent.iterdir()]  # no temporary file left behind


def test_damaged_parts_are_refused_and_leave_nothing_in_the_cache(tmp_path, monkeypatch):
    _fake_parts(tmp_path, monkeypatch, [b"GGUF", b"garbage"], "ab" * 32)
    with pytest.raises(ModelError, match="expected abab.*reinstall"):
        assets.default_model_path()
    assert [] == list((tmp_path / "cache").iterdir())


def test_a_tampered_cache_file_is_refused_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMDB_CACHE", str(tmp_path))
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not the model")
    with pytest.raises(ModelError) as info:
        assets.verify_default(bad)
    message = str(info.value)
    assert str(bad) in message and assets.DEFAULT_MODEL_SHA256 in message
    assert hashlib.sha256(b"not the model").hexdigest() in message and "delete that file" in message


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("MEMDB_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tmp_path / "memdb" == assets.cache_dir()
    monkeypatch.setenv("MEMDB_CACHE", str(tmp_path / "mine"))
    assert tmp_path / "mine" == assets.cache_dir()


def test_a_missing_model_path_is_a_model_error():
    with pytest.raises(ModelError, match="does not exist"):
        llama.load_llm("/nonexistent/model.gguf")


def test_count_tokens_falls_back_to_an_estimate_without_a_model():
    class NoTokenizer:
        def count_tokens(self, line: str) -> int:
            raise RuntimeError("no vocab")

    assert 3 == llama.count_tokens(NoTokenizer(), "hello world!")


def test_statements_differing_only_in_a_digit_stay_apart():
    from memdb.extraction.extract import _merge_duplicates
    from memdb.extraction.records import Candidate, Outcome

    two = Candidate({"kind": "fact", "subject": "Ana", "predicate": "has", "object": "2 kids"}, 0.9, [1])
    three = Candidate({"kind": "fact", "subject": "Ana", "predicate": "has", "object": "3 kids"}, 0.9, [2])
    again = Candidate({"kind": "fact", "subject": "Ana", "predicate": "has", "object": "2 kids"}, 0.8, [2])
    kept = _merge_duplicates([two, three, again], {1: Outcome("done"), 2: Outcome("done")})
    assert [[1, 2], [2]] == [c.turn_ids for c in kept]


# --- tense and the quality gate -------------------------------------------------------------------

@pytest.mark.parametrize("phrase, future, expected", [
    ("in August", True, "2026-08"),
    ("in August", False, "2025-08"),
    ("August 12th", True, "2026-08-12"),
    ("by end of July", True, "2026-07"),
    ("mid-August", True, "2026-08"),
    ("the 14th", True, "2026-07-14"),
    ("下个月中旬", None, "2026-07"),
])
def test_the_tense_of_the_sentence_picks_the_year(phrase, future, expected):
    assert expected == timeparse.resolve(phrase, "2026-06-25T10:00:00", future)


def test_a_plan_said_in_june_for_august_is_dated_this_august():
    source = turn(1, "My partner Emil and I are moving to Denver in August!", speaker="Tobias", ts="2026-06-25T10:00:00")
    candidates, _ = model_only([source], fake_llm(reply("Tobias | is moving to | Denver | in August")))
    assert [("Tobias is moving to Denver", "event", "2026-08")] == [
        (codec.canonical_text(c.record), c.record["kind"], c.record.get("date")) for c in candidates]


def test_first_and_second_person_become_the_names_they_stand_for():
    history = [turn(1, "How is your family?", speaker="Rosalind")]
    source = turn(2, "Great! My sister just visited, and she loved the painting you gave me.", speaker="Beatrix")
    llm = fake_llm(reply("Beatrix | hosted | my sister", "Beatrix's sister | loved | the painting you gave me"))
    candidates, _ = model_only([source], llm, history=history)
    assert ["Beatrix hosted her sister", "Beatrix's sister loved the painting Rosalind gave her"] == texts(candidates)


@pytest.mark.parametrize("content, atom, why", [
    ("I'm off to the park later. Your empathy will help people.", "Beatrix | has | great empathy", "about the listener"),
    ("I got a new job. What kind of dog did you adopt last week?", "Beatrix | adopted | a dog", "from a question"),
    ("The talk was so powerful and really meaningful to me.", "Beatrix | felt | so powerful and meaningful", "no concrete fact"),
    ("This necklace is super special to me, a gift from my grandma.", "Beatrix | says | this necklace is special to", "cut off"),
    ("My kids are great and I love them so much.", "she | loves | them", "pronoun subject"),
    ("I'm determined to make it work, whatever happens.", "Beatrix | is determined to | make it work", "no concrete fact"),
    ("We all have unique paths in life.", "Beatrix | all have | unique paths", "no concrete fact"),
    ("That hike was magical, I will never forget it.", "Beatrix | will never forget | it", "no concrete fact"),
    ("Look at this! My book shelf, with many books on it.", "Beatrix's book shelf with many books on it | shares | a photo",
     "a shared photo"),
])
def test_the_gate_drops_what_no_note_taker_keeps(content, atom, why):
    history = [turn(1, "Hi Bea!", speaker="Rosalind")]
    candidates, outcomes = model_only([turn(2, content, speaker="Beatrix")], fake_llm(reply(atom)), history=history)
    assert ([], {why: 1}) == (texts(candidates), outcomes[2].dropped)


def test_glued_words_are_cut_and_the_rest_kept():
    source = turn(1, "I'm a data scientist, mostly Python, and I basically live in Jupyter notebooks.", speaker="Tobias")
    llm = fake_llm(reply("Tobias | is | data scientist mostly Python andIBasicallyliveinJupyter"))
    assert ["Tobias is a data scientist mostly Python"] == texts(model_only([source], llm)[0])


def test_a_request_to_an_assistant_keeps_the_rule_without_the_you():
    history = [turn(1, "有什么可以帮你？", speaker="AI", role="assistant")]
    source = turn(2, "我们组不用 ORM，所以你给我写代码千万别用 ORM。", speaker="林晓")
    candidates, _ = model_only([source], fake_llm(reply("林晓 | 要求 | 你写代码别用 ORM")), history=history)
    assert [("林晓要求写代码别用 ORM", "constraint")] == [(codec.canonical_text(c.record), c.record["kind"]) for c in candidates]


# --- notes taken from the turn's own words --------------------------------------------------------

def test_what_the_model_skips_is_taken_from_the_turn_itself():
    source = turn(1, "Yeah! I went to a LGBTQ support group yesterday and it was so powerful.")
    candidates, _ = extract.extract([source], fake_llm(reply()))
    assert [("Rosalind went to a LGBTQ support group", "event", "2023-05-07")] == [
        (codec.canonical_text(c.record), c.record["kind"], c.record.get("date")) for c in candidates]


def test_a_statement_the_model_covered_is_not_taken_twice():
    source = turn(1, "I went to a LGBTQ support group yesterday.")
    candidates, _ = extract.extract([source], fake_llm(reply("Rosalind | went to | a LGBTQ support group | yesterday")))
    assert ["Rosalind went to a LGBTQ support group"] == texts(candidates)


@pytest.mark.parametrize("content", [
    "Wow, that's so cool! It takes courage to talk about it.",
    "I'm so proud of you for taking part, that charity race sounds great!",
    "Sharing our stories isn't always easy, but it matters.",
])
def test_small_talk_gives_no_notes_of_its_own(content):
    history = [turn(1, "I ran a charity race last Saturday.", speaker="Beatrix")]
    assert [] == texts(extract.extract([turn(2, content)], fake_llm(reply()), history=history)[0])


def test_a_chinese_statement_the_model_skipped_becomes_a_note_about_the_speaker():
    source = turn(1, "有，我对虾过敏，虾仁、虾滑都不能碰。", speaker="林晓", ts="2026-09-22T20:00:00")
    candidates, _ = extract.extract([source], fake_llm(reply()))
    assert [("林晓", "林晓对虾过敏，虾仁、虾滑都不能碰", "constraint")] == [
        (c.record["subject"], codec.canonical_text(c.record), c.record["kind"]) for c in candidates]


def test_sentences_are_cut_at_their_ends_not_inside_numbers_or_file_names():
    content = "Cool. It's stuck at 0.71 AUC, Anika wants 0.75! I moved to plain .py scripts. 我对虾过敏。香菜不行！"
    assert ["Cool.", "It's stuck at 0.71 AUC, Anika wants 0.75!", "I moved to plain .py scripts.", "我对虾过敏。",
            "香菜不行！"] == text.sentences(content)


def test_a_person_named_mid_sentence_is_the_subject_of_what_the_turn_says_of_them():
    source = turn(1, "Perfect, we already run vLLM. Oh, and Anika told us today she's leaving in September to join a startup.",
                  speaker="Tobias", ts="2026-07-02T10:00:00")
    candidates, _ = extract.extract([source], fake_llm(reply("Tobias | runs | vLLM")))
    assert ("Anika", "2026-09") in [(c.record["subject"], c.record.get("date")) for c in candidates]


def test_a_chinese_she_after_a_named_person_is_that_person():
    source = turn(1, "晚上一般不喝了，要陪豆豆。她是我女儿，今年6岁，这学期刚上一年级。", speaker="林晓", ts="2026-09-02T20:00:00")
    candidates, _ = extract.extract([source], fake_llm(reply()))
    assert ("豆豆", "豆豆是林晓的女儿，6岁，这学期刚上一年级") in [  # "今年" is the note's time, not its text
        (c.record["subject"], codec.canonical_text(c.record)) for c in candidates]


def test_national_day_is_october_of_the_year_the_sentence_means():
    assert ("2026-10", "2026-10") == (timeparse.resolve("国庆", "2026-09-20", True), timeparse.resolve("国庆", "2026-10-20", False))


def test_a_note_from_the_turn_has_a_verb_and_an_object_for_the_lifecycle_to_compare():
    source = turn(1, "Big news: I'm moving to Denver in August!", speaker="Tobias", ts="2026-06-25T10:00:00")
    (note,) = extract.extract([source], fake_llm(reply()))[0]
    assert ("Tobias", "is moving to", "Denver", "2026-08") == (
        note.record["subject"], note.record["predicate"], note.record["object"], note.record.get("date"))


@pytest.mark.parametrize("phrase, ts, future, expected", [
    ("the offsite is Thursday next week", "2026-05-27T10:00:00", True, "2026-06-04"),  # not a week from today
    ("I tweaked my knee on a long run Sunday", "2026-06-10T10:00:00", False, "2026-06-07"),
    ("the party is on Friday", "2026-06-10T10:00:00", True, "2026-06-12"),
    ("mid-August, we get the keys on the 14th", "2026-06-25T10:00:00", None, "2026-08-14"),
    ("we get the keys in August", "2026-06-25T10:00:00", None, "2026-08"),
    ("Sunday", "2026-06-10T10:00:00", None, None),  # a bare weekday in a sentence that does not say when
    ("we sat in the sun", "2026-06-10T10:00:00", False, None),  # "sat" and "sun" are words here
])
def test_weekdays_and_days_of_the_month_are_read_in_their_sentence(phrase, ts, future, expected):
    found = timeparse.find(phrase, ts, future)
    assert expected == (found[-1][1] if found else None)


@pytest.mark.parametrize("content, expected", [
    ("Right now I'm setting up a small RAG thing for the claims team.",
     "Tobias is setting up a small RAG thing for the claims team right now"),
    ("For deployment we're wrapping it in a FastAPI service.", "Tobias's team is wrapping it in a FastAPI service for deployment"),
    ("Been training since March.", "Tobias has been training since March"),
    ("Thought about just throwing them at GPT.", "Tobias thought about just throwing them at GPT"),
    ("Gonna start pottery classes in the spring.", "Tobias is going to start pottery classes in the spring"),
    ("Wanna learn the guitar.", "Tobias wants to learn the guitar"),
    ("Dance is pretty much my go-to for stress relief.", "Tobias's go-to for stress relief is dance"),
])
def test_a_note_from_chat_puts_the_speaker_first_and_spells_out_contractions(content, expected):
    source = turn(1, content, speaker="Tobias", ts="2026-06-10T10:00:00")
    assert [expected] == texts(extract.extract([source], fake_llm(reply()))[0])


def test_a_note_whose_object_only_repeats_its_subject_is_dropped():
    source = turn(1, "It's on the 21st next month, my first one ever.", speaker="Tobias", ts="2026-05-27T10:00:00")
    candidates, outcomes = model_only([source], fake_llm(reply("my first one ever | | my first one ever")))
    assert ([], {"repeats its subject": 1}) == (texts(candidates), outcomes[1].dropped)


def test_a_liking_taken_from_the_turn_is_a_preference_with_its_polarity():
    source = turn(1, "I love sci-fi movies, especially Interstellar and Blade Runner 2049.", speaker="Bob")
    (note,) = extract.extract([source], fake_llm(reply()))[0]
    assert ("Bob", "loves", "preference", "like") == (
        note.record["subject"], note.record["predicate"], note.record["kind"], note.record.get("sentiment"))


def test_a_chinese_note_keeps_its_facts_without_the_small_talk_around_them():
    history = [turn(1, "有什么可以帮你？", speaker="AI", role="assistant")]
    source = turn(2, "你好呀～我叫林晓，在一家做支付的公司写后端，主要用 Go。帮我看看这个查询怎么优化？谢谢🙏", speaker="林晓")
    llm = fake_llm(reply("林晓 | | 你好呀～我叫林晓，在一家做支付的公司写后端，主要用 Go"))
    assert ["林晓在一家做支付的公司写后端，主要用 Go"] == texts(model_only([source], llm, history=history)[0])


def test_a_chinese_note_of_only_small_talk_is_dropped():
    history = [turn(1, "有什么可以帮你？", speaker="AI", role="assistant")]
    source = turn(2, "对了，明天 staging 要重启，记一下。谢谢🙏 好了我去开早会了，回头聊。", speaker="林晓")
    candidates, outcomes = model_only([source], fake_llm(reply("林晓 | | 谢谢🙏 好了我去开早会了，回头聊")), history=history)
    assert ([], {"small talk": 1}) == (texts(candidates), outcomes[2].dropped)


def test_a_chinese_line_glued_from_words_the_turn_never_said_gives_way_to_the_turn_s_clause():
    source = turn(1, "7月我们全家刚去了趟大理，她第一次骑了马，回来讲了一个星期。下个月中旬我要去厦门出差。",
                  speaker="林晓", ts="2026-09-02T10:00:00")
    llm = fake_llm(reply("林晓 | 希望在大理骑个够， | 希望在厦门出差 | 7月"))
    candidates, outcomes = extract.extract([source], llm, settings=Settings(extract_rules_cover=1.0))
    assert "not the turn's words" in outcomes[1].dropped
    # 她 is someone the turns before named: her part is cut, the family's trip stays
    assert ("7月林晓全家刚去了趟大理，回来讲了一个星期", "2026-07") in [
        (codec.canonical_text(c.record), c.record.get("date")) for c in candidates]


def test_a_digit_inside_chinese_is_checked_as_a_number_not_as_the_whole_run():
    from memdb.extraction.ground import ground
    assert None is ground({"subject": "林晓", "object": "7月林晓全家刚去了趟大理"}, "7月我们全家刚去了趟大理", {"林晓"},
                          extractive=True)
    assert "entity not in source: '9'" == ground({"subject": "林晓", "object": "9月林晓全家去了大理"}, "7月我们全家去了大理",
                                                 {"林晓"}, extractive=True)


def test_a_sentence_that_only_dates_the_one_before_lends_it_its_date():
    source = turn(1, "Oh, and I finally signed up for a half marathon. It's on the 21st next month, my first one ever.",
                  speaker="Tobias", ts="2026-05-27T08:50:00")
    candidates, outcomes = extract.extract([source], fake_llm(reply()))
    assert [("Tobias finally signed up for a half marathon", "2026-06-21")] == [
        (codec.canonical_text(c.record), c.record.get("date")) for c in candidates]
    assert {"dates the note before": 1} == outcomes[1].dropped


def test_a_time_that_is_all_the_object_says_dates_the_note_and_keeps_its_words():
    source = turn(1, "Been training since March.", speaker="Tobias", ts="2026-05-27T08:50:00")
    (note,) = extract.extract([source], fake_llm(reply()))[0]
    assert ("Tobias has been training since March", "2026-03") == (codec.canonical_text(note.record), note.record.get("date"))


def test_a_turn_the_rules_cover_is_not_sent_to_the_model():
    llm = fake_llm(reply("Tobias | likes | something else"))
    source = turn(1, "I'm moving to Denver in August with my partner Emil.", speaker="Tobias", ts="2026-06-25T10:00:00")
    candidates, _ = extract.extract([source], llm)
    assert ([], ["Tobias is moving to Denver with his partner Emil"]) == (llm.calls, texts(candidates))


def test_a_turn_the_rules_cover_poorly_goes_to_the_model():
    llm = fake_llm(reply("Tobias | prefers | green tea"))
    candidates, _ = extract.extract([turn(1, "Green tea, every single time.", speaker="Tobias")], llm)
    assert (1, ["Tobias prefers green tea"]) == (len(llm.calls), texts(candidates))


def test_the_listeners_name_on_a_turn_that_only_calls_them_is_the_models_slip():
    history = [turn(0, "How long have you two been together?", speaker="Beatrix")]
    source = turn(1, "Seven years already! Thanks, Beatrix!", speaker="Rosalind")
    candidates, outcomes = model_only([source], fake_llm(reply("Beatrix | has been married | seven years")), history=history)
    assert [] == texts(candidates)
    assert "the listener's name on the speaker's words" in outcomes[1].dropped


def test_a_contraction_split_over_two_slots_is_joined():
    candidates, _ = model_only([turn(1, "I won't eat shellfish, ever.")],
                               fake_llm(reply("Rosalind | won | 't eat shellfish")))
    assert ["Rosalind won't eat shellfish"] == texts(candidates)


def test_a_chinese_day_that_is_the_subject_keeps_its_date():
    source = turn(1, "今天是我的生日，准备晚上去吃火锅。", speaker="林晓", ts="2026-03-14T09:00:00")
    candidates, _ = extract.extract([source], fake_llm(reply()))
    assert ["2026年3月14日是林晓的生日，准备晚上去吃火锅"] == [codec.canonical_text(c.record) for c in candidates]


def test_gonna_be_without_a_subject_is_not_the_speaker():
    source = turn(1, "Gonna be a long night. I'm repainting the hallway.", speaker="Wren")
    candidates, _ = extract.extract([source], fake_llm(reply()))
    assert ["Wren is repainting the hallway"] == [codec.canonical_text(c.record) for c in candidates]


def test_a_chinese_part_about_someone_only_a_pronoun_names_is_cut():
    source = turn(1, "他月底退休，之后店里的账就归我管了。", speaker="林晓", ts="2026-03-14T09:00:00")
    candidates, _ = extract.extract([source], fake_llm(reply()))
    assert ["店里的账就归林晓管了"] == [codec.canonical_text(c.record) for c in candidates]


@pytest.mark.parametrize("said, expected", [
    ("My sister drove me to the ferry at dawn.", ["Beatrix's sister drove her to the ferry at dawn"]),
    ("Knitting's a calm way to clear my head.", ["Beatrix finds knitting a calm way to clear her head"]),
    ("Folk music is so warm - it really speaks to me.", ["Folk music speaks to Beatrix"]),
    ("I kept one souvenir, my brass compass. A sailor gave it to me in Bergen.",
     ["Beatrix kept one souvenir", "A sailor gave Beatrix's brass compass to her in Bergen"]),
    ("I'm lucky to have my wife and twins.", ["Beatrix is lucky to have her wife and twins"]),
    ("So proud of you! 🎉 I signed the lease on a pottery studio.", ["Beatrix signed the lease on a pottery studio"]),
    # "it" never stands for a place after "in" or a role after "as", nor for what "she" gave
    ("We spent the day together as a family - I'll never forget it!", []),
    ("This brooch is special to me - a gift from my aunt in my home town. She gave it to me at twelve.", []),
    ("Your glazes are gorgeous -- it reminds me of the sea.", []),   # an opinion, the speaker only its listener
    ("Really made me think about sleeping more.", []),
    ("I'm going to make it happen.", []),                               # "it" of an idiom stands for nothing
    ("Doing a budget first makes sense.", []),                          # a verdict, not what the speaker finds
    ("Joining a choir where I'm welcomed, heard and trusted has really helped me.",
     ["Beatrix found that joining a choir where she is welcomed, heard and trusted has helped her"]),
    ("Honestly don't underestimate the winter.", []),                   # advice to the listener
    ("I had to pause the cello, which I use for calm and focus.",
     ["Beatrix had to pause the cello, which she uses for calm and focus"]),   # the relative clause keeps its thing
    ("I'd love to help in any way I can.", []),                         # an offer to the listener
    ("I'd like to thank everyone who came to it.", []),
    ("Losing my job pushed me to open the bakery.", ["Beatrix found that losing her job pushed her to open the bakery"]),
])
def test_what_acts_on_the_speaker_and_what_it_stands_for_are_notes(said, expected):
    source = turn(1, said, speaker="Beatrix")
    candidates, _ = extract.extract([source], fake_llm(reply()))
    assert expected == [codec.canonical_text(c.record) for c in candidates]


@pytest.mark.parametrize("said, expected", [
    ("先不用。跟你讲个八卦，老周要走了，公司把他调去昆明。", ["老周要走了，公司把他调去昆明"]),
    ("对了还有个事，家里那只黑猫煤球，四岁了，最近老掉毛，咋办？", ["林晓的黑猫煤球四岁了，最近老掉毛"]),
    ("忘了跟你说，周末的露营最后没去成，下雨了。", ["林晓周末的露营最后没去成，下雨了"]),
    ("好嘞～另外我是夜猫子，一般两点才睡。", ["林晓是夜猫子，一般两点才睡"]),
    ("羊肉我是不吃的。", ["林晓不吃羊肉"]),                      # the thing said first, written as a note says it
    ("厦门那个展我不去了。", ["厦门那个展林晓不去了"]),     # 不…了 ends a plan: the words stay as said
    ("嗯，恩，我喜欢唱歌和爬山。", ["林晓喜欢唱歌和爬山"]),
    ("提醒一下，花生我不能碰，会过敏。", ["林晓不能碰花生，会过敏"]),
])
def test_chinese_chat_openers_topics_and_people_called_by_surname(said, expected):
    source = turn(1, said, speaker="林晓", ts="2026-03-14T09:00:00")
    candidates, _ = extract.extract([source], fake_llm(reply()))
    assert expected == [codec.canonical_text(c.record) for c in candidates]


def test_a_chinese_value_is_the_thing_not_its_determiner():
    from memdb.extraction import slots
    assert "Redis" == slots.read("林晓", "的团队不用任何 Redis 缓存").get("value")


def test_a_word_that_holds_an_attribute_phrase_names_no_attribute():
    from memdb.extraction import slots
    assert "lives_in" != slots.read("林晓", "每天加班到十点，真的扛不住").get("attribute")
    assert ("lives_in", "杭州") == tuple(slots.read("林晓", "住在杭州").get(k) for k in ("attribute", "value"))


def test_a_chinese_note_asks_only_when_its_own_words_ask():
    source = turn(1, "家里那只兔子，两岁了，换了好几种草都不吃，咋办？我们的接口要怎么做限流？", speaker="林晓", ts="2026-03-14T09:00:00")
    candidates, _ = extract.extract([source], fake_llm(reply()))
    assert ["林晓的兔子两岁了，换了好几种草都不吃"] == [codec.canonical_text(c.record) for c in candidates]


def test_cutting_a_part_about_him_keeps_the_words_of_the_rest_apart():
    source = turn(1, "周五 code review 的时候我跟组长提一下，他对缓存这块特别敏感。", speaker="林晓", ts="2026-03-09T09:00:00")
    candidates, _ = extract.extract([source], fake_llm(reply()))
    assert ["林晓周五 code review 的时候跟组长提一下"] == [codec.canonical_text(c.record) for c in candidates]


def test_a_time_cut_out_that_leaves_two_sentences_glued_gives_no_note():
    source = turn(1, "Oh nice, I booked the van for May 3rd, two days before we get the keys.", speaker="Beatrix")
    candidates, outcomes = extract.extract([source], fake_llm(reply()))
    assert [] == [codec.canonical_text(c.record) for c in candidates]


def test_with_more_statements_than_room_the_ones_that_name_something_are_kept():
    said = ("I'm looking for a bigger workshop. I've seen a few places already. I even found one with a loading "
            "bay! Oh, and I went to Ghent last weekend. The trip was lovely.")
    candidates, _ = extract.extract([turn(1, said, speaker="Tobias")], fake_llm(reply()))
    texts = [codec.canonical_text(c.record) for c in candidates]
    assert 3 == len(texts) and "Tobias went to Ghent" in texts


def test_and_i_starts_a_statement_of_the_speakers_own():
    source = turn(1, "Our choir concert is on June 4 and I got roped into baking for 30 people.", speaker="Beatrix")
    candidates, _ = extract.extract([source], fake_llm(reply()))
    assert [("Beatrix's choir concert is on June 4", "2023-06-04"), ("Beatrix got roped into baking for 30 people", None)] == [
        (codec.canonical_text(c.record), c.record.get("date")) for c in candidates]  # its own tense: this June


def test_a_verb_whose_time_was_cut_out_leaves_the_note_short():
    from memdb.extraction import gate
    assert gate.cut_short("is and got roped into baking")
    assert not gate.cut_short("is on June 4")


def test_a_reminder_opens_nothing_and_allergic_needs_its_cause():
    source = turn(1, "Just a reminder: shellfish gives me hives, I'm allergic.", speaker="Beatrix")
    candidates, _ = extract.extract([source], fake_llm(reply()))
    assert ["Shellfish gives Beatrix hives"] == [codec.canonical_text(c.record) for c in candidates]


def test_a_name_later_in_a_note_takes_its_verb_as_one_person_does():
    said = "I'm going to keep pursuing my goals and I hope you do too, Tobias!"
    candidates, _ = model_only([turn(2, said, speaker="Beatrix")],
                               fake_llm(reply("Beatrix | is going to keep | pursuing her goals and she hopes Tobias do too")),
                               history=[turn(1, "Any plans for the spring?", speaker="Tobias")])
    assert ["Beatrix is going to keep pursuing her goals and she hopes Tobias does too"] == [
        codec.canonical_text(c.record) for c in candidates]


@pytest.mark.parametrize("said, atom, expected", [
    ("I loved the tarts. After the opening in March you should take a long weekend at the coast.",
     "Tobias | should take | a long weekend at the coast", "advice to the listener"),
    ("I tasted them all. With those pastries you can build a loyal crowd at the Saturday market.",
     "Tobias | can build | a loyal crowd at the Saturday market", "advice to the listener"),
    ("I remember you moved to Lyon in 2019.", "Tobias | moved to | Lyon in 2019", None),   # his news stays
])
def test_advice_and_cheer_for_the_listener_are_no_note_of_theirs(said, atom, expected):
    before = turn(1, "Long week at the bakery.", speaker="Tobias")
    candidates, outcomes = model_only([turn(2, said, speaker="Beatrix")], fake_llm(reply(atom)), history=[before])
    assert (expected, not expected) == (next(iter(outcomes[2].dropped), None), bool(candidates))



def test_a_passive_without_its_be_gets_it():
    candidates, _ = model_only([turn(1, "I'm painting again, inspired by the autumn colours.")],
                               fake_llm(reply("Rosalind | inspired by | the autumn colours")))
    assert ["Rosalind is inspired by the autumn colours"] == texts(candidates)


def test_glad_to_meet_you_split_over_two_slots_is_small_talk():
    candidates, outcomes = model_only([turn(1, "谢谢你，很高兴认识，我最近在学书法。", speaker="林晓")],
                                      fake_llm(reply("林晓 | 感谢 | 认识")))
    assert ([], {"small talk": 1}) == (texts(candidates), outcomes[1].dropped)


def test_a_trouble_without_its_cause_is_no_note_whatever_day_it_names():
    said = turn(1, "你好，朋友。今天有一些烦恼，想跟你聊聊。", speaker="林晓")
    answer = turn(2, "你好呀，发生什么事了？", speaker=None, role="assistant")
    candidates, _ = extract.extract([said, answer], fake_llm(reply()))
    assert [] == texts(candidates)
