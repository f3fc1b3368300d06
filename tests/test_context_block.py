"""The context block a new user pastes into a prompt (issue 26): a header, a relevance floor that
holds for it, no assistant pleasantries, nothing superseded shown as current; and the floor's
per-query baseline with the real default embedder (e5), on invented memories."""

from __future__ import annotations

import pytest

import memdb
from memdb import codec
from memdb.db import connection
from memdb.lifecycle import absorb
from memdb.search import relevance
from tests.chats import TURNS

PLEASANTRIES = {content for role, content in TURNS if role == "assistant"}


@pytest.fixture(scope="module")
def signe(tmp_path_factory, cache):
    """Signe's turns, stored with the default embedder (no extraction: turns only)."""
    path = tmp_path_factory.mktemp("ctx") / "signe.db"
    with memdb.open(path, user="signe", extract="defer") as mem:
        mem.add([{"role": role, "content": content, "ts": f"2026-05-{i + 1:02d}T09:00:00",
                  **({"name": "Signe"} if role == "user" else {})} for i, (role, content) in enumerate(TURNS)])
        yield mem


@pytest.mark.embedder
def test_a_loose_but_real_match_is_found(signe):
    found = [h.text for h in signe.search("what orchestration tool do we use?", k=10)]
    assert "We are migrating our pipelines from Airflow to Dagster this quarter." in found


@pytest.mark.embedder
def test_nonsense_finds_nothing_and_gets_no_block(signe):
    assert ([], "") == (signe.search("zzzz qqq"), signe.context("zzzz qqq"))


@pytest.mark.embedder
def test_the_assistants_pleasantries_are_never_hits_nor_context(signe):
    for query in ("nice to meet you", "anything else?", "what should I cook for Signe tonight?", "加油"):
        assert not PLEASANTRIES & {h.text for h in signe.search(query, k=20)}
        assert not any(p in signe.context(query, budget=1000) for p in PLEASANTRIES)


@pytest.mark.embedder
def test_a_clear_answer_is_not_padded_to_the_budget(signe):
    header, *lines = signe.context("what data warehouse do we use?", budget=1000).splitlines()
    assert signe.settings.context_header == header
    assert "2026-05-08 · Signe: Our warehouse is Snowflake, and dbt runs the transformations." == lines[0]
    assert len(lines) < len([t for t in TURNS if t[0] == "user"]) // 2


@pytest.mark.embedder
def test_the_floor_is_measured_from_the_querys_own_baseline(signe):
    nonsense, question = signe.embedder.embed_query(["zzzz qqq", "what orchestration tool do we use?"])
    assert relevance.baseline(signe.embedder, nonsense) > relevance.baseline(signe.embedder, question) + 0.02


@pytest.mark.parametrize("role, content, expected", [
    ("assistant", "Noted! Anything else?", True),
    ("assistant", "Nice to meet you, Ines!", True),
    ("assistant", "加油！", True),
    ("assistant", "好的，我会手写 SQL，不用 ORM。", False),
    ("assistant", "Your dentist appointment is on Tuesday at 3pm.", False),
    ("user", "Thanks!", False),  # the user's own small talk is the pre-filter's business
])
def test_what_counts_as_a_pleasantry(role, content, expected):
    assert expected == relevance.pleasantry(role, content)


# ---------------------------------------------------------------- superseded facts


def tell(mem: memdb.Memory, record: dict, ts: str) -> tuple[str, int]:
    """Store a turn saying record, then absorb the record as the pipeline would."""
    line = codec.canonical_text(record)
    (turn_id,) = mem.add([{"role": "user", "name": "Noor", "content": line, "ts": ts}])
    vector = mem.embedder.embed([line])[0]
    with connection.write(mem.conn):
        return absorb.absorb(mem.conn,
                             absorb.Incoming(user=mem.user, record=record,
                                             confidence=0.8, turn_ids=[turn_id],
                                             ts=ts, vector=vector),
                             absorb.Engine(mem.settings, copies=mem.copies, term_counts=mem.term_counts))


def test_a_superseded_fact_is_never_shown_as_current(tmp_path, embedder):
    with memdb.open(tmp_path / "noor.db", user="noor", embedder=embedder, extract="defer") as mem:
        like = {"kind": "preference", "subject": "Noor", "predicate": "likes", "object": "coffee", "sentiment": "like"}
        hate = {**like, "predicate": "hates", "object": "coffee now, it keeps her awake", "sentiment": "dislike"}
        old = tell(mem, like, "2026-01-10T09:00:00")
        new = tell(mem, hate, "2026-02-12T09:00:00")
        assert ("new", "superseded") == (old[0], new[0])  # the lifecycle replaced the old atom
        block = mem.context("coffee", budget=1000, layer="turns").splitlines()
        old_turn = [line for line in block if line.endswith(("Noor likes coffee", "Noor likes coffee (no longer holds; "
                                                             "later: Noor hates coffee now, it keeps her awake)"))]
        assert ["2026-01-10 · Noor: Noor likes coffee (no longer holds; later: Noor hates coffee now, it keeps her "
                "awake)"] == old_turn
        shown = mem.context("coffee", budget=1000, layer="atoms")
        assert "Noor hates coffee now" in shown and "· Noor likes coffee" not in shown
