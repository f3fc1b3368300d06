"""A large user's vectors read out of vec0's chunks in bulk (index/chunks.py) for a copy: the
same rows, in id order, as one point lookup a row; anything out of the way read row by row."""

from __future__ import annotations

import numpy as np
import pytest

import memdb
from memdb import vecmath
from memdb.db import connection
from memdb.db import rows as db_rows
from memdb.index import chunks

from tests.test_cache import DIM, insert, unit


@pytest.fixture
def copied(db_path, embedder, monkeypatch):
    """A Memory whose copies of any size are read through the chunks."""
    monkeypatch.setattr(chunks, "MIN_ROWS", 1)
    with memdb.open(db_path, embedder=embedder, extract="defer",
                    settings=memdb.Settings(vector_copy_min=1)) as m:
        yield m


def point_lookups(mem, user: str) -> tuple[list[int], np.ndarray]:
    rows = mem.conn.execute('select a."id", v."embedding" from "atoms" a join "atoms_vec" v on v."atom_id" = a."id" '
                            'where a."user" = ? order by a."id"', (user,)).fetchall()
    return [r[0] for r in rows], np.stack([np.frombuffer(r[1], np.float32) for r in rows])


def bulk(mem, user: str, after: int = 0, upto: int = 10**9) -> tuple[int | None, list[int], np.ndarray]:
    got_ids, got_vectors = [], []

    def append(ids, vectors):
        got_ids.extend(ids.tolist())
        got_vectors.append(vectors)

    found = chunks.read(mem.conn, "atoms_vec", user, DIM, after, upto, 10**6, append)
    return found, got_ids, np.concatenate(got_vectors) if got_vectors else np.empty((0, DIM), np.float32)


def knn(mem, query: np.ndarray, k: int, user: str) -> list[int]:
    return [i for (i,) in mem.conn.execute(
        "select atom_id from atoms_vec where embedding match ? and k = ? and user = ? and active = 1",
        (vecmath.as_blob(query), k, user))]


def test_the_chunks_hold_what_point_lookups_read_in_id_order(copied):
    rng = np.random.default_rng(5)
    # Two users written in turns, so that their chunks interleave; then holes in alice's.
    for _ in range(3):
        insert(copied, unit(rng, 13), "alice")
        insert(copied, unit(rng, 6), "bob")
    ids, _ = point_lookups(copied, "alice")
    for gone in (ids[0], ids[9], ids[20]):
        copied.forget(atom_id=gone, user="alice")
    expected_ids, expected_vectors = point_lookups(copied, "alice")
    found, actual_ids, actual_vectors = bulk(copied, "alice")
    assert (36, expected_ids) == (found, actual_ids)
    assert np.array_equal(expected_vectors, actual_vectors)
    # An id range, as a copy's catch-up would ask
    found, actual_ids, _ = bulk(copied, "alice", after=expected_ids[4], upto=expected_ids[30])
    assert (26, expected_ids[5:31]) == (found, actual_ids)


def test_ids_out_of_order_or_too_many_rows_are_left_to_point_lookups(copied):
    rng = np.random.default_rng(6)
    ids = insert(copied, unit(rng, 20), "alice")
    assert bulk(copied, "alice")[0] == 20
    assert chunks.read(copied.conn, "atoms_vec", "alice", DIM, 0, 10**9, 19, lambda i, v: None) is None
    # A vector stored again for an old row lands in the newest chunk, after newer ids.
    with connection.write(copied.conn):
        copied.conn.execute("delete from atoms_vec where atom_id = ?", (ids[3],))
        copied.conn.execute("insert into atoms_vec (atom_id, user, active, embedding) values (?, 'alice', 1, ?)",
                            (ids[3], vecmath.as_blob(unit(rng, 1)[0])))
    assert bulk(copied, "alice")[0] is None


def test_a_copy_read_through_the_chunks_ranks_like_vec0(copied, monkeypatch):
    rng = np.random.default_rng(7)
    insert(copied, unit(rng, 150), "alice")
    insert(copied, unit(rng, 40), "bob")
    more = insert(copied, unit(rng, 60), "alice")
    copied.forget(atom_id=more[0], user="alice")
    read = []
    monkeypatch.setattr(chunks, "read", lambda *a, **kw: read.append(a[2]) or original(*a, **kw))
    for query in unit(rng, 10):
        assert knn(copied, query, 20, "alice") == [i for i, _ in copied.copies.top_k(copied.conn, "atoms", "alice", query, 20)]
    assert ["alice"] == read  # loaded once, through the chunks
    assert 209 == copied.copies.copies[("atoms", "alice")].n


original = chunks.read


def test_a_layout_other_than_the_known_one_is_read_row_by_row(copied, monkeypatch):
    rng = np.random.default_rng(8)
    insert(copied, unit(rng, 50), "alice")
    monkeypatch.setattr(chunks, "_CHUNK_COLUMNS", ["chunk_id", "size", "validity", "rowids"])
    assert bulk(copied, "alice")[0] is None
    for query in unit(rng, 5):
        assert knn(copied, query, 10, "alice") == [i for i, _ in copied.copies.top_k(copied.conn, "atoms", "alice", query, 10)]
    assert 50 == copied.copies.copies[("atoms", "alice")].n



def test_a_large_users_copy_is_read_in_the_background_and_brought_up_to_date(db_path, embedder):
    rng = np.random.default_rng(10)
    settings = memdb.Settings(vector_copy_min=1, vector_copy_background=100)
    with memdb.open(db_path, embedder=embedder, extract="defer", settings=settings) as mem:
        ids = insert(mem, unit(rng, 150), "alice")
        query = unit(rng, 1)[0]
        assert None is mem.copies.top_k(mem.conn, "atoms", "alice", query, 10)  # vec0 answers meanwhile
        assert [("atoms", "alice")] == list(mem.copies.building)
        assert [] == list(mem.copies.copies)
        mem.copies.wait()
        # Written and superseded after the copy was read, before it was adopted:
        later = insert(mem, unit(rng, 5), "alice")
        with connection.write(mem.conn):
            db_rows.set_atom_status(mem.conn, ids[2], "superseded")
        for vector in [query, *unit(rng, 5)]:
            assert knn(mem, vector, 20, "alice") == [i for i, _ in mem.copies.top_k(mem.conn, "atoms", "alice", vector, 20)]
        assert 155 == mem.copies.copies[("atoms", "alice")].n
        assert later[0] == mem.copies.top_k(mem.conn, "atoms", "alice", mem_vector(mem, later[0]), 1)[0][0]


def mem_vector(mem, atom_id: int) -> np.ndarray:
    return np.frombuffer(mem.conn.execute("select embedding from atoms_vec where atom_id = ?", (atom_id,)).fetchone()[0],
                         np.float32)


def test_search_starts_the_read_it_asked_for_and_finds_the_same_hits(db_path, embedder):
    settings = memdb.Settings(vector_copy_min=1, vector_copy_background=20)
    with memdb.open(db_path, embedder=embedder, extract="defer", settings=settings) as mem:
        for i in range(30):
            mem.add([{"content": f"note {i}: the ferry to the island leaves at {i} o'clock"}], user="alice")
        expected = [h.id for h in mem.search("when does the ferry leave", user="alice", layer="turns")]  # vec0's
        assert all(thread.ident is not None for thread in mem.copies.building.values())
        mem.copies.wait()
        assert expected == [h.id for h in mem.search("when does the ferry leave", user="alice", layer="turns")]
        assert ("turns", "alice") in mem.copies.copies


def test_close_stops_a_read_in_the_background(db_path, embedder):
    rng = np.random.default_rng(11)
    mem = memdb.open(db_path, embedder=embedder, extract="defer",
                     settings=memdb.Settings(vector_copy_min=1, vector_copy_background=10))
    insert(mem, unit(rng, 40), "alice")
    mem.copies.top_k(mem.conn, "atoms", "alice", unit(rng, 1)[0], 5)
    mem.copies.stopping.set()  # as close() does, before the thread reads its first batch
    mem.copies.wait()
    assert (None, {}) == (mem.copies.ready[("atoms", "alice")], mem.copies.building)
    mem.close()


def test_an_in_memory_file_reads_its_copies_itself(embedder):
    with memdb.open(":memory:", embedder=embedder, extract="defer",
                    settings=memdb.Settings(vector_copy_min=1, vector_copy_background=10)) as mem:
        insert(mem, unit(np.random.default_rng(12), 40), "alice")
        assert mem.copies.top_k(mem.conn, "atoms", "alice", unit(np.random.default_rng(13), 1)[0], 5) is not None
        assert {} == mem.copies.building


def test_a_negative_background_size_is_refused_by_name():
    with pytest.raises(memdb.InvalidInput, match="vector_copy_background"):
        memdb.Settings(vector_copy_background=-1)
