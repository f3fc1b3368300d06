"""The lifecycle: dedup (merge), conflicts (supersede or mark), history and freshness.

Driven without the model: turns are stored with extract="defer" and hand-written records are
absorbed against them, with vectors from the real MiniLM embedder where meaning matters and
from the hashing embedder (or none) elsewhere.
"""

from __future__ import annotations

import pytest

import memdb
from memdb import codec
from memdb.settings import Settings
from memdb.db import connection
from memdb.db import rows as db_rows
from memdb.index import copies
from memdb.lifecycle import absorb
from memdb.lifecycle import relation
from memdb.models import embedders


@pytest.fixture(scope="module")
def minilm():
    return embedders.load("minilm")


@pytest.fixture(params=[2_000, 1], ids=["vec0", "copied"])
def mini(tmp_path, minilm, request):
    """A Memory with MiniLM vectors; dedup ranks them through vec0, or (copied) through the
    in-memory copy of index/copies.py, which every user has here."""
    settings = Settings(vector_copy_min=request.param)
    with memdb.open(tmp_path / "mini.db", user="alice", embedder=minilm, extract="defer", settings=settings) as m:
        yield m


def pref(obj: str, predicate: str = "likes", sentiment: str = "like", subject: str = "Alice") -> dict:
    return {"kind": "preference", "subject": subject, "predicate": predicate, "object": obj, "sentiment": sentiment}


def fact(predicate: str, obj: str, subject: str = "Alice", kind: str = "fact") -> dict:
    return {"kind": kind, "subject": subject, "predicate": predicate, "object": obj}


def tell(mem, record: dict, ts: str, *, confidence: float = 0.8, user: str = "alice") -> tuple[str, int]:
    """Store a turn saying record, then absorb the record as the pipeline would."""
    line = codec.canonical_text(record)
    (turn_id,) = mem.add([{"role": "user", "name": "Alice", "content": line, "ts": ts}], user=user)
    vector = mem.embedder.embed([line])[0] if mem.embedder else None
    mem.copies.sync(mem.conn, "atoms", user)
    with connection.write(mem.conn):
        return absorb.absorb(mem.conn,
                             absorb.Incoming(user=user, record=record,
                                             confidence=confidence, turn_ids=[turn_id],
                                             ts=ts, vector=vector),
                             absorb.Engine(mem.settings, copies=mem.copies, term_counts=mem.term_counts))


def row(mem, atom_id: int) -> dict:
    keys = ("status", "superseded_by", "valid_to", "seen", "last_seen")
    values = mem.conn.execute(
        'select "status", "superseded_by", "valid_to", "seen", "last_seen" from "atoms_v" where "id" = ?',
        (atom_id,)).fetchone()
    return dict(zip(keys, values))


def vector_active(mem, atom_id: int) -> int:
    return mem.conn.execute("select active from atoms_vec where atom_id = ?", (atom_id,)).fetchone()[0]


def count(mem, table: str) -> int:
    return mem.conn.execute(f'select count(*) from "{table}"').fetchone()[0]


# ---------------------------------------------------------------- dedup


COFFEE_TEN = [
    pref("coffee"), pref("coffee", "enjoys"), pref("coffee", "loves"), pref("coffee", "is a fan of"),
    pref("drinking coffee", "really likes"), pref("coffee", "adores"), pref("a good cup of coffee", "enjoys"),
    pref("her morning coffee", "loves"), pref("coffee", "is really into"), pref("coffee", "is fond of"),
]


@pytest.mark.embedder
def test_one_preference_in_ten_wordings_is_one_atom_seen_ten_times(mini):
    actions = [tell(mini, r, f"2026-03-{day:02d}T09:00:00") for day, r in enumerate(COFFEE_TEN, start=1)]
    assert ["new"] + ["merged"] * 9 == [a for a, _ in actions]
    assert {actions[0][1]} == {i for _, i in actions}
    atom = mini.get(actions[0][1])
    assert (10, 10, "active") == (atom.seen, len(atom.turn_ids), atom.status)
    assert ("2026-03-01T09:00:00", "2026-03-10T09:00:00") == (atom.first_seen, atom.last_seen)
    assert atom.confidence > 0.99
    assert 1 == count(mini, "atoms")


@pytest.mark.embedder
def test_two_distinct_facts_about_one_person_stay_two(mini):
    dog = tell(mini, fact("has", "a dog"), "2026-03-01T09:00:00")
    sister = tell(mini, fact("has", "a sister"), "2026-03-02T09:00:00")
    assert [("new", dog[1]), ("new", sister[1])] == [dog, sister]
    assert ["active", "active"] == [mini.get(i).status for i in (dog[1], sister[1])]


@pytest.mark.embedder
def test_same_statement_of_another_user_is_not_merged(mini):
    a = tell(mini, pref("coffee"), "2026-03-01T09:00:00", user="alice")
    b = tell(mini, pref("coffee"), "2026-03-01T09:00:00", user="bob")
    assert ("new", "new") == (a[0], b[0])
    assert a[1] != b[1]


def test_same_event_on_another_day_is_another_event(mem):
    first = tell(mem, {**fact("went", "hiking", kind="event"), "date": "2026-03-01"}, "2026-03-01T18:00:00")
    again = tell(mem, {**fact("went", "hiking", kind="event"), "date": "2026-04-01"}, "2026-04-01T18:00:00")
    retold = tell(mem, {**fact("went", "hiking", kind="event"), "date": "2026-04-01"}, "2026-04-02T18:00:00")
    assert ["new", "new", "merged"] == [first[0], again[0], retold[0]]
    assert again[1] == retold[1]


def test_keyword_only_mode_merges_exact_and_near_exact_repeats(tmp_path):
    with memdb.open(tmp_path / "kw.db", embedder=None, extract="defer") as mem:
        first = tell(mem, pref("coffee"), "2026-03-01T09:00:00")
        exact = tell(mem, pref("coffee"), "2026-03-02T09:00:00")
        near = tell(mem, pref("Coffee!"), "2026-03-03T09:00:00")
        chinese = tell(mem, pref("喝咖啡", "喜欢", subject="小王"), "2026-03-04T09:00:00")
        chinese_again = tell(mem, pref("喝咖啡", "很喜欢", subject="小王"), "2026-03-05T09:00:00")
        tea = tell(mem, pref("green tea"), "2026-03-06T09:00:00")
        assert ["new", "merged", "merged", "new", "merged", "new"] == [
            a for a, _ in (first, exact, near, chinese, chinese_again, tea)]
        assert 3 == mem.get(first[1], user="alice").seen
        assert first[1] != tea[1]


# ---------------------------------------------------------------- conflicts


@pytest.mark.embedder
def test_like_then_dislike_supersedes_and_keeps_the_old(mini):
    old = tell(mini, pref("coffee"), "2026-01-10T09:00:00")
    new = tell(mini, pref("coffee now, it hurts her stomach", "hates", "dislike"), "2026-02-12T09:00:00")
    assert ("superseded", "new") == (new[0], old[0])
    assert {"status": "superseded", "superseded_by": new[1], "valid_to": "2026-02-12T09:00:00"} == {
        k: v for k, v in row(mini, old[1]).items() if k in ("status", "superseded_by", "valid_to")}
    assert (0, 1) == (vector_active(mini, old[1]), vector_active(mini, new[1]))
    assert new[1] == mini.search("does Alice like coffee?", user="alice", layer="atoms")[0].id
    assert old[1] not in [h.id for h in mini.search("coffee", user="alice", layer="atoms")]
    assert old[1] in [h.id for h in mini.search("coffee", user="alice", layer="atoms", include_superseded=True)]
    assert [old[1], new[1]] == [a.id for a in mini.history(new[1])]
    assert [old[1], new[1]] == [a.id for a in mini.history(old[1])]
    assert (2, 2) == (count(mini, "atoms"), count(mini, "turns"))


@pytest.mark.embedder
def test_like_then_dislike_in_chinese_supersedes(mini):
    old = tell(mini, pref("咖啡", "喜欢", subject="小王"), "2026-01-10T09:00:00")
    new = tell(mini, pref("咖啡", "讨厌", "dislike", subject="小王"), "2026-02-12T09:00:00")
    assert "superseded" == new[0]
    assert ("superseded", new[1]) == (mini.get(old[1]).status, mini.get(old[1]).superseded_by)
    assert new[1] == mini.search("咖啡", user="alice", layer="atoms")[0].id
    assert [old[1], new[1]] == [a.id for a in mini.history(new[1])]


@pytest.mark.embedder
def test_a_plan_called_off_supersedes_the_plan(mini):
    plan = tell(mini, {**fact("signed up for", "the city half marathon", kind="event"), "date": "2026-06-21"},
                "2026-05-20T09:00:00")
    other = tell(mini, {**fact("went to", "the city museum", kind="event"), "date": "2026-05-18"}, "2026-05-20T09:05:00")
    off = tell(mini, fact("says", "the half marathon is off"), "2026-06-07T09:00:00")
    assert "superseded" == off[0]
    assert ("superseded", off[1]) == (mini.get(plan[1]).status, mini.get(plan[1]).superseded_by)
    assert "active" == mini.get(other[1]).status  # a plan it does not name stays


@pytest.mark.embedder
def test_a_cancellation_in_chinese_supersedes_the_trip(mini):
    trip = tell(mini, {**fact("国庆要去", "成都玩", subject="林晓", kind="event"), "date": "2026-10"}, "2026-09-20T09:00:00")
    off = tell(mini, fact("取消了", "成都的行程", subject="林晓", kind="event"), "2026-09-29T09:00:00")
    assert ("superseded", off[1]) == (mini.get(trip[1]).status, mini.get(trip[1]).superseded_by)


@pytest.mark.embedder
@pytest.mark.parametrize("habit, given_up", [
    (fact("是", "重度咖啡党，每天至少三杯美式", subject="林晓"), fact("说", "医生让林晓把咖啡戒了", subject="林晓")),
    (fact("drinks", "coffee every morning"), fact("quit", "coffee last month", kind="event")),
])
def test_giving_up_a_habit_supersedes_it(mini, habit, given_up):
    old = tell(mini, habit, "2026-09-02T09:00:00")
    new = tell(mini, given_up, "2026-10-08T09:00:00")
    assert ("superseded", new[1]) == (mini.get(old[1]).status, mini.get(old[1]).superseded_by)


@pytest.mark.embedder
def test_stopping_by_a_place_gives_up_nothing(mini):
    liked = tell(mini, pref("the corner bakery"), "2026-09-02T09:00:00")
    tell(mini, fact("stopped by", "the corner bakery", kind="event"), "2026-10-08T09:00:00")
    assert "active" == mini.get(liked[1]).status


@pytest.mark.embedder
def test_a_wish_called_off_supersedes_the_wish(mini):
    wish = tell(mini, pref("to go to the Hangzhou conference", "hopes", subject="Alice"), "2026-09-02T09:00:00")
    off = tell(mini, fact("says", "the Hangzhou conference is off"), "2026-10-08T09:00:00")
    assert ("superseded", off[1]) == (mini.get(wish[1]).status, mini.get(wish[1]).superseded_by)


@pytest.mark.embedder
def test_moving_city_supersedes_the_old_location(mini):
    berlin = tell(mini, fact("lives in", "Berlin"), "2025-06-01T09:00:00")
    hangzhou = tell(mini, fact("moved to", "Hangzhou", kind="event"), "2026-02-01T09:00:00")
    assert "superseded" == hangzhou[0]
    assert ("superseded", hangzhou[1], "2026-02-01T09:00:00") == (
        row(mini, berlin[1])["status"], row(mini, berlin[1])["superseded_by"], row(mini, berlin[1])["valid_to"])
    based = tell(mini, fact("is based in", "Hangzhou"), "2026-03-01T09:00:00")
    shanghai = tell(mini, fact("住在", "上海"), "2026-05-01T09:00:00")
    # A fact restating the move is new (the event stays true); the next city replaces that fact.
    assert ("new", "superseded") == (based[0], shanghai[0])
    assert "active" == mini.get(hangzhou[1]).status
    assert shanghai[1] == mini.get(based[1]).superseded_by


@pytest.mark.embedder
def test_changing_back_makes_a_chain_of_three_and_deletes_nothing(mini):
    like = tell(mini, pref("coffee"), "2026-01-01T09:00:00")
    hate = tell(mini, pref("coffee", "hates", "dislike"), "2026-02-01T09:00:00")
    again = tell(mini, pref("coffee again", "loves", "like"), "2026-03-01T09:00:00")
    assert ["new", "superseded", "superseded"] == [like[0], hate[0], again[0]]
    chain = mini.history(like[1])
    assert [like[1], hate[1], again[1]] == [a.id for a in chain]
    assert ["superseded", "superseded", "active"] == [a.status for a in chain]
    assert ["2026-02-01T09:00:00", "2026-03-01T09:00:00", None] == [a.valid_to for a in chain]
    assert [1, 1, 1] == [len(a.turn_ids) for a in chain]
    assert (3, 3) == (count(mini, "atoms"), count(mini, "atom_sources"))


@pytest.mark.embedder
def test_comparable_evidence_keeps_both_marked_conflicting(mini):
    like = tell(mini, pref("coffee"), "2026-03-01T09:00:00", confidence=0.8)
    hate = tell(mini, pref("coffee", "hates", "dislike"), "2026-03-01T09:20:00", confidence=0.7)
    assert "conflicting" == hate[0]
    assert ["conflicting", "conflicting"] == [mini.get(i).status for i in (like[1], hate[1])]
    assert [(hate[1], like[1])] == mini.conn.execute(
        'select "atom_id", "other_id" from "atom_conflicts"').fetchall()
    hits = {h.id: h for h in mini.search("coffee", user="alice", layer="atoms")}
    assert ([hate[1]], [like[1]]) == (hits[like[1]].conflicts, hits[hate[1]].conflicts)
    assert "conflicts with another statement" in mini.context("coffee", user="alice", layer="atoms")


@pytest.mark.embedder
def test_a_later_restatement_settles_a_conflict(mini):
    like = tell(mini, pref("coffee"), "2026-03-01T09:00:00")
    hate = tell(mini, pref("coffee", "hates", "dislike"), "2026-03-01T09:20:00")
    again = tell(mini, pref("coffee", "can't stand", "dislike"), "2026-03-09T09:00:00")
    assert ("merged", hate[1]) == again
    assert ("superseded", hate[1]) == (mini.get(like[1], user="alice").status, mini.get(like[1], user="alice").superseded_by)
    assert "active" == mini.get(hate[1], user="alice").status


def test_same_time_but_far_apart_confidence_is_not_comparable(mem):
    sure = tell(mem, fact("lives in", "Berlin"), "2026-03-01T09:00:00", confidence=0.9)
    unsure = tell(mem, fact("lives in", "Paris"), "2026-03-01T09:10:00", confidence=0.4)
    assert "superseded" == unsure[0]
    assert unsure[1] == mem.get(sure[1], user="alice").superseded_by


def test_an_older_statement_arriving_late_is_history_at_once(mem):
    now = tell(mem, fact("lives in", "Hangzhou"), "2026-03-01T09:00:00")
    before = tell(mem, fact("lives in", "Berlin"), "2025-01-01T09:00:00")
    assert "superseded" == before[0]
    assert ("active", "superseded", now[1]) == (
        mem.get(now[1], user="alice").status, mem.get(before[1], user="alice").status, mem.get(before[1], user="alice").superseded_by)


def test_distinct_values_of_an_open_predicate_never_conflict(mem):
    dog = tell(mem, fact("has", "a dog"), "2026-03-01T09:00:00")
    cat = tell(mem, fact("has", "a cat"), "2026-06-01T09:00:00")
    assert ("new", "new") == (dog[0], cat[0])
    assert "active" == mem.get(dog[1], user="alice").status


# ---------------------------------------------------------------- rules


@pytest.mark.parametrize("predicate, key", [
    ("lives in", "location"), ("is based in", "location"), ("moved to", "location"),
    ("currently lives in", "location"), ("is residing in", "location"), ("住在", "location"),
    ("搬到", "location"), ("works at", "employer"), ("works as", "occupation"), ("is married to", "relationship"),
    ("is from", "origin"), ("has", None), ("is", None), ("likes", None), ("works", None),
])
def test_predicates_map_to_attribute_keys(predicate, key):
    assert key == relation.attribute_key(fact(predicate, "x"))


@pytest.mark.parametrize("new, old, similarity, expected", [
    (pref("coffee", "enjoys"), pref("coffee"), 0.9, "duplicate"),
    (pref("coffee", "hates", "dislike"), pref("coffee"), 0.9, "conflict"),
    (pref("tea"), pref("coffee"), 0.8, "distinct"),
    (fact("has", "a sister"), fact("has", "a dog"), 0.65, "distinct"),
    (fact("has", "no dog"), fact("has", "a dog"), 0.8, "conflict"),
    (fact("lives in", "Berlin", subject="Bob"), fact("lives in", "Berlin"), 0.95, "distinct"),
    ({**pref("ORM", "no", "neutral"), "kind": "constraint"}, pref("ORM", "avoids", "dislike"), 0.7, "duplicate"),
    (fact("walks", "a dog"), fact("has", "a dog"), 0.75, "distinct"),
    (fact("inclusivity", "support", kind="event"), fact("inclusivity", "support really spoke to me"), 0.92, "duplicate"),
    (fact("moved to", "Hangzhou", kind="event"), fact("lives in", "Hangzhou"), 0.9, "distinct"),
    (fact("moved to", "Hangzhou", kind="event"), fact("lives in", "Berlin"), 0.6, "conflict"),
    (fact("lives in", "Hangzhou"), fact("moved to", "Berlin", kind="event"), 0.6, "distinct"),
    (fact("special", "nature and family time so special"), fact("special", "to me"), 0.8, "distinct"),
    (pref("counseling as a career", "looking into"), fact("keen on", "counseling", kind="event"), 0.94, "duplicate"),
    (pref("hiking"), fact("went", "hiking", kind="event"), 0.85, "distinct"),
])
def test_relation_rules(new, old, similarity, expected):
    assert expected == relation.relation(new, old, similarity, Settings())


# ---------------------------------------------------------------- views and freshness


def test_atoms_view_and_vector_flag_follow_the_status(mem):
    old = tell(mem, fact("works at", "Acme"), "2025-01-01T09:00:00")
    new = tell(mem, fact("works at", "Globex"), "2026-01-01T09:00:00")
    assert [("superseded", new[1]), ("active", None)] == mem.conn.execute(
        'select "status", "superseded_by" from "atoms_v" order by "id"').fetchall()
    assert (0, 1) == (vector_active(mem, old[1]), vector_active(mem, new[1]))


def test_older_event_ranks_below_an_equally_matching_newer_one(mem):
    old = tell(mem, {**fact("went", "hiking in the Alps", kind="event"), "date": "2025-01-05"}, "2025-01-05T18:00:00")
    new = tell(mem, {**fact("went", "hiking in the Alps", kind="event"), "date": "2026-01-05"}, "2026-01-05T18:00:00")
    hits = mem.search("hiking in the Alps", user="alice", layer="atoms")
    assert [new[1], old[1]] == [h.id for h in hits]
    assert hits[0].score > hits[1].score


def test_facts_do_not_fade_while_preferences_do(mem):
    # Identical lines stored a year apart (written directly: dedup would merge them), so
    # only freshness can tell their scores apart.
    line = mem.embedder.embed(["Alice allergic peanuts"])[0]
    ids = {}
    with connection.write(mem.conn):
        for kind, when in [("fact", "2025-01-01T09:00:00"), ("fact", "2026-01-01T09:00:00"),
                           ("preference", "2025-01-01T09:00:00"), ("preference", "2026-01-01T09:00:00")]:
            record = {"kind": kind, "subject": "Alice", "predicate": "allergic", "object": "peanuts"}
            ids[kind, when[:4]] = db_rows.insert_atom(mem.conn, user="alice", record=record, confidence=0.8,
                                                    turn_ids=[], first_seen=when, last_seen=when, vector=line)
    score = {h.id: h.score for h in mem.search("allergic peanuts", user="alice", layer="atoms")}
    assert score[ids["fact", "2025"]] == pytest.approx(score[ids["fact", "2026"]])
    assert score[ids["preference", "2025"]] < score[ids["preference", "2026"]]


def test_a_date_written_into_a_chinese_note_does_not_keep_its_cancellation_from_ending_it():
    from memdb.lifecycle.relation import relation
    from memdb.settings import Settings
    old = {"subject": "苏禾", "object": "2026年1月9日苏禾的部门聚餐，在一家湘菜馆", "kind": "event", "when": "这周五", "lang": "zh"}
    new = {"subject": "苏禾", "object": "部门聚餐取消了", "kind": "event", "polarity": "ended", "lang": "zh"}
    assert "conflict" == relation(new, old, 0.8, Settings())
