"""Embedders by name: the bundled MiniLM, a GGUF embedding model run by llama.cpp, or any
object with name, dim and embed(texts).

    emb = load()                      # or load("path/to/model.gguf"), load(my_object)
    vectors = emb.embed(["I hate cilantro."])   # float32, shape (1, emb.dim), unit rows
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import check_texts
from ..errors import EmbedderUnavailable, ModelError
from ..vecmath import unit
from . import assets, llama, minilm
from .protocols import Embedder

_MODELS: dict[tuple[str, str, str], tuple[Any, threading.Lock]] = {}  # GGUF contexts per process
_LOCK = threading.Lock()


def load(spec: Any = None, *, threads: int | None = None) -> Embedder:
    """The embedder named by spec: None or "minilm", a path to a .gguf file, or an embedder.

    Fails fast with EmbedderUnavailable when the model cannot be used. `threads` bounds the
    BLAS threads (numpy MiniLM, needs threadpoolctl) or llama.cpp's threads (GGUF).
    """
    if spec is None or (isinstance(spec, str) and spec.lower() in ("minilm", assets.MINILM_NAME.lower())):
        return minilm.load(threads)
    if isinstance(spec, (str, os.PathLike)):
        path = Path(spec)
        if path.suffix.lower() == ".gguf":
            return GGUFEmbedder(path, threads=threads)
        raise EmbedderUnavailable(f"unknown embedder {str(spec)!r}: use 'minilm' or a path to a .gguf file")
    if all(hasattr(spec, attr) for attr in ("name", "dim", "embed")):
        return spec
    raise EmbedderUnavailable(f"{spec!r} is not an embedder: it needs name, dim and embed(texts)")


class GGUFEmbedder:
    """A GGUF embedding model (BERT-like, pooled by the model's pooling type) run by llama.cpp."""

    def __init__(self, path: Path, *, threads: int | None = None) -> None:
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
        self.name = f"{path.name}:{digest[:12]}"
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
        with self._lock:
            rows = self._llm.embed(texts, normalize=False, truncate=True)
        return unit(np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim))


def _llama(path: Path, digest: str, threads: int | None) -> tuple[Any, threading.Lock]:
    key = (str(path.resolve()), digest, str(threads))
    with _LOCK:
        if key in _MODELS:
            return _MODELS[key]
        try:
            # n_ctx=0 takes the model's context; every text must fit one batch (no causal mask).
            llm = llama.new_llama(path, embedding=True, n_threads=threads, n_threads_batch=threads,
                                  n_ctx=0, n_batch=4096, n_ubatch=4096)
        except ModelError as e:
            raise EmbedderUnavailable(f"a GGUF embedder needs llama-cpp-python: {e}") from e
        except (ValueError, RuntimeError, OSError) as e:
            raise EmbedderUnavailable(f"llama.cpp cannot load the GGUF embedder {path}: {e}") from e
        _MODELS[key] = (llm, threading.Lock())
        return _MODELS[key]
