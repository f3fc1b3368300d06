"""Vector copies written beside the file and mapped by later opens (index/copyfiles.py): used
only while exact, gone with what forget() deletes, safe against a crash mid-write."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

import memdb
from memdb.db import connection
from memdb.index import copyfiles

from .test_cache import insert, knn, unit

FILES = memdb.Settings(vector_copy_min=1, vector_copy_files=True, vector_copy_file_min=1)


@pytest.fixture
def filed(db_path, embedder):
    with memdb.open(db_path, embedder=embedder, extract="defer", settings=FILES) as m:
        yield m


def copy_file(db_path, user: str = "alice", layer: str = "atoms"):
    return copyfiles.path_for(copyfiles.directory(str(db_path)), layer, user)


def ids_in_file(db_path, user: str = "alice") -> list[int]:
    found = copyfiles.read(copy_file(db_path, user))
    return [] if found is None else found[0].tolist()


def ranked(mem, query: np.ndarray, k: int = 10, user: str = "alice") -> list[int]:
    return [i for i, _ in mem.copies.top_k(mem.conn, "atoms", user, query, k)]


def reopened(db_path, embedder):
    return memdb.open(db_path, embedder=embedder, extract="defer", settings=FILES)


def test_a_copy_is_written_once_and_mapped_by_the_next_open(filed, db_path, embedder):
    rng = np.random.default_rng(1)
    ids = insert(filed, unit(rng, 40))
    query = unit(rng, 1)[0]
    assert [i for i, _ in knn(filed, query, 10)] == ranked(filed, query)
    assert ids == ids_in_file(db_path)
    mode = stat.S_IMODE(os.stat(copy_file(db_path)).st_mode)
    assert (0o600, 0o700) == (mode, stat.S_IMODE(os.stat(copy_file(db_path).parent).st_mode))
    with reopened(db_path, embedder) as other:
        assert [i for i, _ in knn(other, query, 10)] == ranked(other, query)
        copy = other.copies.copies[("atoms", "alice")]
        assert isinstance(copy.base.matrix, np.memmap) and 40 == copy.base.n and 0 == copy.n


def test_rows_written_since_are_read_beside_the_mapped_copy(filed, db_path, embedder):
    rng = np.random.default_rng(2)
    insert(filed, unit(rng, 30))
    ranked(filed, unit(rng, 1)[0])  # writes the file
    with reopened(db_path, embedder) as writer:
        later = unit(rng, 5)
        later_ids = insert(writer, later)
    with reopened(db_path, embedder) as other:
        for vector, atom_id in zip(later, later_ids):
            assert atom_id == ranked(other, vector, 1)[0]
        assert (30, 5) == (other.copies.copies[("atoms", "alice")].base.n, other.copies.copies[("atoms", "alice")].n)


def test_a_stale_file_is_never_served(filed, db_path, embedder):
    rng = np.random.default_rng(3)
    vectors = unit(rng, 30)
    ids = insert(filed, vectors)
    ranked(filed, vectors[0])
    # A writer that deletes rows without bumping vectors_epoch (an older memdb, a hand-made
    # delete, a file restored from an earlier backup): the row count up to the copy's last id moved.
    with connection.write(filed.conn):
        filed.conn.execute('delete from "atoms_vec" where "atom_id" = ?', (ids[0],))
        filed.conn.execute('delete from "atoms" where "id" = ?', (ids[0],))
    with reopened(db_path, embedder) as other:
        assert ids[0] not in ranked(other, vectors[0], 30)
        assert ids[1:] == ids_in_file(db_path)  # and it was written again without it
    # Another embedder's vectors (reembed bumps the epoch and deletes the files).
    filed.reembed(embedder)
    assert not copy_file(db_path).exists()


def test_a_file_whose_epoch_moved_is_replaced(filed, db_path, embedder):
    rng = np.random.default_rng(4)
    insert(filed, unit(rng, 20))
    insert(filed, unit(rng, 20), user="bob")
    ranked(filed, unit(rng, 1)[0])
    with reopened(db_path, embedder) as other:
        other.forget(user="bob")  # moves the epoch the file records
    assert copy_file(db_path).exists()
    before = os.stat(copy_file(db_path)).st_ino
    with reopened(db_path, embedder) as third:
        ranked(third, unit(rng, 1)[0])
    assert before != os.stat(copy_file(db_path)).st_ino


def test_forget_removes_the_users_copy_files(filed, db_path, embedder):
    rng = np.random.default_rng(5)
    vectors = unit(rng, 20)
    ids = insert(filed, vectors)
    insert(filed, unit(rng, 20), user="bob")
    ranked(filed, vectors[0])
    ranked(filed, vectors[0], user="bob")
    filed.forget(atom_id=ids[0], user="alice")
    assert not copy_file(db_path).exists() and copy_file(db_path, "bob").exists()
    assert ids[0] not in ranked(filed, vectors[0], 20)
    assert ids[1:] == ids_in_file(db_path)  # written again, without the forgotten atom
    # forget by a process that never writes copy files still removes them
    with memdb.open(db_path, embedder=embedder, extract="defer") as plain:
        plain.forget(user="alice")
    assert not copy_file(db_path).exists()
    assert [] == list(copyfiles.directory(str(db_path)).glob(copy_file(db_path).name + "*"))


def test_a_concurrent_forget_invalidates_a_mapped_copy(filed, db_path, embedder):
    rng = np.random.default_rng(6)
    vectors = unit(rng, 25)
    ids = insert(filed, vectors)
    ranked(filed, vectors[0])
    with reopened(db_path, embedder) as reader:
        assert ids[3] == ranked(reader, vectors[3], 1)[0]  # mapped
        filed.forget(atom_id=ids[3], user="alice")  # another connection, while it is mapped
        assert ids[3] not in ranked(reader, vectors[3], 25)
    assert ids[3] not in ids_in_file(db_path)


def test_a_copy_written_while_a_forget_commits_is_deleted(filed, db_path, embedder, monkeypatch):
    rng = np.random.default_rng(7)
    insert(filed, unit(rng, 20))
    insert(filed, unit(rng, 5), user="bob")
    commit = copyfiles.Writer.commit

    def forget_meanwhile(self, n, header):  # a forget in another process, between read and rename
        with memdb.open(db_path, embedder=embedder, extract="defer") as other:
            other.forget(user="bob")
        commit(self, n, header)

    monkeypatch.setattr(copyfiles.Writer, "commit", forget_meanwhile)
    ranked(filed, unit(rng, 1)[0])
    assert not copy_file(db_path).exists()


def test_a_half_written_or_foreign_file_is_not_read(filed, db_path, embedder):
    rng = np.random.default_rng(8)
    vectors = unit(rng, 20)
    insert(filed, vectors)
    ranked(filed, vectors[0])
    path = copy_file(db_path)
    whole = path.read_bytes()
    for broken in (whole[: len(whole) // 2], b"not a copy" + whole[10:], b""):
        path.write_bytes(broken)
        with reopened(db_path, embedder) as other:
            assert [i for i, _ in knn(other, vectors[0], 10)] == ranked(other, vectors[0])
        assert whole == path.read_bytes()  # written again


def test_no_file_while_rows_wait_for_their_vectors(db_path, embedder):
    with memdb.open(db_path, embedder=None, extract="defer") as keyword_only:
        keyword_only.add([{"content": "we use PostgreSQL"}], user="alice")
    with memdb.open(db_path, embedder=embedder, extract="defer",
                    settings=memdb.Settings(vector_copy_min=1, vector_copy_files=True, vector_copy_file_min=1,
                                            vector_backfill=0)) as m:
        insert(m, unit(np.random.default_rng(9), 5))
        m.copies.top_k(m.conn, "turns", "alice", unit(np.random.default_rng(9), 1)[0], 3)
        assert not copy_file(db_path, layer="turns").exists()


def test_copy_files_are_off_by_default_and_for_memory_databases(mem, db_path, embedder):
    rng = np.random.default_rng(10)
    insert(mem, unit(rng, 10))
    mem.copies.top_k(mem.conn, "atoms", "alice", unit(rng, 1)[0], 3)
    assert not copyfiles.directory(str(db_path)).exists()
    assert copyfiles.directory(":memory:") is None
    with pytest.raises(memdb.InvalidInput, match="vector_copy_files"):
        memdb.Settings(vector_copy_files="yes")


def test_a_file_is_written_again_once_many_rows_came_since(filed, db_path, embedder):
    rng = np.random.default_rng(11)
    ids = insert(filed, unit(rng, 20))
    ranked(filed, unit(rng, 1)[0])
    with reopened(db_path, embedder) as writer:
        later = insert(writer, unit(rng, 10))  # more than a quarter of the file's rows
    with reopened(db_path, embedder) as other:
        query = unit(rng, 1)[0]
        assert [i for i, _ in knn(other, query, 10)] == ranked(other, query)
    assert ids + later == ids_in_file(db_path)
    with reopened(db_path, embedder) as third:
        ranked(third, query)
        assert (30, 0) == (third.copies.copies[("atoms", "alice")].base.n, third.copies.copies[("atoms", "alice")].n)
