"""Shared fixtures: temporary files, a small deterministic embedder and a scripted extraction
model for fast tests."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

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


Reply = str | BaseException | Callable[[list[dict[str, str]]], str]


class ScriptedLLM:
    """The tests' one stand-in for the extraction model: each call is answered with the next
    scripted reply, cycling. A reply is a string, an exception (raised), or a function of the
    call's messages that returns the string. calls keeps every call's messages.

    pronouns: given, the pronoun question (extraction.persons asks it apart from the notes) is
    answered from them, "they" for a name not there, and is neither scripted nor in calls."""

    sha256 = "0" * 64

    def __init__(self, *replies: Reply, name: str = "scripted", pronouns: dict[str, str] | None = None) -> None:
        self.replies = list(replies)
        self.name = name
        self.pronouns = pronouns
        self.calls: list[list[dict[str, str]]] = []

    def complete(self, messages: list[dict[str, str]], *, schema: dict, max_tokens: int) -> str:
        if self.pronouns is not None and "p" in schema.get("properties", {}):
            name = messages[1]["content"].removeprefix("Name: ")
            return json.dumps({"p": self.pronouns.get(name, "they")})
        reply = self.replies[len(self.calls) % len(self.replies)]
        self.calls.append(messages)
        if isinstance(reply, BaseException):
            raise reply
        return reply(messages) if callable(reply) else reply


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
    """Opens the test file again with a model (open(llm=...)), most often a ScriptedLLM, closed
    after the test."""
    opened: list[memdb.Memory] = []

    def open_(llm, **settings):
        opened.append(memdb.open(db_path, embedder=embedder, extract="defer", llm=llm,
                                 settings=memdb.Settings(**settings)))
        return opened[-1]

    yield open_
    for m in opened:
        m.close()
