"""Retrieval: fusion SQL (both modes), sanitising, Chinese, scoping, superseded atoms,
evidence dedup, grouped recall, budgeted context, profile, events and degradation."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import memdb
from memdb.settings import Settings
from memdb import codec
from memdb.db import connection
from memdb.db import rows as db_rows
from memdb.search import fusion as search_fusion
from memdb.search import query as search_query
from tests.conftest import HashEmbedder
from memdb.lifecycle import absorb


def add_atom(mem, user: str, record: dict, turn_ids: list[int], confidence: float = 0.9) -> int:
    """Store an atom as extraction would: its time is its latest source turn's."""
    record = codec.validate(record)
    ts = max(t["ts"] for t in mem.turns(turn_ids, user=user))
    vector = mem.embedder.embed([codec.canonical_text(record)])[0] if mem.embedder else None
    with connection.write(mem.conn):
        return absorb.absorb(mem.conn,
                             absorb.Incoming(user=user, record=record,
                                             confidence=confidence, turn_ids=turn_ids,
                                             ts=ts, vector=vector),
                             absorb.Engine(mem.settings))[1]


@pytest.fixture
def alice(mem):
    turns = mem.add([
        {"content": "We use PostgreSQL for everything, and Go on the backend.", "ts": "2026-10-01T10:00:00"},
        {"content": "I really love science fiction films like Interstellar.", "ts": "2026-10-02T10:00:00"},
        {"content": "Never touch the auth module, the mobile app depends on it.", "ts": "2026-10-03T10:00:00"},
        {"content": "我喜欢喝美式咖啡。", "ts": "2026-10-04T10:00:00"},
        {"content": "We shipped v2 last Wednesday.", "ts": "2026-10-05T10:00:00"},
    ], user="alice", session="s1")
    atoms = {
        "db": add_atom(mem, "alice", {"kind": "fact", "subject": "backend", "predicate": "database is", "object": "PostgreSQL"}, [turns[0]]),
        "go": add_atom(mem, "alice", {"kind": "fact", "subject": "backend", "predicate": "language is", "object": "Go"}, [turns[0]]),
        "scifi": add_atom(mem, "alice", {"kind": "preference", "subject": "Alice", "predicate": "likes", "object": "science fiction films", "sentiment": "like"}, [turns[1]]),
        "auth": add_atom(mem, "alice", {"kind": "constraint", "subject": "auth module", "predicate": "must not be changed", "object": "mobile app depends on it"}, [turns[2]]),
        "coffee": add_atom(mem, "alice", {"kind": "preference", "subject": "Alice", "predicate": "喜欢", "object": "美式咖啡", "sentiment": "like", "lang": "zh"}, [turns[3]]),
        "v2": add_atom(mem, "alice", {"kind": "event", "subject": "team", "predicate": "shipped", "object": "v2", "date": "2026-09-30", "when": "last Wednesday"}, [turns[4]]),
    }
    return turns, atoms


@pytest.mark.parametrize("fusion", ["weighted", "rrf"])
def test_both_fusion_modes_rank_the_matching_atom_first(mem, alice, fusion):
    _, atoms = alice
    hits = mem.search("which database does the backend use", user="alice", layer="atoms", fusion=fusion)
    assert atoms["db"] == hits[0].id
    assert "atom" == hits[0].layer and hits[0].score > 0


def test_fusion_sql_is_one_statement_with_both_sides():
    sides = search_fusion.Sides(atom_keyword="atom_match", atom_vector="atom_vector_hits",
                                turn_keyword="turn_match", turn_vector="turn_vector_hits")
    sql = search_fusion.fusion_sql(sides, Settings(), include_superseded=False)
    assert 1 == sql.count("with ") and "atoms_fts" in sql and "turns_fts" in sql
    assert "limit :pool" in sql and "user = :user" in sql


def test_fusion_sql_reads_the_vector_side_from_json_whoever_ranked_it():
    # vec0 KNN or the in-memory copy: index/vectors.py answers, the statement reads its list.
    sides = search_fusion.Sides(atom_keyword="atom_match", atom_vector="atom_vector_hits")
    sql = search_fusion.fusion_sql(sides, Settings(), include_superseded=False)
    assert "json_each(:atom_vector_hits)" in sql and "atoms_vec" not in sql


def test_weighted_alpha_moves_between_keyword_and_vector(mem, alice):
    keyword_only = mem.search("PostgreSQL", user="alice", layer="atoms", alpha=1.0)
    vector_only = mem.search("PostgreSQL", user="alice", layer="atoms", alpha=0.0)
    assert keyword_only[0].text == vector_only[0].text == "backend database is PostgreSQL"
    # The keyword top is normalised to 1, then scaled by atom weight and confidence (0.9 -> 0.95).
    assert pytest.approx(mem.settings.atom_weight * 0.95) == keyword_only[0].score


@pytest.mark.parametrize("query", [
    '"', '""', "NEAR(a b)", "a AND OR NOT b", "*", "content:foo", "u:alice", "(((", ")", "^start",
    "'; drop table turns; --", "x" * 100_000, "!!!???...", "🎉🔥💯", "\x00", "foo\x00bar", "\ud800",
    "。，、！？", "", "   ", "-", "a:b:c", "{u content}: x", "NOT", "AND", "col : \"x\" *",
])
def test_hostile_queries_never_raise(mem, alice, query):
    for layer in ("atoms", "turns", "both"):
        assert isinstance(mem.search(query, user="alice", layer=layer), list)
    assert isinstance(mem.context(query, user="alice", budget=50), str)


def test_chinese_query_finds_chinese_atom(mem, alice):
    _, atoms = alice
    hits = mem.search("咖啡", user="alice", layer="atoms")
    assert atoms["coffee"] == hits[0].id


def test_search_is_scoped_to_user(mem, alice):
    (bob_turn,) = mem.add([{"content": "Bob also uses PostgreSQL and likes coffee 咖啡"}], user="bob")
    bob_atom = add_atom(mem, "bob", {"kind": "fact", "subject": "Bob", "predicate": "database is", "object": "PostgreSQL"}, [bob_turn])
    for layer in ("atoms", "turns", "both"):
        hits = mem.search("PostgreSQL coffee 咖啡", user="bob", layer=layer)
        assert hits and all(h.turn_ids == [bob_turn] for h in hits)
    assert bob_atom not in [h.id for h in mem.search("PostgreSQL", user="alice", layer="atoms")]


def test_superseded_atoms_are_excluded_unless_asked(mem, alice):
    _, atoms = alice
    with connection.write(mem.conn):
        db_rows.set_atom_status(mem.conn, atoms["db"], "superseded")
    assert atoms["db"] not in [h.id for h in mem.search("PostgreSQL database", user="alice", layer="atoms")]
    hits = mem.search("PostgreSQL database", user="alice", layer="atoms", include_superseded=True)
    assert atoms["db"] == hits[0].id and "superseded" == hits[0].status


def test_both_layer_never_spends_two_slots_on_one_turn(mem, alice):
    turns, atoms = alice
    hits = mem.search("backend PostgreSQL Go database language", user="alice", layer="both", k=5)
    covering_first_turn = [h for h in hits if h.turn_ids == [turns[0]]]
    assert 1 == len(covering_first_turn)


def test_unextracted_turns_are_found_in_both_layer(mem, alice):
    (tid,) = mem.add([{"content": "My sister Mira lives in Lisbon."}], user="alice")
    hits = mem.search("where does Mira live", user="alice", layer="both")
    assert [tid] == hits[0].turn_ids and "turn" == hits[0].layer


def test_context_respects_budget_and_renders_dates(mem, alice):
    block = mem.context("what database and language does the backend use", user="alice", budget=40, layer="atoms")
    header, *lines = block.splitlines()
    assert mem.settings.context_header == header
    assert lines and lines[0].startswith("2026-10-01 · fact · backend")
    assert sum(mem.count_tokens(line + "\n") for line in [header, *lines]) <= 40
    assert len(mem.context("backend", user="alice", budget=1000).splitlines()) > len(lines)


def test_context_groups_atoms_from_the_same_turn(mem, alice):
    block = mem.context("PostgreSQL", user="alice", budget=200, layer="atoms", k=1)
    assert "backend database is PostgreSQL" in block and "backend language is Go" in block


def test_context_brings_the_turn_behind_a_note_when_it_says_more(mem, alice):
    block = mem.context("what database do we use?", user="alice", budget=200, k=1)
    assert ["2026-10-01 · fact · backend database is PostgreSQL",
            "2026-10-01 · user: We use PostgreSQL for everything, and Go on the backend."] == block.splitlines()[1:3]
    assert "backend language is Go" not in block  # the turn shown whole already says it


def test_context_shows_conflicting_atoms_together(mem, alice):
    turns, atoms = alice
    (tid,) = mem.add([{"content": "Actually we use MySQL", "ts": "2026-10-01T10:00:00"}], user="alice")
    other = add_atom(mem, "alice", {"kind": "fact", "subject": "backend", "predicate": "database is", "object": "MySQL"}, [tid])
    with connection.write(mem.conn):
        for atom_id in (atoms["db"], other):
            db_rows.set_atom_status(mem.conn, atom_id, "conflicting")
        mem.conn.execute("insert into atom_conflicts values (?, ?, ?)", (atoms["db"], other, "2026-10-01T10:00:00"))
    block = mem.context("PostgreSQL", user="alice", budget=300, layer="atoms", k=1)
    assert "PostgreSQL" in block and "MySQL" in block and "conflicts" in block


def test_profile_and_events(mem, alice):
    _, atoms = alice
    profile = mem.profile("alice")
    assert {atoms[k] for k in ("db", "go", "scifi", "auth", "coffee")} == {a.id for a in profile}
    events = mem.events("alice")
    assert [atoms["v2"]] == [a.id for a in events] and "2026-09-30" == events[0].valid_from
    assert [] == mem.events("alice", since="2026-10-01")


def test_intent_classifier():
    assert "time" == search_query.intent("When did Rosalind go to the support group?")
    assert "time" == search_query.intent("v2 什么时候发布的？")
    assert "preference" == search_query.intent("Any movie you would recommend?")
    assert "lookup" == search_query.intent("What database do we use?")
    assert "open" == search_query.intent("tell me something fun")


def test_vector_failure_falls_back_to_keywords(mem, alice, caplog):
    _, atoms = alice
    mem.conn.execute("drop table atoms_vec")
    mem.conn.execute("create table atoms_vec (atom_id, user, active, embedding)")  # a broken vec table
    with caplog.at_level(logging.WARNING, logger="memdb"):
        hits = mem.search("PostgreSQL", user="alice", layer="atoms")
    assert atoms["db"] == hits[0].id
    assert "keywords only" in caplog.text
    with pytest.raises(memdb.SearchError):
        mem.search("PostgreSQL", user="alice", layer="atoms", strict=True)


def test_both_sides_failing_returns_empty_and_logs(mem, alice, caplog):
    mem.conn.execute("drop table atoms_vec")
    mem.conn.execute("drop table atoms_fts")
    with caplog.at_level(logging.ERROR, logger="memdb"):
        assert [] == mem.search("PostgreSQL", user="alice", layer="atoms")
    assert "returning nothing" in caplog.text


def test_keyword_only_memory_searches(db_path):
    with memdb.open(db_path, embedder=None, extract="defer") as mem:
        (tid,) = mem.add([{"content": "The staging server is called Hermes."}], user="u")
        assert [tid] == [h.id for h in mem.search("Hermes", user="u")]
        assert True is mem.stats()["keyword_only"]


def test_bad_search_arguments_name_the_field(mem):
    for kwargs, field in [({"k": 0}, "k"), ({"layer": "all"}, "layer"), ({"fusion": "max"}, "fusion"),
                          ({"alpha": 2}, "alpha"), ({"user": 3}, "user")]:
        args = {"user": "alice", **kwargs}
        with pytest.raises(memdb.InvalidInput, match=field):
            mem.search("x", **args)


def test_turn_lines_name_the_role_when_no_speaker(mem):
    mem.add([{"role": "assistant", "content": "Your train leaves at 9.", "ts": "2026-10-05T10:00:00"}], user="u")
    assert [mem.settings.context_header, "2026-10-05 · assistant: Your train leaves at 9."] == mem.context(
        "train", user="u", budget=100).splitlines()


def test_turns_the_prefilter_skipped_rank_lower(mem):
    first, second = mem.add([{"content": "hello hello train"}, {"content": "hello hello train"}], user="u")
    with connection.write(mem.conn):
        db_rows.set_turn_state(mem.conn, first, "skipped", "greeting")
    hits = mem.search("hello train", user="u", layer="turns")
    assert [second, first] == [h.id for h in hits]
    assert pytest.approx(0.5) == hits[1].score / hits[0].score


def test_atom_is_found_by_words_of_its_source_turn(mem, alice):
    _, atoms = alice
    hits = mem.search("Interstellar", user="alice", layer="atoms")
    assert atoms["scifi"] == hits[0].id and "Alice likes science fiction films" == hits[0].text


def test_forgetting_one_source_removes_its_words_from_the_atom_index(mem, alice):
    turns, atoms = alice
    (extra,) = mem.add([{"content": "Sci-fi again: Dune is my favourite zorblax."}], user="alice")
    with connection.write(mem.conn):
        db_rows.add_sources(mem.conn, atoms["scifi"], [extra])
    assert atoms["scifi"] == mem.search("zorblax", user="alice", layer="atoms")[0].id
    mem.forget(turn_id=extra, user="alice")
    assert [] == mem.conn.execute("select rowid from atoms_fts where atoms_fts match 'zorblax'").fetchall()
    assert atoms["scifi"] == mem.search("Interstellar", user="alice", layer="atoms")[0].id


@pytest.mark.parametrize("call", [
    lambda m: m.search("x", user="alice"), lambda m: m.context("x", user="alice"),
    lambda m: m.add([{"content": "x"}], user="alice"), lambda m: m.profile("alice"),
    lambda m: list(m.export("alice")), lambda m: m.stats(),
])
def test_a_closed_memory_raises_instead_of_answering_nothing(db_path, embedder, call):
    mem = memdb.open(db_path, embedder=embedder, extract="defer")
    mem.close()
    with pytest.raises(memdb.MemdbError, match=r"is closed; open the file again with memdb.open\(\)"):
        call(mem)


def _bob_and_alice(mem):
    """Bob's notes all start with his name; Alice's never say it, so file-wide "bob" is rare."""
    mem.add([{"content": f"Alice note {i} about the {w} project"} for i, w in enumerate(
        ("go", "rust", "billing", "search", "mobile", "auth", "infra", "docs", "ci", "data"))], user="alice")
    said = mem.add([{"role": "user", "name": "Bob", "content": c} for c in (
        "Hi there!", "I love sci-fi movies, especially Interstellar and Blade Runner 2049.",
        "Please never suggest recipes with cilantro.", "I work as a software engineer in Berlin.",
        "Last month I researched quantum computing for a work project.")], user="bob")
    for turn, record in zip(said[2:], (
            {"kind": "constraint", "subject": "Bob", "predicate": "hates", "object": "cilantro"},
            {"kind": "fact", "subject": "Bob", "predicate": "works as", "object": "software engineer in Berlin"},
            {"kind": "fact", "subject": "Bob", "predicate": "researched", "object": "quantum computing"})):
        add_atom(mem, "bob", record, [turn])
    return said


def test_a_name_in_most_of_a_users_rows_does_not_carry_the_ranking(db_path):
    with memdb.open(db_path, embedder=None, extract="defer") as mem:
        said = _bob_and_alice(mem)
        hits = mem.search("what movies does Bob like?", user="bob")
        assert ("turn", said[1]) == (hits[0].layer, hits[0].id)
        assert [said[1]] == [h.id for h in hits]  # "bob" alone matches nothing: it says nothing here


def test_a_name_is_still_searchable_for_a_user_with_few_rows(db_path):
    settings = Settings(common_term_rows=4)
    with memdb.open(db_path, embedder=None, extract="defer", settings=settings) as mem:
        mem.add([{"content": "someone else"}], user="alice")  # the rule applies in files of many users
        (tid,) = mem.add([{"role": "user", "name": "Bob", "content": "Bob here, I like tea"}], user="bob")
        assert [tid] == [h.id for h in mem.search("Bob", user="bob")]


def test_search_stops_at_the_relevance_floor_instead_of_filling_k(mem):
    _bob_and_alice(mem)
    assert [] == mem.search("peanut allergies", user="bob", k=10)
    assert "" == mem.context("peanut allergies", user="bob", budget=400)
    hits = mem.search("quantum computing research", user="bob", k=10)
    assert "Bob researched quantum computing" == hits[0].text and all(h.score > 0 for h in hits)
    assert len(hits) < 10


def test_the_floor_keeps_every_hit_when_set_to_minus_one(db_path, embedder):
    settings = Settings(min_similarity=-1.0)
    with memdb.open(db_path, embedder=embedder, extract="defer", settings=settings) as mem:
        _bob_and_alice(mem)
        assert 5 == len(mem.search("peanut allergies", user="bob", k=5))


class NarrowEmbedder:
    """Cosines squeezed into [0.75, 1] as e5's are: every pair of texts looks related."""

    name, dim = "narrow-test", 65

    def __init__(self, baseline: float | None) -> None:
        self.words = HashEmbedder(dim=64)
        if baseline is not None:
            self.cosine_baseline = baseline

    def embed(self, texts: list[str]) -> np.ndarray:
        shared = np.full((len(texts), 1), np.sqrt(0.75), dtype=np.float32)
        return np.hstack([shared, np.sqrt(0.25) * self.words.embed(texts)]).astype(np.float32)


def test_cosines_are_measured_from_the_embedders_baseline(tmp_path):
    # Unrelated texts at cosine 0.75 pass a floor of 0.2 unless search knows 0.75 means nothing:
    # from the embedder's constant (query_baseline=False), or from the query's own cosine to
    # everyday statements (the default), which needs no constant at all.
    found = {}
    constant = Settings(query_baseline=False, min_similarity=0.2)
    for name, baseline, settings in [("none", None, constant), ("constant", 0.75, constant), ("query", None, Settings())]:
        with memdb.open(tmp_path / f"{name}.db", embedder=NarrowEmbedder(baseline), extract="defer",
                        settings=settings) as mem:
            _bob_and_alice(mem)
            found[name] = [h.text for h in mem.search("peanut allergies", user="bob", k=10)]
    assert (5, [], []) == (len(found["none"]), found["constant"], found["query"])


def test_a_chinese_question_searches_its_content_bigrams_not_its_function_words():
    from memdb.index import fts
    assert ["最近", "尝试", "些健", "健身", "方法"] == fts.query_terms("最近我在尝试哪些健身的方法？")
    assert ["你好", "好吗"] == fts.query_terms("你好吗")  # nothing but function words: all of them
    assert ["bob", "like"] == fts.query_terms("What does Bob like?")


def test_a_query_naming_a_day_finds_what_was_said_that_day(db_path):
    # Neither side knows when a row was said: before the date side, the day's turn shared no
    # word with the question and was not even a candidate.
    with memdb.open(db_path, embedder=None, extract="defer") as mem:
        said = mem.add([{"content": "我们聊了电影。", "ts": "2026-10-01T10:00:00"},
                        {"content": "今天去爬山了，风景很好。", "ts": "2026-10-04T10:00:00"},
                        {"content": "我们聊了音乐。", "ts": "2026-10-05T10:00:00"}], user="u", session="s")
        assert said[1] == mem.search("在10月4日我们聊了什么？", user="u", layer="turns")[0].id
        off = search_fusion.search(mem.conn, search_fusion.Query("在10月4日我们聊了什么？", user="u", k=5, layer="turns"),
                                   search_fusion.Engine(Settings(date_weight=0)))
        assert said[1] not in [h.id for h in off]


def test_query_days_are_single_days_resolved_from_the_users_time():
    now = "2026-10-08T12:00:00"
    assert ["2026-10-04"] == search_fusion.query_days("在10月4日我们聊了什么？", now)
    assert ["2026-10-07"] == search_fusion.query_days("what did we talk about yesterday?", now)
    assert [] == search_fusion.query_days("上周我们聊了什么", now)  # a week is no day
    assert [] == search_fusion.query_days("what happened last month?", now)


def test_date_weight_must_be_a_non_negative_number():
    with pytest.raises(memdb.MemdbError, match="date_weight"):
        Settings(date_weight=-1)


def test_a_query_naming_a_day_finds_the_atoms_drawn_from_that_day(db_path):
    with memdb.open(db_path, embedder=None, extract="defer") as mem:
        said = mem.add([{"content": "Never touch the auth module.", "ts": "2026-10-03T10:00:00"},
                        {"content": "I told my sister about the trip.", "ts": "2026-10-04T10:00:00"}], user="u")
        auth = add_atom(mem, "u", {"kind": "constraint", "subject": "auth module", "predicate": "must not be",
                                   "object": "touched"}, [said[0]])
        add_atom(mem, "u", {"kind": "event", "subject": "user", "predicate": "told", "object": "sister about the trip"},
                 [said[1]])
        assert auth == mem.search("what did I tell you on October 3rd?", user="u", layer="atoms")[0].id


def test_an_atom_takes_the_place_of_its_own_raw_turn_and_never_pushes_evidence_out():
    from memdb.db.rows import Hit
    from memdb.search.fusion import distinct_evidence

    def turn(id_, score):
        return Hit(id=id_, layer="turn", text=f"turn {id_}", score=score, turn_ids=[id_], ts="2026-01-01")

    def atom(id_, score, of):
        return Hit(id=id_, layer="atom", text=f"note of {of}", score=score, turn_ids=[of], ts="2026-01-01")

    ranked = [turn(1, 0.9), turn(2, 0.8), atom(10, 0.7, of=1), atom(11, 0.6, of=1), turn(3, 0.5)]
    assert [("atom", 10, 0.9), ("turn", 2, 0.8), ("turn", 3, 0.5)] == [
        (h.layer, h.id, h.score) for h in distinct_evidence(ranked)]
    # an atom that outranks its turn keeps its own place, and the turn takes no second slot
    assert [("atom", 10, 0.95), ("turn", 2, 0.8)] == [
        (h.layer, h.id, h.score) for h in distinct_evidence([atom(10, 0.95, of=1), turn(2, 0.8), turn(1, 0.7)])]
