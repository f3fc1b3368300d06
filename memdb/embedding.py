"""Which embedder a Memory uses, and what it does when that embedder fails or changes.

The file's own embedder keeps its vectors meaningful: "auto" loads the one the file records
(else the default), and one that cannot load leaves the Memory keyword-only, logged once, never
failing a call. When another connection reembeds the file, the next call follows it. A vector
made with an embedder the file no longer records is dropped (the next writer fills it in:
flow.backfill). The cosine of unrelated texts, by which search and the scenarios rescale
cosines, is read here alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import apsw
import numpy as np

from .db import connection
from .errors import EmbedderUnavailable, MemdbError
from .models.protocols import Embedder
from .settings import Settings
from .vecmath import unit

DEFAULT_EMBEDDER = "auto"  # the file's own embedder, else the bundled default
# What open(embedder=) takes: a name, a GGUF path, an Embedder object, or None for keyword-only.
EmbedderSpec = str | os.PathLike[str] | Embedder | None


class Embedding:
    """A Memory's embedder (None: keyword-only) and why it has none (error)."""

    def __init__(self, conn: apsw.Connection, spec: Any, *, threads: int | None, read_only: bool,
                 warn: Callable[[str], None]) -> None:
        self.conn = conn
        self.threads = threads
        self.read_only = read_only
        self.warn = warn  # logs a message once per Memory
        self.embedder, self.error = self.load(spec)

    def load(self, spec: Any) -> tuple[Any, str | None]:
        """(embedder, None), or (None, why) when the Memory runs keyword-only. Raises
        EmbedderUnavailable for one asked for by name that cannot load."""
        if spec is None:
            return None, "no embedder (keyword-only by request)"
        try:
            if hasattr(spec, "embed"):  # an embedder object: use it as it is
                embedder = spec
            else:
                from .models import embedders

                name = spec
                if spec == DEFAULT_EMBEDDER:  # the file's own embedder keeps its vectors meaningful
                    name = connection.get_meta(self.conn, "embedder_name")
                    if name is None and self.read_only:  # no vectors to search, none to be written
                        return None, "keyword-only: the file holds no vectors (opened read-only)"
                    name = name or embedders.DEFAULT
                embedder = embedders.load(name, threads=self.threads)
        except EmbedderUnavailable as exc:
            if spec != DEFAULT_EMBEDDER:  # asked for by name: running without it would be a surprise
                raise
            self.warn(f"memdb: embedder unavailable, running keyword-only: {exc}")
            return None, str(exc)
        if self.read_only:
            if not connection.vectors_held(self.conn, embedder.name, embedder.dim):
                return None, f"keyword-only: the file holds no vectors of {embedder.name!r} (opened read-only)"
            return embedder, None
        connection.ensure_vectors(self.conn, embedder.name, embedder.dim)
        return embedder, None

    def embed(self, texts: list[str], *, query: bool = False) -> np.ndarray | None:
        """The vectors of texts (as queries: in the embedder's query role), or None without an
        embedder or when it fails: a broken embedder must not lose the user's words."""
        if self.embedder is None or not texts:
            return None
        try:
            if query:
                from .models import embedders

                return embedders.query_vectors(self.embedder, texts)
            return self.embedder.embed(texts)
        except Exception as exc:
            self.warn(f"memdb: embedding failed, storing without vectors: {exc}")
            return None

    def moved(self) -> bool:
        """Whether the file now records another embedder than ours: another connection reembedded
        it. Vectors made with ours would sit beside the new model's, meaning nothing."""
        return self.embedder is not None and connection.get_meta(self.conn, "embedder_name") != self.embedder.name

    def follow(self, path: str) -> None:
        """After a reembed by another connection, use the embedder the file records now (or none,
        if it cannot load: keyword-only, and its writers fill the vectors in). Call under the
        Memory's lock."""
        if not self.moved():
            return
        moved_to = connection.get_meta(self.conn, "embedder_name")
        self.warn(f"memdb: {path} was moved to the embedder {moved_to!r} by another connection; following it")
        self.embedder, self.error = None, f"the file moved to {moved_to!r}"
        if moved_to is not None:
            try:
                self.embedder, self.error = self.load(DEFAULT_EMBEDDER)
            except MemdbError as exc:
                self.error = str(exc)

    def cosine_baseline(self) -> float:
        """The embedder's cosine of unrelated texts (0 without one): a cosine at it means nothing."""
        return float(getattr(self.embedder, "cosine_baseline", 0.0)) if self.embedder is not None else 0.0

    def query_baseline(self, query_vector: np.ndarray | None, settings: Settings) -> float:
        """The cosine of unrelated texts for this query vector (search/relevance.py), never
        below the embedder's constant: a query close to everything (nonsense) is measured from
        higher up, a plain question from the constant (bench/context_floor.py)."""
        fixed = self.cosine_baseline()
        if query_vector is None or not settings.query_baseline:
            return fixed
        from .search import relevance

        try:
            return max(fixed, relevance.baseline(self.embedder, query_vector))
        except Exception as exc:  # an embedder that fails here: the constant still works
            self.warn(f"memdb: per-query relevance baseline unavailable, using {fixed}: {exc}")
            return fixed

    def query_vector(self, query: str, recent: list[str], settings: Settings) -> np.ndarray | None:
        """The query's vector, nudged toward the session's recent turns (working memory), or
        None when the embedder cannot read the query's language: vectors of a language it cannot
        read (MiniLM on Chinese) are noise, and fusion is never worse than its better half."""
        from .models import embedders

        if self.embedder is None or not embedders.reads(self.embedder, query):
            return None
        texts = [query[:2000], *recent]
        found = self.embed(texts, query=True)
        if found is None:
            return None
        return unit(found[0] + settings.session_weight * found[1:].sum(axis=0) / max(1, len(texts) - 1))

    def reembed(self, spec: Any, settings: Settings) -> tuple[Any, int]:
        """Rebuild every vector of the file with another embedder, in one transaction, and the
        scenario centroids (means of the old vectors). Returns (the new embedder, vectors
        written); the caller drops the copy files and holds the Memory's lock."""
        from .index import vectors
        from .layers import store
        from .models import embedders

        new = embedders.load(spec, threads=self.threads)
        written = vectors.rebuild(self.conn, new.name, new.dim, new.embed)
        with connection.write(self.conn):
            for (scenario_id,) in self.conn.execute('select "id" from "scenarios"').fetchall():
                store.refresh(self.conn, scenario_id, settings)
        self.embedder, self.error = new, None
        return new, written
