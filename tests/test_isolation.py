"""No call ever returns another user's data.

Guards the user boundary through every read: search (every layer, every hit's turn ids and
conflicts), context (no other user's words), profile, events, history, get, turns, export and
stats. Property-based: hypothesis picks the users (names that differ only by case, spacing,
quotes or script), what they said, which atoms they hold and the queries — including queries
made of the other users' own words, which match in FTS and vectors if scoping leaks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings, strategies as st

import memdb
from memdb import checks, codec
from memdb.db import connection
from memdb import flow
from memdb.extraction.records import Candidate
from memdb.lifecycle import absorb
from tests.conftest import HashEmbedder

SHARED = ["coffee", "harbour", "ferry", "piano", "garden", "咖啡", "公园", "lisbon", "violin", "tea"]
KINDS = ["fact", "preference", "constraint", "event"]

def _accepted(name: str) -> bool:
    """Whether memdb takes name as a user (checks.check_name: printable, nothing invisible)."""
    try:
        checks.check_name(name, "user")
    except memdb.InvalidInput:
        return False
    return True


# Users whose names are easy to confuse with one another: scoping must compare them exactly.
# Random names are drawn among those memdb accepts (a refused name is test_hostile's concern).
user_names = st.lists(
    st.sampled_from(["alice", "Alice", "alice ", " alice", "al'ice", "a%", "_", "bob", "用户", "😀"])
    | st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cf", "Cn", "Co", "Cs", "Zl", "Zp")),
              min_size=1, max_size=12).filter(_accepted),
    min_size=2, max_size=4, unique=True,
)


@dataclass
class Held:
    """What one user put in the file, and the word only that user ever said."""

    marker: str
    turns: set[int] = field(default_factory=set)
    atoms: set[int] = field(default_factory=set)


def _marker(index: int) -> str:
    return "zq" + "abcdefgh"[index] * 4 + "mark"  # one unique, unstemmable word per user


def _fill(mem: memdb.Memory, users: list[str], data: st.DataObject) -> dict[str, Held]:
    held: dict[str, Held] = {}
    for i, user in enumerate(users):
        me = held[user] = Held(_marker(i))
        for day in range(data.draw(st.integers(1, 4), label="turns")):
            words = data.draw(st.lists(st.sampled_from(SHARED), min_size=1, max_size=4), label="words")
            ids = mem.add([{"content": f"{' '.join(words)} {me.marker}", "ts": f"2026-03-{day + 1:02d}T10:00:00"}],
                          user=user, session=data.draw(st.sampled_from(["s1", "s2"])))
            me.turns.update(ids)
            if data.draw(st.booleans(), label="atom"):
                kind = data.draw(st.sampled_from(KINDS), label="kind")
                record = codec.validate({"kind": kind, "subject": "User", "predicate": "keeps",
                                         "object": f"{words[0]} {me.marker}",
                                         **({"date": f"2026-03-{day + 1:02d}"} if kind == "event" else {})})
                with connection.write(mem.conn):
                    _, atom_id = flow.absorb(mem, Candidate(record, 0.8, ids), user=user,
                                             ts=f"2026-03-{day + 1:02d}T10:00:00",
                                             vector=mem.embedder.embed([codec.canonical_text(record)])[0])
                me.atoms.add(atom_id)
    return held


def _assert_only_own(held: dict[str, Held], user: str, text: str) -> None:
    leaked = [h.marker for u, h in held.items() if u != user and h.marker in text]
    assert [] == leaked, f"{user!r} saw words of other users: {leaked}"


@settings(max_examples=25, deadline=None)
@given(users=user_names, data=st.data())
def test_no_read_returns_another_users_data(users, data):
    with memdb.open(":memory:", embedder=HashEmbedder(), extract="defer") as mem:
        held = _fill(mem, users, data)
        all_atoms = {a for h in held.values() for a in h.atoms}
        vocabulary = SHARED + [h.marker for h in held.values()]
        queries = data.draw(st.lists(st.lists(st.sampled_from(vocabulary), min_size=1, max_size=5).map(" ".join)
                                     | st.text(max_size=20), min_size=1, max_size=3), label="queries")
        for user, me in held.items():
            # Atoms the lifecycle merged away are gone; the ones left must still be this user's.
            mine_atoms = me.atoms & {r[0] for r in mem.conn.execute('select "id" from "atoms"')}
            for query in queries:
                for layer in ("both", "turns", "atoms"):
                    for hit in mem.search(query, user=user, layer=layer, k=20, include_superseded=True):
                        assert set(hit.turn_ids) <= me.turns
                        assert hit.id in (mine_atoms if hit.layer == "atom" else me.turns)
                        assert set(hit.conflicts) <= mine_atoms
                _assert_only_own(held, user, mem.context(query, user=user, budget=2000, session="s1"))
            for atom in mem.profile(user) + mem.events(user):
                assert (user, True) == (atom.user, set(atom.turn_ids) <= me.turns)
            for atom_id in mine_atoms:
                assert {user} == {a.user for a in mem.history(atom_id, user=user)}
            for atom_id in all_atoms - me.atoms:
                with pytest.raises(memdb.NotFound):
                    mem.get(atom_id, user=user)
            others = [t for u, h in held.items() if u != user for t in h.turns]
            assert [] == mem.turns(others, user=user)
            exported = list(mem.export(user))
            assert {user} == {row["user"] for row in exported}
            assert me.turns == {row["id"] for row in exported if row["type"] == "turn"}
            assert len(me.turns) == mem.stats(user=user)["turns"]


def test_history_of_another_users_atom_is_not_found(mem):
    (bob_turn,) = mem.add([{"content": "bob keeps a violin"}], user="bob")
    record = codec.validate({"kind": "fact", "subject": "bob", "predicate": "keeps", "object": "a violin"})
    with connection.write(mem.conn):
        _, atom_id = absorb.absorb(mem.conn,
                                   absorb.Incoming(user="bob", record=record,
                                                   confidence=0.9, turn_ids=[bob_turn],
                                                   ts="2026-03-01T10:00:00", vector=None),
                                   absorb.Engine(mem.settings))
    mem.add([{"content": "alice keeps a violin too"}], user="alice")
    with pytest.raises(memdb.NotFound, match="alice"):
        mem.history(atom_id, user="alice")
    with pytest.raises(memdb.NotFound):
        mem.get(atom_id, user="alice")
    assert [] == mem.turns([bob_turn], user="alice")
    assert [] == mem.profile("alice")


def test_an_empty_user_is_refused_not_read_as_every_user(mem):
    # turns(user="") used to drop the user filter (a falsy user meant "no scope").
    ids = mem.add([{"content": "alice's words"}], user="alice")
    with pytest.raises(memdb.InvalidInput, match="user"):
        mem.turns(ids, user="")
