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
# ---------------------------------------------------------------- 1-bit codes
# A vector's code keeps one bit a dimension: whether it lies above a center (the mean of the
# vectors coded, so that an embedder whose vectors all point one way, as e5's do, still gets
# bits that differ). The Hamming distance between codes orders vectors roughly as their
# cosines do, reading 32x less memory than float32; index/copies.py ranks by it first and
# rescores the best few by their exact cosines.

_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)  # numpy < 2 has no bitwise_count


def sign_codes(vectors: np.ndarray, center: np.ndarray) -> np.ndarray:
    """(n, dim) float rows -> (ceil(dim / 64), n) uint64 codes, one row per 64 dimensions (so
    that hamming reads each word of every code as one contiguous array): bit i of a code is
    set where its vector's value i lies above center[i]. One vector gives (words,)."""
    bits = np.packbits(np.atleast_2d(np.asarray(vectors)) > center, axis=-1)
    pad = -bits.shape[-1] % 8
    if pad:
        bits = np.pad(bits, [(0, 0), (0, pad)])
    codes = np.ascontiguousarray(bits).view(np.uint64).T
    return np.ascontiguousarray(codes[:, 0] if np.ndim(vectors) == 1 else codes)


def hamming(codes: np.ndarray, code: np.ndarray) -> np.ndarray:
    """Bits that differ between each code of codes (words, n) and code (words,), as uint16."""
    count = np.bitwise_count if hasattr(np, "bitwise_count") else _count_bits
    distance = count(codes[0] ^ code[0]).astype(np.uint16)
    for word in range(1, len(code)):
        distance += count(codes[word] ^ code[word])
    return distance


def _count_bits(words: np.ndarray) -> np.ndarray:
    return _BITS[words.view(np.uint8)].reshape(len(words), -1).sum(axis=-1, dtype=np.uint16)
