"""What memdb needs from a model: the LLM and Embedder protocols."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class LLM(Protocol):
    """What extraction needs from a model: one constrained completion over chat messages."""

    name: str
    sha256: str

    def complete(self, messages: list[dict[str, str]], *, schema: dict, max_tokens: int) -> str:
        """The model's reply to messages, constrained to JSON matching schema where possible.
        A trailing assistant message is the start of the reply: return the whole reply, with it."""
        ...


@runtime_checkable
class Embedder(Protocol):
    """What memdb needs from an embedder. Optional, looked up with getattr: embed_query(texts)
    for a model with a query role (e5's "query: "; embed is then the passage role), and
    multilingual = False for one that cannot read CJK (its vectors then get no weight for a
    Chinese query, and Chinese atoms dedup by their words), and cosine_baseline, the cosine of
    two unrelated texts (search rescales cosines from it, so that a model whose cosines all sit
    near 0.8 does not rank everything alike)."""

    name: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """float32 array of shape (len(texts), dim) whose rows have unit length."""
        ...
