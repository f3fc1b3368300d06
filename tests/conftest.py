"""Shared fixtures: temporary files and a small deterministic embedder for fast tests."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import memdb
from memdb import text


class HashEmbedder:
    """Bag-of-terms vectors by feature hashing: texts sharing terms are similar, others not."""

    def __init__(self, dim: int = 64, name: str = "hash-test") -> None:
        self.dim = dim
        self.name = name

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, line in enumerate(texts):
            for term in text.terms(line) or ["<empty>"]:
                digest = hashlib.blake2b(term.encode(), digest_size=8).digest()
                out[row, digest[0] % self.dim] += 1.0 if digest[1] % 2 else -1.0
            out[row] /= np.linalg.norm(out[row]) or 1.0
        return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):
    """A private MEMDB_CACHE for a whole test module, so tests never touch the user's cache."""
    path = tmp_path_factory.mktemp("memdb-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMDB_CACHE", str(path))
        yield path


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "test.db"


@pytest.fixture
def mem(db_path, embedder):
    with memdb.open(db_path, embedder=embedder, extract="defer") as m:
        yield m


@pytest.fixture
def open_with_llm(db_path, embedder):
    """Opens the test file again with a scripted model (open(llm=...)), closed after the test."""
    opened: list[memdb.Memory] = []

    def open_(llm, **settings):
        opened.append(memdb.open(db_path, embedder=embedder, extract="defer", llm=llm,
                                 settings=memdb.Settings(**settings)))
        return opened[-1]

    yield open_
    for m in opened:
        m.close()
