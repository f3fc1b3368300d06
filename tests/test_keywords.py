"""Keyword copies (index/keywords.py): a large user's postings scored in memory rank like FTS5's
bm25, and stay exact while the file changes under them."""

from __future__ import annotations

import random

import numpy as np
import pytest

import memdb
from memdb import recall
from memdb.db import connection
from memdb.db import rows as db_rows
from memdb.index import fts
from memdb.index import keywords as kw
from memdb.lifecycle import absorb
from memdb.search import fusion as search_fusion

NAMES = ["Alice", "Bob", "Carol", "小王", "Dave"]
THINGS = ["coffee", "tea", "PostgreSQL", "hiking", "running", "咖啡", "sci-fi films", "Berlin", "the auth module"]
VERBS = ["likes", "hates", "moved to", "uses", "runs", "喜欢"]
QUERIES = ["coffee", "who likes tea", "Alice hiking running", "咖啡", "PostgreSQL auth module", "Berlin Bob",
           "runs", "nothing matches this", "Carol sci-fi films likes"]


@pytest.fixture
def copied(db_path, embedder):
    """A Memory whose keyword copies take every user (no minimum size)."""
    with memdb.open(db_path, embedder=embedder, extract="defer",
                    settings=memdb.Settings(keyword_copy_min=1)) as m:
        yield m


def say(mem, n: int, user: str = "alice", seed: int = 0) -> list[int]:
    """n turns and one atom from each, with words that repeat across rows."""
    rng = random.Random(seed)
    lines = [f"{rng.choice(NAMES)} {rng.choice(VERBS)} {rng.choice(THINGS)} and {rng.choice(THINGS)}" for _ in range(n)]
    turn_ids = mem.add([{"content": line, "ts": "2026-01-01T00:00:00"} for line in lines], user=user)
    with connection.write(mem.conn):
        return [db_rows.insert_atom(mem.conn, user=user, record=record(line), confidence=0.8, turn_ids=[t],
                                    first_seen="2026-01-01T00:00:00", last_seen="2026-01-01T00:00:00", vector=None)
                for line, t in zip(lines, turn_ids)]


def record(line: str) -> dict:
    subject, _, rest = line.partition(" ")
    return {"kind": "fact", "subject": subject, "predicate": "said", "object": rest}


def by_fts(mem, layer: str, user: str, query: str, k: int = 1000) -> list[tuple[int, float]]:
    """FTS5's own bm25 ranking, every query term scored (k: all matches, so ties cannot cut)."""
    match = fts.match_expression(mem.conn, layer, user, query)
    if match is None:
        return []
    weights = mem.settings.atom_columns if layer == "atoms" else mem.settings.turn_columns
    return mem.conn.execute(search_fusion._keyword_cte(f"{layer}_fts", weights, "m"), {"m": match, "pool": k}).fetchall()


def by_copy(mem, layer: str, user: str, query: str, k: int = 1000) -> list[tuple[int, float]]:
    return mem.keywords.top_k(mem.conn, layer, user, fts.query_terms(query), k)


def assert_same_ranking(expected: list[tuple[int, float]], actual: list[tuple[int, float]]) -> None:
    # Equal scores (rows with the same words) may come in either order: compare scores by rank
    # and the rows as sets of equal scores.
    assert [round(s, 9) for _, s in expected] == [round(s, 9) for _, s in actual]
    assert {(i, round(s, 9)) for i, s in expected} == {(i, round(s, 9)) for i, s in actual}


def test_a_sole_users_copy_ranks_like_fts5(copied):
    say(copied, 120)
    for layer in ("atoms", "turns"):
        for query in QUERIES:
            assert_same_ranking(by_fts(copied, layer, "alice", query), by_copy(copied, layer, "alice", query))
    assert {("atoms", "alice"), ("turns", "alice")} == set(copied.keywords.copies)


def test_in_a_shared_file_copies_rank_with_the_users_own_statistics_unless_told_not_to(copied, db_path, tmp_path,
                                                                                        embedder):
    say(copied, 60, seed=1)
    say(copied, 200, user="bob", seed=2)  # many more rows: other counts, other lengths
    not_shared = memdb.Settings(keyword_copy_min=1, keyword_copy_shared=False)
    with memdb.open(db_path, embedder=embedder, extract="defer", settings=not_shared) as fts_only:
        assert None is by_copy(fts_only, "atoms", "alice", "coffee")  # FTS5 answers, with the file's statistics
    with memdb.open(db_path, embedder=embedder, extract="defer", settings=copied.settings) as shared, \
            memdb.open(tmp_path / "alone.db", embedder=embedder, extract="defer") as alone:
        say(alone, 60, seed=1)
        for layer in ("atoms", "turns"):
            for query in QUERIES:
                assert_same_ranking(by_fts(alone, layer, "alice", query), by_copy(shared, layer, "alice", query))


def test_the_copy_sees_new_rows_merges_and_other_connections(copied, db_path, embedder):
    ids = say(copied, 40)
    by_copy(copied, "atoms", "alice", "coffee")  # loads the copy
    say(copied, 5, seed=3)
    with connection.write(copied.conn):  # a merge re-indexes the atom with its new source's words
        [turn] = copied.add([{"content": "zebra crossing near the office"}], user="alice")
        absorb.merge(copied.conn, ids[0], confidence=0.8, turn_ids=[turn], ts="2026-01-02T00:00:00")
    with memdb.open(db_path, embedder=embedder, extract="defer") as other:
        say(other, 5, seed=4)
    for query in QUERIES + ["zebra"]:
        assert_same_ranking(by_fts(copied, "atoms", "alice", query), by_copy(copied, "atoms", "alice", query))
    assert ids[0] == by_copy(copied, "atoms", "alice", "zebra")[0][0]


def test_forgotten_rows_and_words_leave_the_copy(copied):
    ids = say(copied, 30)
    by_copy(copied, "atoms", "alice", "coffee")
    by_copy(copied, "turns", "alice", "coffee")
    with connection.write(copied.conn):  # a second source: the atom outlives its first turn
        [turn] = copied.add([{"content": "a quokka in the garden"}], user="alice")
        absorb.merge(copied.conn, ids[1], confidence=0.8, turn_ids=[turn], ts="2026-01-02T00:00:00")
    assert [ids[1]] == [i for i, _ in by_copy(copied, "atoms", "alice", "quokka")]
    copied.forget(user="alice", turn_id=turn)
    copied.forget(user="alice", atom_id=ids[2])
    for layer in ("atoms", "turns"):
        for query in QUERIES + ["quokka"]:
            assert_same_ranking(by_fts(copied, layer, "alice", query), by_copy(copied, layer, "alice", query))
    assert [] == by_copy(copied, "atoms", "alice", "quokka")


def test_fts5_answers_for_phrases_small_users_budgets_and_transactions(db_path, embedder):
    with memdb.open(db_path, embedder=embedder, extract="defer") as small:  # default minimum: 500 rows
        say(small, 20)
        assert None is by_copy(small, "atoms", "alice", "coffee")
    with memdb.open(db_path, embedder=embedder, extract="defer",
                    settings=memdb.Settings(keyword_copy_min=1, keyword_copy_mb=0.001)) as tight:
        assert None is by_copy(tight, "atoms", "alice", "coffee")
    with memdb.open(db_path, embedder=embedder, extract="defer", settings=memdb.Settings(keyword_copy_min=1)) as m:
        assert None is by_copy(m, "atoms", "alice", "don't")  # two tokens: a phrase
        with connection.write(m.conn):
            assert None is by_copy(m, "atoms", "alice", "coffee")
        assert by_copy(m, "atoms", "alice", "coffee")


def test_text_holding_the_cell_marker_is_read_cell_by_cell(copied):
    say(copied, 10)
    copied.add([{"content": f"{kw.MARKER} and coffee"}], user="alice")
    for query in ("coffee", kw.MARKER):
        assert_same_ranking(by_fts(copied, "turns", "alice", query), by_copy(copied, "turns", "alice", query))


def test_search_with_keyword_copies_returns_what_full_bm25_returns(copied):
    say(copied, 80)
    plain = memdb.Settings(keyword_postings=0)
    for query in QUERIES:
        vector = recall.query_vector(copied, query, "alice", None)
        for layer in search_fusion.LAYERS:
            asked = search_fusion.Query(query, user="alice", k=10, layer=layer, vector=vector)
            with_copy = search_fusion.search(copied.conn, asked, search_fusion.Engine(copied.settings, keywords=copied.keywords))
            without = search_fusion.search(copied.conn, asked, search_fusion.Engine(plain))
            assert [round(h.score, 9) for h in without] == [round(h.score, 9) for h in with_copy]


def test_a_forgotten_user_leaves_no_copy(copied):
    say(copied, 10)
    by_copy(copied, "turns", "alice", "coffee")
    copied.forget(user="alice")
    assert None is by_copy(copied, "turns", "alice", "coffee")
    assert {} == dict(copied.keywords.copies)


def test_a_copy_of_mostly_rewritten_rows_is_read_afresh(copied):
    ids = say(copied, 12)
    by_copy(copied, "atoms", "alice", "coffee")
    with connection.write(copied.conn):
        [turn] = copied.add([{"content": "again"}], user="alice")
        for atom_id in ids[:5]:  # 5 of 17 rows held would be old versions
            absorb.merge(copied.conn, atom_id, confidence=0.8, turn_ids=[turn], ts="2026-01-02T00:00:00")
    assert_same_ranking(by_fts(copied, "atoms", "alice", "coffee"), by_copy(copied, "atoms", "alice", "coffee"))
    assert 12 == len(copied.keywords.copies[("atoms", "alice")].ids)


def test_a_copy_leaves_out_the_terms_fts_counts_as_common(copied):
    say(copied, 30)
    copied.add([{"content": f"coffee again, cup {i}"} for i in range(40)], user="alice")
    common = (copied.settings.common_term_share, copied.settings.common_term_rows)
    for query in ("coffee hiking", "coffee", "tea coffee Berlin"):
        terms = fts.distinctive_terms(copied.conn, "turns", "alice", query, common=common)
        assert "coffee" not in terms
        expected = copied.keywords.top_k(copied.conn, "turns", "alice", terms, 1000)
        actual = copied.keywords.top_k(copied.conn, "turns", "alice", fts.query_terms(query), 1000, common=common)
        assert expected == actual


def test_a_large_users_copy_is_built_in_the_background_and_brought_up_to_date(db_path, embedder):
    settings = memdb.Settings(keyword_copy_min=1, keyword_copy_background=50)
    with memdb.open(db_path, embedder=embedder, extract="defer", settings=settings) as mem:
        say(mem, 80)
        assert None is by_copy(mem, "turns", "alice", "coffee")  # FTS5 answers while it is built
        assert None is by_copy(mem, "atoms", "alice", "coffee")  # built beside it, from the same vocabulary
        mem.keywords.wait()
        gone, *_ = mem.add([{"content": "coffee with Dave at noon"}], user="alice")  # after the build,
        mem.forget(user="alice", turn_id=gone)  # ... and gone again before the copy was adopted
        say(mem, 5, seed=4)
        for query in QUERIES:
            assert_same_ranking(by_fts(mem, "turns", "alice", query), by_copy(mem, "turns", "alice", query))
        assert gone not in {i for i, _ in by_copy(mem, "turns", "alice", "coffee Dave noon")}
        for query in QUERIES:  # adopted after the turns' copy added its words: renumbered
            assert_same_ranking(by_fts(mem, "atoms", "alice", query), by_copy(mem, "atoms", "alice", query))
        assert {("turns", "alice"), ("atoms", "alice")} == set(mem.keywords.copies)


def test_a_small_users_copy_is_built_by_the_search_itself(copied):
    say(copied, 30)
    assert by_copy(copied, "turns", "alice", "coffee") is not None
    assert {} == copied.keywords.building


def test_search_starts_the_build_it_asked_for_once_it_is_done(db_path, embedder):
    settings = memdb.Settings(keyword_copy_min=1, keyword_copy_background=50)
    with memdb.open(db_path, embedder=embedder, extract="defer", settings=settings) as mem:
        say(mem, 80)
        expected = [h.id for h in mem.search("coffee hiking", user="alice", layer="turns")]  # FTS5's
        assert all(thread.ident is not None for thread in list(mem.keywords.building.values()))
        mem.keywords.wait()
        assert expected == [h.id for h in mem.search("coffee hiking", user="alice", layer="turns")]
        assert ("turns", "alice") in mem.keywords.copies


def test_merged_postings_keep_each_terms_rows_in_the_order_they_came():
    rng = np.random.default_rng(5)
    merged, seen = kw.Sorted(), []
    for size in (40, 7, 0, 90, 3):  # a copy's tail folded in batch after batch
        tail = kw.Postings(rng.integers(0, 30, size).astype(np.int32), rng.integers(0, 1000, size).astype(np.int32),
                           rng.integers(0, 5, size).astype(np.uint16))
        seen.append(tail)
        merged = merged.merged(tail)
    terms = np.concatenate([t.terms for t in seen])
    order = np.argsort(terms, kind="stable")  # the plain way: every posting sorted by term
    assert terms[order].tolist() == merged.flat_terms().tolist()
    assert np.concatenate([t.rows for t in seen])[order].tolist() == merged.rows.tolist()
    assert np.concatenate([t.kinds for t in seen])[order].tolist() == merged.kinds.tolist()
    for term in range(32):
        expected = np.concatenate([t.rows[t.terms == term] for t in seen]).tolist()
        assert expected == merged.block(term)[0].tolist()


def test_a_copy_stores_a_posting_in_a_few_bytes_and_its_counts_once_per_kind(copied):
    say(copied, 200)
    assert by_copy(copied, "turns", "alice", "coffee")
    copy = copied.keywords.copies[("turns", "alice")]
    postings = len(copy.sorted) + len(copy.tail)
    assert len(copy.weighted) == len(copy.plain) == len(set(zip(copy.weighted.tolist(), copy.plain.tolist())))
    assert len(copy.weighted) < postings / 20  # a few count pairs stand for them all
    assert np.uint16 == copy.sorted.kinds.dtype
    assert copy.sorted.nbytes - copy.sorted.terms.nbytes - copy.sorted.starts.nbytes == 6 * len(copy.sorted)


def test_a_copy_with_more_kinds_than_uint16_tells_apart_ranks_like_fts5(copied, monkeypatch):
    monkeypatch.setattr(kw, "KINDS_UINT16", 2)  # as if the copy held 65,537 count pairs
    say(copied, 120)
    for layer in ("atoms", "turns"):
        for query in QUERIES:
            assert_same_ranking(by_fts(copied, layer, "alice", query), by_copy(copied, layer, "alice", query))
    say(copied, 40, seed=3)  # new rows join the tail, then the sorted postings, as uint32 kinds
    for query in QUERIES:
        assert_same_ranking(by_fts(copied, "atoms", "alice", query), by_copy(copied, "atoms", "alice", query))
    assert np.uint32 == copied.keywords.copies[("atoms", "alice")].sorted.kinds.dtype
