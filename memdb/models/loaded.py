"""The process's loaded models: each made once per key and shared by every caller after.

Loading a model costs from milliseconds (a worker handle) to seconds (weights, a graph, a
tokenizer), and the same weights loaded twice cost their memory twice; so the embedders
(memdb.models.embedders), the extraction models (memdb.models.llama) and their worker processes
(memdb.models.worker) keep what they load here, under one lock. The lock is reentrant, so a
model whose loading loads another (an embedder on top of a runtime) does not wait for itself.
Loads are serialised: two processes' worth of model loading at once on a small machine is
slower than one after the other, and rare.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

_MADE: dict[tuple[str, Hashable], Any] = {}
_LOCK = threading.RLock()


def once(kind: str, key: Hashable, make: Callable[[], T]) -> T:
    """The model of this kind and key, made by make() the first time (what make raises
    propagates and nothing is kept, so a later call tries again)."""
    with _LOCK:
        if (kind, key) not in _MADE:
            _MADE[(kind, key)] = make()
        return _MADE[(kind, key)]


def made(kind: str) -> list[tuple[Hashable, Any]]:
    """The keys and models of a kind made so far, oldest first."""
    with _LOCK:
        return [(key, model) for (k, key), model in _MADE.items() if k == kind]
