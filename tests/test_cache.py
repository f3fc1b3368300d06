"""The in-process search cache (index/copies.py, index/keywords.py): vector copies that stay exact while the file changes
under them, and the pruning of common query terms."""

from __future__ import annotations

import numpy as np
import pytest

import memdb
from memdb.db import connection
from memdb.db import rows as db_rows
from memdb import recall, vecmath
from memdb.search import fusion as search_fusion
from memdb.index import fts
from memdb.index import copies


DIM = 64  # the HashEmbedder's


@pytest.fixture
def copied(db_path, embedder):
    """A Memory that copies every user's vectors into memory (no minimum size)."""
    with memdb.open(db_path, embedder=embedder, extract="defer",
                    settings=memdb.Settings(vector_copy_min=1)) as m:
        yield m


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def insert(mem, vectors: np.ndarray, user: str = "alice") -> list[int]:
    with connection.write(mem.conn):
        return [db_rows.insert_atom(mem.conn, user=user, record={"kind": "fact", "subject": "s", "predicate": "is",
                                                               "object": f"thing{i}"},
                                  confidence=0.8, turn_ids=[], first_seen="2026-01-01T00:00:00",
                                  last_seen="2026-01-01T00:00:00", vector=v)
                for i, v in enumerate(vectors)]


def knn(mem, query: np.ndarray, k: int, user: str = "alice") -> list[tuple[int, float]]:
    return [(i, 1.0 - d) for i, d in mem.conn.execute(
        "select atom_id, distance from atoms_vec where embedding match ? and k = ? and user = ? and active = 1",
        (vecmath.as_blob(query), k, user))]


def test_copy_ranks_exactly_like_vec0(copied):
    rng = np.random.default_rng(1)
    insert(copied, unit(rng, 300))
    insert(copied, unit(rng, 50), user="bob")
    for query in unit(rng, 20):
        expected = knn(copied, query, 25)
        actual = copied.copies.top_k(copied.conn, "atoms", "alice", query, 25)
        assert [i for i, _ in expected] == [i for i, _ in actual]
        assert np.allclose([s for _, s in expected], [s for _, s in actual], atol=1e-5)


def test_search_with_the_copy_returns_what_search_without_it_returns(copied):
    turns = copied.add([{"content": c} for c in (
        "We use PostgreSQL for everything.", "I love science fiction films.", "Never touch the auth module.",
        "我喜欢喝美式咖啡。", "We shipped v2 last Wednesday.")], user="alice")
    rng = np.random.default_rng(2)
    insert(copied, unit(rng, 40))
    for query in ("which database", "science fiction", "咖啡", "auth module", "shipped"):
        vector = recall.query_vector(copied, query, "alice", None)
        for layer in search_fusion.LAYERS:
            asked = search_fusion.Query(query, user="alice", k=10, layer=layer, vector=vector)
            with_copy = search_fusion.search(copied.conn, asked, search_fusion.Engine(
                copied.settings, copies=copied.copies, term_counts=copied.term_counts))
            without = search_fusion.search(copied.conn, asked, search_fusion.Engine(copied.settings))
            assert [(h.layer, h.id) for h in without] == [(h.layer, h.id) for h in with_copy]
    assert {("atoms", "alice"), ("turns", "alice")} == set(copied.copies.copies)
    assert len(turns) == copied.copies.copies[("turns", "alice")].n


def test_copy_sees_rows_written_by_this_and_by_another_connection(copied, db_path, embedder):
    rng = np.random.default_rng(3)
    insert(copied, unit(rng, 20))
    copied.copies.top_k(copied.conn, "atoms", "alice", unit(rng, 1)[0], 5)  # loads the copy
    mine = unit(rng, 1)
    [mine_id] = insert(copied, mine)
    assert mine_id == copied.copies.top_k(copied.conn, "atoms", "alice", mine[0], 1)[0][0]
    with memdb.open(db_path, embedder=embedder, extract="defer") as other:
        theirs = unit(rng, 1)
        [theirs_id] = insert(other, theirs)
    assert theirs_id == copied.copies.top_k(copied.conn, "atoms", "alice", theirs[0], 1)[0][0]
    assert 22 == copied.copies.copies[("atoms", "alice")].n


def test_copy_catches_up_past_other_users_rows(copied):
    rng = np.random.default_rng(10)
    insert(copied, unit(rng, 5))
    copied.copies.top_k(copied.conn, "atoms", "alice", unit(rng, 1)[0], 3)
    insert(copied, unit(rng, 60), user="bob")  # more rows since than alice holds: the user index
    mine = unit(rng, 2)
    insert(copied, mine)
    insert(copied, unit(rng, 3), user="bob")
    for vector in mine:
        expected = [i for i, _ in knn(copied, vector, 3)]
        assert expected == [i for i, _ in copied.copies.top_k(copied.conn, "atoms", "alice", vector, 3)]
    assert 7 == copied.copies.copies[("atoms", "alice")].n


def test_copy_forgets_deleted_rows_and_skips_superseded_ones(copied):
    rng = np.random.default_rng(4)
    vectors = unit(rng, 10)
    ids = insert(copied, vectors)
    copied.copies.top_k(copied.conn, "atoms", "alice", vectors[0], 3)
    copied.forget(atom_id=ids[0], user="alice")
    assert ids[0] not in [i for i, _ in copied.copies.top_k(copied.conn, "atoms", "alice", vectors[0], 10)]
    with connection.write(copied.conn):
        db_rows.set_atom_status(copied.conn, ids[1], "superseded")
    active = copied.copies.top_k(copied.conn, "atoms", "alice", vectors[1], 10)
    every = copied.copies.top_k(copied.conn, "atoms", "alice", vectors[1], 10, active_only=False)
    assert ids[1] not in [i for i, _ in active] and 8 == len(active)
    assert ids[1] == every[0][0] and 9 == len(every)


class Abort(Exception):
    pass


def test_a_rolled_back_write_leaves_nothing_in_the_copy(copied):
    rng = np.random.default_rng(5)
    insert(copied, unit(rng, 10))
    copied.copies.top_k(copied.conn, "atoms", "alice", unit(rng, 1)[0], 3)
    phantom, real = unit(rng, 2)
    with pytest.raises(Abort), connection.write(copied.conn):
        [phantom_id] = insert(copied, phantom[None])
        # seen inside the transaction, beside the copy
        assert [phantom_id] == [i for i, _ in copied.copies.top_k(copied.conn, "atoms", "alice", phantom, 1)]
        assert 10 == copied.copies.copies[("atoms", "alice")].n
        raise Abort
    [real_id] = insert(copied, real[None])
    assert phantom_id == real_id  # SQLite reuses the id; the copy must hold the real vector
    assert [real_id] == [i for i, _ in copied.copies.top_k(copied.conn, "atoms", "alice", real, 1)]
    assert pytest.approx(1.0, abs=1e-5) == copied.copies.top_k(copied.conn, "atoms", "alice", real, 1)[0][1]


def test_inside_a_transaction_the_copy_and_the_rows_since_rank_like_vec0(copied):
    rng = np.random.default_rng(9)
    old = insert(copied, unit(rng, 100))
    copied.copies.top_k(copied.conn, "atoms", "alice", unit(rng, 1)[0], 3)
    with connection.write(copied.conn):
        insert(copied, unit(rng, 30))
        db_rows.set_atom_status(copied.conn, old[0], "superseded")
        for query in unit(rng, 10):
            expected = knn(copied, query, 20)
            actual = copied.copies.top_k(copied.conn, "atoms", "alice", query, 20)
            assert [i for i, _ in expected] == [i for i, _ in actual]
    assert 100 == copied.copies.copies[("atoms", "alice")].n  # not grown until the commit is read


def test_a_reembedded_file_reloads_the_copy(copied):
    rng = np.random.default_rng(6)
    insert(copied, unit(rng, 5))
    copied.copies.top_k(copied.conn, "atoms", "alice", unit(rng, 1)[0], 3)
    copied.reembed(copied.embedder)
    line_vector = copied.embedder.embed(["s is thing3"])[0]
    assert knn(copied, line_vector, 1)[0][0] == copied.copies.top_k(copied.conn, "atoms", "alice", line_vector, 1)[0][0]


def test_small_users_and_budgets_leave_the_search_to_vec0(db_path, embedder):
    rng = np.random.default_rng(7)
    for settings in (memdb.Settings(vector_copy_min=50), memdb.Settings(vector_copy_min=1, vector_copy_mb=0.001)):
        with memdb.open(db_path, embedder=embedder, extract="defer", settings=settings) as mem:
            insert(mem, unit(rng, 20))
            assert mem.copies.top_k(mem.conn, "atoms", "alice", unit(rng, 1)[0], 3) is None
            assert {} == dict(mem.copies.copies)


def test_the_copy_holds_to_its_memory_budget(db_path, embedder):
    rng = np.random.default_rng(8)
    # each copy: 20 rows x 64 dims x 4 bytes = 5 kB (+ ids); the budget fits one
    with memdb.open(db_path, embedder=embedder, extract="defer",
                    settings=memdb.Settings(vector_copy_min=1, vector_copy_mb=0.008)) as mem:
        insert(mem, unit(rng, 20), user="alice")
        insert(mem, unit(rng, 20), user="bob")
        mem.copies.top_k(mem.conn, "atoms", "alice", unit(rng, 1)[0], 3)
        mem.copies.top_k(mem.conn, "atoms", "bob", unit(rng, 1)[0], 3)
        assert [("atoms", "bob")] == list(mem.copies.copies)


def test_without_flags_only_ids_the_copy_holds():
    copy = copies.VectorCopy(ids=np.array([1, 3, 5, 7]), matrix=np.eye(4, dtype=np.float32), n=4)
    assert [True, False, True, False] == copy.without(np.array([0, 3, 4, 7, 9])).tolist()
    assert [True] * 4 == copy.without(np.array([], dtype=np.int64)).tolist()


# ---------------------------------------------------------------- common query terms


def test_the_commonest_terms_go_once_the_budget_is_spent(copied):
    copied.add([{"content": f"coffee with Ana number {i}"} for i in range(30)]
               + [{"content": "coffee in Lisbon"}], user="alice")
    match = fts.match_expression(copied.conn, "turns", "alice", "Ana coffee Lisbon", term_counts=copied.term_counts, postings=10)
    assert '"lisbon"' == match  # the only user: no scope; ana (30) and coffee (31) would not fit
    assert [31, 30, 1] == copied.term_counts.count(copied.conn, "turns", ["coffee", "ana", "lisbon"], 100)
    full = fts.match_expression(copied.conn, "turns", "alice", "Ana coffee Lisbon", term_counts=copied.term_counts, postings=0)
    assert '"ana" OR "coffee" OR "lisbon"' == full
    # every term too common: no keyword side at all (the vectors still answer)
    assert fts.match_expression(copied.conn, "turns", "alice", "Ana coffee", term_counts=copied.term_counts, postings=10) is None


def test_terms_are_pruned_only_where_the_user_is_alone(copied):
    copied.add([{"content": f"coffee with Ana number {i}"} for i in range(30)], user="bob")
    copied.add([{"content": "coffee in Lisbon"}], user="alice")
    match = fts.match_expression(copied.conn, "turns", "alice", "Ana coffee Lisbon", term_counts=copied.term_counts, postings=10)
    assert f'u : "{db_rows.user_tag("alice")}" AND ("ana" OR "coffee" OR "lisbon")' == match


def test_terms_are_counted_only_as_far_as_the_budget(copied):
    copied.add([{"content": f"coffee number {i}"} for i in range(30)], user="alice")
    assert [11, 0] == copied.term_counts.count(copied.conn, "turns", ["coffee", "tea"], 10)
    assert [30, 0] == copied.term_counts.count(copied.conn, "turns", ["coffee", "tea"], 100)


def test_a_term_counted_before_it_was_said_is_still_searched(copied):
    copied.add([{"content": f"coffee number {i}"} for i in range(30)], user="alice")
    settings = memdb.Settings(vector_copy_min=1, keyword_postings=5)
    asked = search_fusion.Query("biscuit coffee", user="alice", k=5, layer="turns")
    engine = search_fusion.Engine(settings, copies=copied.copies, term_counts=copied.term_counts)
    assert [] == search_fusion.search(copied.conn, asked, engine)
    [turn] = copied.add([{"content": "We adopted a dog named Biscuit"}], user="alice")
    hits = search_fusion.search(copied.conn, asked, engine)
    assert [turn] == [h.id for h in hits]


def test_the_user_scope_stays_when_the_file_holds_other_users(copied):
    copied.add([{"content": "coffee"}], user="alice")
    assert '"coffee"' == fts.match_expression(copied.conn, "turns", "alice", "coffee")
    copied.add([{"content": "coffee"}], user="bob")
    scoped = fts.match_expression(copied.conn, "turns", "alice", "coffee")
    assert scoped.startswith(f'u : "{db_rows.user_tag("alice")}" AND')
    hits = [h.id for h in copied.search("coffee", user="alice", layer="turns")]
    assert 1 == len(hits) and hits == [t["id"] for t in copied.turns(hits, user="alice")]


def test_expected_vectors_rank_as_each_would_alone(copied):
    """An extraction batch's vectors, ranked in one pass (expect), give each the answer vec0
    gives it, while the batch's own atoms are written and older ones superseded in between."""
    rng = np.random.default_rng(11)
    held = unit(rng, 400)
    ids = insert(copied, held)
    copied.copies.top_k(copied.conn, "atoms", "alice", held[0], 3)  # loads the copy
    # Each new vector sits next to a held one, and the batch supersedes what it lands near:
    # the ranking made at the first lookup must drop rows superseded after it.
    batch = (held[:12] + 0.05 * unit(rng, 12)).astype(np.float32)
    copied.copies.expect(batch)
    with connection.write(copied.conn):
        for i, vector in enumerate(batch):
            expected = knn(copied, vector, 8)
            actual = copied.copies.top_k(copied.conn, "atoms", "alice", vector, 8)
            assert [i for i, _ in expected] == [i for i, _ in actual]
            assert np.allclose([s for _, s in expected], [s for _, s in actual], atol=1e-5)
            insert(copied, vector[None])
            for atom_id, _ in actual[: 1 + i // 3]:  # more and more of the nearest rows go
                if atom_id in ids:
                    db_rows.set_atom_status(copied.conn, atom_id, "superseded")
    assert copied.copies.batches  # ranked in one pass, not one by one
    unexpected = unit(rng, 1)[0]
    assert [i for i, _ in knn(copied, unexpected, 8)] == \
        [i for i, _ in copied.copies.top_k(copied.conn, "atoms", "alice", unexpected, 8)]


# ---------------------------------------------------------------- 1-bit codes and the shortlist


def test_codes_count_the_bits_that_differ_from_the_center():
    rng = np.random.default_rng(4)
    vectors = rng.standard_normal((50, 100)).astype(np.float32)  # 100 dims: two 64-bit words, the last padded
    center = rng.standard_normal(100).astype(np.float32) * 0.1
    codes = vecmath.sign_codes(vectors, center)
    assert (2, 50) == codes.shape
    expected = ((vectors > center) != (vectors[7] > center)).sum(axis=1)
    assert expected.tolist() == vecmath.hamming(codes, vecmath.sign_codes(vectors[7], center)).tolist()
    words = codes[0] ^ codes[0, 7]
    assert [bin(int(w)).count("1") for w in words] == vecmath._count_bits(words).tolist()  # the numpy < 2 path


def clustered(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    """Unit vectors around a few hundred centers, all leaning one way (as e5's do)."""
    centers = rng.standard_normal((300, dim)).astype(np.float32)
    v = centers[rng.integers(0, 300, n)] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32) + 2.0
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def a_copy(vectors: np.ndarray) -> copies.VectorCopy:
    copy = copies.VectorCopy.empty(vectors.shape[1])
    copy.append(np.arange(1, len(vectors) + 1, dtype=np.int64), vectors)
    return copy


def test_a_large_copy_ranks_its_shortlist_by_exact_cosines():
    rng = np.random.default_rng(5)
    vectors = clustered(rng, 12_000)
    copy = a_copy(vectors)
    found = 0
    for row in rng.integers(0, len(vectors), 20):
        query = vectors[row] + 0.3 * unit(rng, 1)[0]
        query /= np.linalg.norm(query)
        shortlist = copy.shortlist(query, copies.MIN_SHORTLIST, None)
        by_cosine = shortlist[np.argsort(-(vectors[shortlist] @ query), kind="stable")][:10]
        hits = copy.top_k(query, 10, None, rescore=20)
        assert [int(i) + 1 for i in by_cosine] == [i for i, _ in hits]  # ids are rows + 1
        assert np.allclose([float(vectors[i - 1] @ query) for i, _ in hits], [s for _, s in hits])
        exact = copy.top_k(query, 10, None)
        found += len({i for i, _ in exact} & {i for i, _ in hits})
    assert found >= 0.95 * 200  # the shortlist of 1,024 holds nearly all of the exact top 10


def test_the_shortlist_leaves_out_inactive_rows_and_codes_rows_appended_later():
    rng = np.random.default_rng(6)
    vectors = clustered(rng, 10_000)
    copy = a_copy(vectors)
    active = np.ones(len(vectors), bool)
    active[:5000] = False
    hits = copy.top_k(vectors[10], 20, active, rescore=20)
    assert all(i > 5000 for i, _ in hits)
    assert 1 + 10 != hits[0][0]
    later = clustered(rng, 1)
    copy.append(np.array([20_000]), later)  # after the codes were made
    assert (20_000, pytest.approx(1.0, abs=1e-5)) == copy.top_k(later[0], 5, None, rescore=20)[0]


def test_a_small_copy_is_ranked_exactly_whatever_the_rescore():
    rng = np.random.default_rng(7)
    vectors = clustered(rng, 2000)
    copy = a_copy(vectors)
    query = unit(rng, 1)[0]
    assert copy.top_k(query, 60, None) == copy.top_k(query, 60, None, rescore=20)
    assert copy.codes is None  # never coded: too small for a shortlist to pay
