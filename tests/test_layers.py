"""L2 scenarios and the L3 persona card: kept current as atoms are absorbed, read through the
API, the views and the CLI, and rewritten by forget so no forgotten word survives in them."""

from __future__ import annotations

import json
import sqlite3

import pytest

import memdb
from memdb.cli import main
from memdb import flow
from memdb.db import connection
from memdb.extraction.records import Candidate
from memdb.layers import scenarios, store as layers
from tests.conftest import HashEmbedder
from tests.test_forget import _raw_bytes, _tables_mentioning

TS = "2026-05-01T10:00:00"


def put(mem: memdb.Memory, user: str, predicate: str, obj: str, turn_ids: list[int], *, kind: str = "fact",
        subject: str = "Ann", ts: str = TS) -> tuple[str, int]:
    record = {"kind": kind, "subject": subject, "predicate": predicate, "object": obj}
    with connection.write(mem.conn):
        return flow.absorb(mem, Candidate(record, 0.9, turn_ids), user=user, ts=ts,
                           vector=mem.embedder.embed([f"{subject} {predicate} {obj}"])[0])


@pytest.fixture
def turns(mem):
    return mem.add([{"role": "user", "name": "Ann", "content": f"turn {i}"} for i in range(12)], user="ann")


@pytest.fixture
def payment(mem, turns):
    """Three notes on the payment refactor and two on baking, each from its own turn."""
    ids = [put(mem, "ann", p, o, [turns[i]])[1] for i, (p, o) in enumerate([
        ("works on", "the payment module refactor"),
        ("tests", "the payment module refactor code"),
        ("plans", "the payment module refactor release"),
        ("likes", "sourdough bread baking"),
        ("bakes", "sourdough bread baking loaves"),
    ])]
    return ids


def test_atoms_about_one_thread_join_one_scenario_and_the_rest_another(mem, payment):
    found = {tuple(s.atom_ids) for s in mem.scenarios(user="ann")}
    assert {tuple(payment[:3]), tuple(payment[3:])} == found
    refactor = next(s for s in mem.scenarios(user="ann") if payment[0] in s.atom_ids)
    texts = {mem.get(a, user="ann").text for a in payment[:3]}
    assert refactor.title in texts and refactor.title_atom in payment[:3]
    # the state line is the newest held members other than the title, each an atom's own text
    assert set(refactor.state.split("; ")) <= texts - {refactor.title}
    assert 3 == refactor.held == refactor.members


def test_the_views_read_from_stock_sqlite3(mem, payment, db_path):
    mem.conn.execute("pragma wal_checkpoint(truncate)")
    plain = sqlite3.connect(db_path)
    rows = plain.execute("select user, held, atom_ids from scenarios_v order by id").fetchall()
    assert [("ann", 3, ",".join(map(str, payment[:3]))), ("ann", 2, ",".join(map(str, payment[3:])))] == rows
    assert 3 == plain.execute("select count(*) from scenario_atoms_v where scenario_id = 1").fetchone()[0]
    persona = plain.execute("select atom_id, line from persona_v order by rank").fetchall()
    assert persona and all(line.endswith(f"(#{atom_id})") for atom_id, line in persona)


def test_a_superseding_atom_joins_the_replaced_ones_scenario_and_the_old_leaves_the_state(mem, turns):
    old = put(mem, "ann", "lives in", "Lisbon", [turns[0]], ts="2026-01-01T10:00:00")[1]
    action, new = put(mem, "ann", "lives in", "Porto", [turns[2]], ts="2026-06-01T10:00:00")
    assert "superseded" == action
    (scenario,) = [s for s in layers.read(mem.conn, 'where s."user" = ?', ("ann",)) if old in s.atom_ids]
    assert {old, new} == set(scenario.atom_ids)
    assert old != scenario.title_atom and old not in scenario.state_atoms
    assert "Ann lives in Lisbon" not in (scenario.title, *scenario.state.split("; "))
    assert "Ann lives in Lisbon" not in mem.persona(user="ann")
    assert "Ann lives in Porto" in mem.persona(user="ann")


def test_heat_rises_with_mentions_and_halves_each_half_life(mem, turns):
    put(mem, "ann", "works on", "the payment module refactor", [turns[0]], ts="2026-01-01T00:00:00")
    put(mem, "ann", "has", "a payment module refactor deadline", [turns[1]], ts="2026-01-31T00:00:00")
    (scenario,) = mem.scenarios(user="ann")
    assert 1.5 == pytest.approx(scenario.heat)  # the first mention is 30 days (one half-life) older
    put(mem, "ann", "works on", "the payment module refactor", [turns[2]], ts="2026-01-31T00:00:00")  # a repeat
    assert 2.0 <= mem.scenarios(user="ann")[0].heat
    assert scenario.heat / 2 == pytest.approx(layers.heat_now(scenario, "2026-04-01T00:00:00", 60.0))


def test_two_scenarios_that_turn_out_to_be_one_merge(mem, turns):
    mem.settings.scenario_merge_similarity = 0.5  # the test embedder's cosines run lower than e5's
    a = put(mem, "ann", "works on", "the payment module refactor", [turns[0]])[1]
    b = put(mem, "ann", "has", "a payment module refactor deadline", [turns[1]])[1]
    with connection.write(mem.conn):  # as if they had been placed apart
        apart = layers.create(mem.conn, "ann", TS)
        layers.move_members(mem.conn, [b], apart)
        for sid in (layers.scenario_of(mem.conn, a), apart):
            layers.refresh(mem.conn, sid, mem.settings)
    assert 2 == len(layers.read(mem.conn, 'where s."user" = ?', ("ann",)))
    third = put(mem, "ann", "reviews", "the payment module refactor deadline", [turns[2]])[1]
    assert [sorted({a, b, third})] == [s.atom_ids for s in layers.read(mem.conn, 'where s."user" = ?', ("ann",))]


def test_a_scenario_past_its_size_splits_where_its_members_fall_in_two(db_path, embedder):
    settings = memdb.Settings(scenario_max_members=4)
    with memdb.open(db_path, embedder=embedder, extract="defer", settings=settings) as mem:
        turns = mem.add([{"content": f"turn {i}"} for i in range(6)], user="ann")
        ids = [put(mem, "ann", p, o, [t])[1] for t, (p, o) in zip(turns, [
            ("works on", "payment module refactor"), ("tests", "payment module refactor code"),
            ("bakes", "sourdough bread loaves"), ("likes", "sourdough bread baking")])]
        with connection.write(mem.conn):  # one scenario holding two threads
            for atom_id in ids[1:]:
                layers.move_members(mem.conn, [atom_id], layers.scenario_of(mem.conn, ids[0]))
            layers.delete(mem.conn, [r[0] for r in mem.conn.execute(
                'select "id" from "scenarios" s where not exists (select 1 from "scenario_atoms" m '
                'where m."scenario_id" = s."id")')])
            layers.refresh(mem.conn, layers.scenario_of(mem.conn, ids[0]), settings)
        put(mem, "ann", "reviews", "payment module refactor tests", [turns[4]])
        groups = sorted(sorted(s.atom_ids) for s in layers.read(mem.conn, 'where s."user" = ?', ("ann",)))
    assert [ids[:2] + [ids[-1] + 1], ids[2:]] == groups


def test_scenarios_search_and_context_blocks(mem, payment):
    (hit, *_) = mem.search("payment module refactor", user="ann", layer="scenarios")
    assert "scenario" == hit.layer and set(hit.turn_ids) == {t for a in payment[:3] for t in mem.get(a, user="ann").turn_ids}
    plain = mem.context("payment module refactor", user="ann")
    blocked = mem.context("payment module refactor", user="ann", scenarios=True)
    assert "scenario ·" not in plain  # the default context() is what it was
    header, *members = blocked.splitlines()[1:4]
    assert header.endswith(f"scenario · {hit.text.split(' — ')[0]}")
    assert all("payment" in line for line in members)


def test_persona_ranks_preferences_first_cites_atoms_and_keeps_its_budget(mem, turns):
    fact = put(mem, "ann", "works as", "a nurse", [turns[0]])[1]
    liked = put(mem, "ann", "likes", "climbing", [turns[1]], kind="preference")[1]
    put(mem, "ann", "likes", "jazz", [turns[2]], kind="preference", subject="Bob")  # someone else
    put(mem, "ann", "visited", "Rome", [turns[3]], kind="event")
    card = mem.persona(user="ann")
    assert [f"Ann likes climbing (#{liked})", f"Ann works as a nurse (#{fact})"] == card.splitlines()
    assert [f"Ann likes climbing (#{liked})"] == mem.persona(user="ann", budget=9).splitlines()
    first = mem.context("nurse", user="ann", persona=True).splitlines()
    assert [f"persona · {line}" for line in card.splitlines()] == first[1:3]
    assert "persona ·" not in mem.context("nurse", user="ann")


@pytest.mark.parametrize("how", ["atom", "turn", "user"])
def test_forget_rewrites_scenarios_and_persona_and_leaves_no_word(mem, turns, payment, db_path, how):
    secret = "qzj7refactorword"
    sid = layers.scenario_of(mem.conn, payment[0])
    atom = put(mem, "ann", "names", f"the payment module refactor {secret}", [turns[9]])[1]
    assert sid == layers.scenario_of(mem.conn, atom)
    with connection.write(mem.conn):  # make it the title and a persona line for certain
        mem.conn.execute('update "atoms" set "seen" = 9 where "id" = ?', (atom,))
        scenarios.place(mem.conn, user="ann", atom_id=atom, vector=None, ts=TS, settings=mem.settings)
    assert secret.encode() in _raw_bytes(mem, db_path) and secret in mem.persona(user="ann")
    assert {"scenarios", "persona"} <= set(_tables_mentioning(mem.conn, secret))
    mem.forget(**{"atom": {"atom_id": atom}, "turn": {"turn_id": turns[9]}, "user": {}}[how], user="ann")
    assert [] == _tables_mentioning(mem.conn, secret)
    assert secret.encode() not in _raw_bytes(mem, db_path)
    held = layers.read(mem.conn, 'where s."user" = ?', ("ann",))
    if how == "user":
        assert ([], []) == (held, layers.card(mem.conn, "ann"))
    else:
        assert [3, 2] == [s.held for s in held] and payment[:3] == held[0].atom_ids
    assert [] == mem.conn.execute("pragma foreign_key_check").fetchall()


def test_without_vectors_atoms_join_by_their_terms(db_path):
    with memdb.open(db_path, embedder=None, extract="defer") as mem:
        t = mem.add([{"content": f"turn {i}"} for i in range(3)], user="ann")
        with connection.write(mem.conn):
            ids = [flow.absorb(mem, Candidate({"kind": "fact", "subject": "Ann", "predicate": p, "object": o}, 0.9,
                                              [turn]), user="ann", ts=TS, vector=None)[1]
                   for turn, (p, o) in zip(t, [("works on", "the payment module refactor"),
                                               ("tests", "the payment module refactor code"),
                                               ("bakes", "sourdough bread")])]
        assert [ids[:2]] == [s.atom_ids for s in mem.scenarios(user="ann")]


def test_layers_off_writes_no_scenario_or_persona(db_path, embedder):
    with memdb.open(db_path, embedder=embedder, extract="defer", settings=memdb.Settings(layers=False)) as mem:
        t = mem.add([{"content": "turn"}], user="ann")
        put(mem, "ann", "likes", "climbing", t, kind="preference")
        assert ([], "") == (mem.scenarios(user="ann"), mem.persona(user="ann"))


@pytest.mark.parametrize("field, value", [("scenario_join", 1.5), ("persona_tokens", 0),
                                          ("scenario_half_life_days", 0), ("layers", "yes"),
                                          ("persona_kind_weight", {"fact": 1.0})])
def test_bad_layer_settings_are_refused(field, value):
    with pytest.raises(memdb.InvalidInput, match=f"Settings.{field}"):
        memdb.Settings(**{field: value})


def test_cli_shows_persona_and_scenarios(mem, payment, db_path, capsys):
    mem.close()
    assert 0 == main(["persona", str(db_path), "--user", "ann"])
    assert f"(#{payment[3]})" in capsys.readouterr().out
    assert 0 == main(["scenarios", str(db_path), "--user", "ann", "--embedder", "none", "--json"])
    shown = json.loads(capsys.readouterr().out)
    assert [payment[:3], payment[3:]] == [s["atom_ids"] for s in shown["scenarios"]]
    # ("payment" is in most of ann's notes: the keyword side leaves it out, as it does a name)
    assert 0 == main(["context", str(db_path), "--user", "ann", "--embedder", "none", "--scenarios", "--persona",
                      "refactor code release"])
    out = capsys.readouterr().out
    assert "persona ·" in out and "scenario ·" in out


@pytest.mark.model
def test_real_model_end_to_end_scenarios_persona_and_forget(tmp_path, cache):
    pytest.importorskip("llama_cpp")
    with memdb.open(tmp_path / "real.db", user="ann", threads=2) as mem:
        mem.add([{"role": "user", "name": "Ann", "content": c, "ts": f"2026-05-0{i + 1}T10:00:00"} for i, c in enumerate([
            "I'm refactoring the payment module of our shop this month.",
            "The payment module refactor has to ship by Friday, the tests still fail.",
            "I love climbing on weekends.",
            "I'm allergic to peanuts.",
        ])])
        card = mem.persona()
        held = {a.id for a in mem.profile()}
        assert card and all(int(line.rsplit("(#", 1)[1][:-1]) in held for line in card.splitlines())
        for scenario in mem.scenarios():
            assert {mem.get(a).user for a in scenario.atom_ids} == {"ann"}
        block = mem.context("where are we on the payment refactor?", scenarios=True, persona=True)
        assert block.splitlines()[1].startswith("persona · ")  # after the header
        mem.forget(user="ann")
        assert ("", []) == (mem.persona(), mem.scenarios())


def test_reembed_rebuilds_the_centroids_from_the_new_vectors(mem, payment):
    assert {64 * 4} == {len(r[0]) for r in mem.conn.execute("select centroid from scenarios")}
    mem.reembed(HashEmbedder(32, name="small"))
    assert {32 * 4} == {len(r[0]) for r in mem.conn.execute("select centroid from scenarios")}
    assert [payment[:3], payment[3:]] == [s.atom_ids for s in mem.scenarios(user="ann")]


def test_a_large_users_card_is_updated_from_the_changed_atoms_and_ranked_fully_when_due(mem, turns, monkeypatch):
    import dataclasses

    from memdb.layers import persona

    monkeypatch.setattr(persona, "FULL_RANK_BELOW", 2)  # from 2 ranked atoms on, incremental updates:
    monkeypatch.setattr(persona, "ATOMS_PER_UPDATE", 2)  # one for every 2 ranked atoms between full rankings
    mem.settings = dataclasses.replace(mem.settings, persona_candidates=2)
    ids = [put(mem, "ann", p, o, [turns[i]])[1] for i, (p, o) in enumerate(
        [("drinks", "green tea"), ("plays", "chess"), ("speaks", "Welsh"), ("owns", "a kayak")])]
    key = layers.persona_rank_key("ann")
    assert {"left": 2, "speakers": ["Ann"]} == json.loads(connection.get_meta(mem.conn, key))
    assert ids[:2] == [atom_id for atom_id, _ in layers.card(mem.conn, "ann")]
    with connection.write(mem.conn):  # an atom outside the card rises: the next updates miss it
        mem.conn.execute('update "atoms" set "seen" = 50 where "id" = ?', (ids[3],))
    liked = put(mem, "ann", "likes", "climbing", [turns[5]], kind="preference")[1]
    assert [liked, ids[0]] == [atom_id for atom_id, _ in layers.card(mem.conn, "ann")]
    assert 1 == json.loads(connection.get_meta(mem.conn, key))["left"]
    put(mem, "ann", "likes", "opera", [turns[6]], kind="preference")
    assert ids[3] not in [atom_id for atom_id, _ in layers.card(mem.conn, "ann")]
    put(mem, "ann", "likes", "rowing", [turns[7]], kind="preference")  # due: all ranked again
    assert ids[3] == layers.card(mem.conn, "ann")[0][0]
    assert {"left": 3, "speakers": ["Ann"]} == json.loads(connection.get_meta(mem.conn, key))
    mem.forget(user="ann")
    assert connection.get_meta(mem.conn, key) is None


def test_a_batch_re_ranks_the_card_once_for_all_its_atoms_as_an_update_per_atom_does(tmp_path, embedder,
                                                                                      monkeypatch):
    from memdb.layers import persona

    monkeypatch.setattr(persona, "FULL_RANK_BELOW", 2)  # from 2 ranked atoms on, incremental updates
    monkeypatch.setattr(persona, "ATOMS_PER_UPDATE", 1)  # a full ranking once every ranked atom updated
    writes = []
    monkeypatch.setattr(layers, "write_card", lambda conn, user, lines, before=None, write=layers.write_card: (
        writes.append(user), write(conn, user, lines, before))[-1])
    batch = [("fact", "plays", "chess"), ("event", "ran", "a marathon"), ("preference", "likes", "opera"),
             ("fact", "speaks", "Welsh"), ("fact", "drinks", "green tea")]
    cards, left = {}, {}
    for batched in (False, True):
        with memdb.open(tmp_path / f"{batched}.db", embedder=embedder, extract="defer") as mem:
            turns = mem.add([{"role": "user", "name": "Ann", "content": f"turn {i}"} for i in range(8)], user="ann")
            put(mem, "ann", "owns", "a kayak", [turns[0]])
            put(mem, "ann", "lives in", "Cardiff", [turns[1]])  # ranked fully: 2 ranked atoms, 2 updates left
            writes.clear()
            changed = [] if batched else None
            with connection.write(mem.conn):  # as flow.write absorbs an extraction batch
                for i, (kind, predicate, obj) in enumerate(batch):
                    flow.absorb(mem, Candidate({"kind": kind, "subject": "Ann", "predicate": predicate, "object": obj},
                                               0.9, [turns[2 + i]]), user="ann", ts=TS,
                                vector=mem.embedder.embed([f"Ann {predicate} {obj}"])[0], card_changed=changed)
                if batched:
                    flow.persona_after(mem.conn, "ann", mem.settings, changed)
            cards[batched] = layers.card(mem.conn, "ann")
            left[batched] = json.loads(connection.get_meta(mem.conn, layers.persona_rank_key("ann")))["left"]
            assert (1 if batched else 4) == len(writes)  # the card written once for the batch
    assert 6 == len(cards[True])  # every fact and preference, the event left out
    assert cards[False] == cards[True]
    # Counted down by atoms: one at a time, the first two updates took the 2 left, the third ranked
    # all (5 ranked atoms then: 5 left) and the fourth took one; the batch's one update took 4.
    assert (4, 2 - 4) == (left[False], left[True])


def test_a_card_update_rewrites_the_lines_from_the_first_that_changed(mem, turns):
    a, b, c, d = (put(mem, "ann", "likes", obj, [turns[i]], kind="event")[1]
                  for i, obj in enumerate(["tea", "chess", "opera", "rowing"]))  # events: no card of their own
    with connection.write(mem.conn):
        layers.write_card(mem.conn, "ann", [(a, "a", 3.0), (b, "b", 2.0), (c, "c", 1.0)])
        before = layers.card_rows(mem.conn, "ann")
        changes = mem.conn.total_changes()
        layers.write_card(mem.conn, "ann", list(before), before)
        assert changes == mem.conn.total_changes()  # the same lines: nothing written
        layers.write_card(mem.conn, "ann", [before[0], (d, "d", 1.5), before[1]], before)
        assert [(a, "a", 3.0), (d, "d", 1.5), (b, "b", 2.0)] == layers.card_rows(mem.conn, "ann")
        assert changes + 2 + 2 == mem.conn.total_changes()  # ranks 2 and 3 deleted, 2 inserted: rank 1 kept


def test_a_card_line_said_again_in_more_words_takes_no_second_line(mem, turns):
    from memdb.db import rows
    from memdb.layers import persona

    with connection.write(mem.conn):
        for seen, (predicate, obj) in [(3, ("plays", "chess on weekends")), (2, ("speaks", "Welsh")),
                                       (1, ("plays", "chess"))]:
            atom = rows.insert_atom(mem.conn, user="ann", record={"kind": "fact", "subject": "Ann", "predicate": predicate,
                                                                   "object": obj},
                                    confidence=0.9, turn_ids=[turns[0]], first_seen=TS, last_seen=TS, vector=None)
            mem.conn.execute('update "atoms" set "seen" = ? where "id" = ?', (seen, atom))
        persona.update(mem.conn, "ann", mem.settings)
    lines = [line.split(" (#")[0] for _, line in layers.card(mem.conn, "ann")]
    assert ["Ann plays chess on weekends", "Ann speaks Welsh"] == lines
