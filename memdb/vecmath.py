"""Vectors as memdb keeps them: float32 rows of length 1, stored as little-endian bytes."""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any

import numpy as np

log = logging.getLogger("memdb")


def unit(vectors: np.ndarray) -> np.ndarray:
    """float32 rows (or one vector) scaled to length 1; a zero row stays zero."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.where(norms > 0, norms, np.float32(1.0))


def as_blob(vector: np.ndarray) -> bytes:
    """A vector as sqlite-vec takes it: float32 bytes."""
    return np.ascontiguousarray(vector, dtype=np.float32).tobytes()


@functools.cache
def _threadpool_controller() -> Any:
    """threadpoolctl's controller, or None (and one warning) when it is not installed."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        log.warning("threads setting ignored for numpy: install threadpoolctl to limit its BLAS threads")
        return None
    return ThreadpoolController()


def blas_threads(threads: int | None) -> contextlib.AbstractContextManager[Any]:
    """A context in which numpy's BLAS (the in-RAM vector copies' products) uses at most
    threads threads (None: as it likes)."""
    controller = _threadpool_controller() if threads is not None else None
    if controller is None:
        return contextlib.nullcontext()
    return controller.limit(limits=threads, user_api="blas")
