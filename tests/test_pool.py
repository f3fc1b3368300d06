"""The tenant pool (pool.py): one file per tenant, at most max_open open, none closed in use."""

from __future__ import annotations

import pytest

import memdb


@pytest.fixture
def pool(tmp_path, embedder):
    with memdb.Pool(tmp_path / "tenants", max_open=2, copies_mb=8, embedder=embedder, extract="defer") as p:
        yield p


def remember(pool, tenant: str, content: str) -> None:
    with pool.tenant(tenant) as mem:
        mem.add([{"content": content}], user="alice")


def test_each_tenant_has_its_own_file_and_at_most_max_open_stay_open(pool):
    for tenant in ("acme", "globex", "initech"):
        remember(pool, tenant, f"{tenant} runs on PostgreSQL")
    assert ["globex", "initech"] == list(pool.open_files)  # acme, least recently used, closed
    assert {"acme.db", "globex.db", "initech.db"} <= {p.name for p in pool.directory.iterdir()}
    with pool.tenant("acme") as mem:  # opened again, with what it held
        assert ["acme runs on PostgreSQL"] == [h.text for h in mem.search("PostgreSQL", user="alice", layer="turns")]
    assert ["initech", "acme"] == list(pool.open_files)


def test_a_tenant_in_use_is_not_closed(pool):
    with pool.tenant("acme") as held:
        remember(pool, "globex", "one")
        remember(pool, "initech", "two")
        assert "acme" in pool.open_files
        held.add([{"content": "still open"}], user="alice")
    remember(pool, "umbrella", "three")
    assert 2 == len(pool.open_files)


def test_files_share_one_embedder_and_split_the_copies_budget(pool, embedder):
    remember(pool, "acme", "x")
    remember(pool, "globex", "y")
    assert [embedder, embedder] == [m.embedder for m in pool.open_files.values()]
    assert 8 == sum(m.settings.vector_copy_mb + m.settings.keyword_copy_mb for m in pool.open_files.values())


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden", "", "a b"])
def test_a_tenant_name_must_be_a_plain_file_name(pool, name):
    with pytest.raises(memdb.InvalidInput):
        pool.path(name)


@pytest.mark.parametrize("kw", [{"max_open": 0}, {"max_open": True}, {"copies_mb": -1}])
def test_bad_pool_sizes_are_refused(tmp_path, kw):
    with pytest.raises(memdb.InvalidInput):
        memdb.Pool(tmp_path, embedder=None, **kw)
