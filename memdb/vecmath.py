"""Vectors as memdb keeps them: float32 rows of length 1, stored as little-endian bytes."""

from __future__ import annotations

import numpy as np


def unit(vectors: np.ndarray) -> np.ndarray:
    """float32 rows (or one vector) scaled to length 1; a zero row stays zero."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.where(norms > 0, norms, np.float32(1.0))


def as_blob(vector: np.ndarray) -> bytes:
    """A vector as sqlite-vec takes it: float32 bytes."""
    return np.ascontiguousarray(vector, dtype=np.float32).tobytes()
