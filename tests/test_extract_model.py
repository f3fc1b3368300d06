"""End to end with the real bundled model (Qwen2.5-Coder-0.5B-Instruct Q4_K_M): a few turns, checked
for structure, provenance, grounding and resolved dates. Slow-ish (seconds per test): marked `model`."""

from __future__ import annotations

import importlib.util

import pytest

from memdb import codec
from memdb.settings import Settings
from memdb.extraction import records
from memdb.models import llama
from memdb.extraction import prompt
from memdb.extraction import ground
from memdb.extraction import extract

pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                       reason="llama-cpp-python is not installed: the real model cannot run"),
]


@pytest.fixture(scope="module")
def llm():
    model = llama.load_llm()
    model.model()  # load now, so each test times only its own extraction
    return model


def _turn(id_: int, content: str, speaker: str | None, ts: str) -> records.Turn:
    return records.Turn(id=id_, user="u", session="s", role="user", speaker=speaker, content=content, ts=ts)


def test_chinese_turn_gives_grounded_chinese_atoms_with_a_dated_release(llm):
    turn = _turn(41, "我们后端用 Go，数据库是 PostgreSQL，禁止 ORM。对了上周三刚做完 v2 发布。", None, "2026-11-26T10:00:00")
    candidates, outcomes = extract.extract([turn], llm)
    assert "done" == outcomes[41].state
    assert candidates
    for cand in candidates:
        assert cand.record == codec.validate(cand.record)
        assert ([41], "zh") == (cand.turn_ids, cand.record["lang"])
        # extractive=True: a rule's note is the turn's own clause by design ("whole line pasted" is a model check)
        assert None is ground.ground(cand.record, turn.content, {"用户"}, extractive=True)
    lines = " ".join(codec.canonical_text(c.record) for c in candidates)
    assert ["Go", "PostgreSQL", "ORM"] == [w for w in ("Go", "PostgreSQL", "ORM") if w in lines], lines  # the whole stack
    release = [c for c in candidates if "v2" in codec.canonical_text(c.record) or "发布" in codec.canonical_text(c.record)]
    assert release, lines
    assert ("上周三", "2026-11-18") == (release[0].record.get("when"), release[0].record.get("date"))


def test_english_turns_give_atoms_about_the_right_speaker_with_dates(llm):
    ts = "2023-05-08T13:56:00"
    turns = [_turn(1, "Hey Bea! Good to see you! How have you been?", "Rosalind", ts),
             _turn(2, "I went to a LGBTQ support group yesterday and it was so powerful.", "Rosalind", ts),
             _turn(3, "Wow, that's cool! Yeah, I painted that lake sunrise last year! It's special to me.", "Beatrix", ts)]
    candidates, outcomes = extract.extract(turns, llm)
    assert {1: "skipped", 2: "done", 3: "done"} == {k: v.state for k, v in outcomes.items()}
    lines = [(c.turn_ids, codec.canonical_text(c.record), c.record.get("date")) for c in candidates]
    group = [c for c in candidates if "LGBTQ" in codec.canonical_text(c.record)]
    sunrise = [c for c in candidates if "sunrise" in codec.canonical_text(c.record)]
    assert group and sunrise, lines
    assert ([2], "Rosalind", "2023-05-07") == (group[0].turn_ids, group[0].record["subject"], group[0].record.get("date")), lines
    assert ([3], "Beatrix", "2022") == (sunrise[0].turn_ids, sunrise[0].record["subject"], sunrise[0].record.get("date")), lines
    for cand in candidates:
        assert cand.record == codec.validate(cand.record) and "en" == cand.record["lang"]


def test_the_prompt_prefix_is_read_once_and_lazy_grammar_sampling_matches_llama_cpp(llm):
    ts = "2023-05-08T13:56:00"
    every_turn = Settings(extract_rules_cover=1.0)  # these turns the rules alone would cover
    extract.extract([_turn(10, "I adopted a puppy last week.", "Ivo", ts)], llm, settings=every_turn)
    before = dict(llm.stats)
    second = _turn(11, "My sister moved to Denver in March.", "Ivo", ts)
    extract.extract([second], llm, settings=every_turn)
    read = llm.stats["prompt_tokens"] - before["prompt_tokens"]
    evaluated = llm.stats["prompt_eval_tokens"] - before["prompt_eval_tokens"]  # llama.cpp's own count
    rendered = llama._render_chatml(prompt.prompt_prefix("en")).removesuffix("<|im_start|>assistant\n")
    prefix = len(llm.model().tokenize(rendered.encode(), add_bos=True, special=True))
    assert evaluated <= read - prefix + 8, (evaluated, read, prefix)  # the fixed prefix was not re-read

    # The lazy grammar check yields exactly what llama-cpp-python's full-vocabulary sampler yields.
    messages = prompt.build_messages([second], [], [second])[:-1]  # no prefill: both generate it all
    grammar = llm._grammar(prompt.output_schema(1))
    tokens = llm.model().tokenize(llama._render_chatml(messages).encode(), add_bos=True, special=True)
    mine, _ = llama._greedy(llm.model(), tokens, llama._grammar_text(grammar), 60, 0)
    theirs = llm.model().create_completion(tokens, grammar=grammar, temperature=0.0, max_tokens=60,
                                           stop=["<|im_end|>"])["choices"][0]["text"]
    assert theirs == mine
