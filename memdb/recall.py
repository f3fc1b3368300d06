"""A query's way through memdb, top-down in the order its data flows: the query checked and
trimmed, embedded (nudged toward the session's last turns), its relevance baseline, the fused
search over keywords and vectors (search/fusion.py) with its fallbacks, and then the scenario
hits or the prompt-ready context block. Memory.search and Memory.context are these functions.

Search never raises for a failing index unless strict: without vectors it searches by keyword
(one warning), and if both sides fail it returns [] and logs an error.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

import apsw
import numpy as np

from .checks import check_count, check_name
from .db import rows
from .db.rows import Hit
from .errors import InvalidInput, SearchError
from .layers import search as scenario_search
from .search import context as contexts
from .search.fusion import LAYERS, Engine, Query, search as fused_search
from .settings import FUSIONS

if TYPE_CHECKING:  # for the annotations only: memory.py imports this module
    from .memory import Fusion, Layer, Memory

log = logging.getLogger("memdb")
# A query is searched by at most its first this many characters: the cost of the keyword side
# grows with the query's terms (a 10 MB query took ~50 s), and the embedder reads 2,000 anyway.
MAX_QUERY_CHARS = 4_000


def search(mem: Memory, query: str, *, user: str, k: int, layer: Layer, session: str | None, fusion: Fusion | None,
           alpha: float | None, include_superseded: bool, strict: bool) -> list[Hit]:
    """The k hits that matter for query (see Memory.search)."""
    check_search(query, user, k, layer, fusion, alpha)
    if len(query) > MAX_QUERY_CHARS:  # a pasted document: its opening says what it is about
        mem.warn_once(f"memdb: a query of more than {MAX_QUERY_CHARS} characters is searched by its first "
                      f"{MAX_QUERY_CHARS}")
        query = query[:MAX_QUERY_CHARS]
    if session is not None:  # bound into SQL below: a lone surrogate would raise there
        check_name(session, "session")
    if layer == "scenarios":
        atom_hits = search(mem, query, user=user, k=min(1000, max(30, 3 * k)), layer="atoms", session=session,
                           fusion=fusion, alpha=alpha, include_superseded=False, strict=strict)
        with mem.lock:
            return scenario_search.search(mem.conn, atom_hits, mem.settings, k)
    qvec = query_vector(mem, query, user, session)
    asked = Query(query, user=user, k=k, layer=layer, vector=qvec, fusion=fusion, alpha=alpha,
                  include_superseded=include_superseded,
                  cosine_baseline=mem.embedding.query_baseline(qvec, mem.settings))
    engine = Engine(mem.settings, copies=mem.copies, term_counts=mem.term_counts, keywords=mem.keywords)
    try:
        return _fused(mem, asked, engine, strict)
    finally:
        with mem.lock:  # keyword and vector copies this search asked for, built in the background from now
            mem.keywords.start_builds()
            mem.copies.start_builds()


def _fused(mem: Memory, asked: Query, engine: Engine, strict: bool) -> list[Hit]:
    """The fused search, else by keywords alone if the vector side fails, else [] (strict: raise)."""
    with mem.lock:
        try:
            return fused_search(mem.conn, asked, engine)
        except apsw.Error as exc:
            if strict:
                raise SearchError(f"search failed: {exc}") from exc
            if asked.vector is None:
                log.error("memdb: search failed, returning nothing: %s", exc)
                return []
            log.warning("memdb: vector search failed, using keywords only: %s", exc)
        try:
            return fused_search(mem.conn, dataclasses.replace(asked, vector=None), engine)
        except apsw.Error as exc:
            log.error("memdb: keyword search failed too, returning nothing: %s", exc)
            return []


def check_search(query: Any, user: Any, k: Any, layer: Any, fusion: Any, alpha: Any) -> None:
    """Raise InvalidInput for a search argument that is not what search takes."""
    if not isinstance(query, str):
        raise InvalidInput(f"query must be a string, not {type(query).__name__}")
    check_name(user, "user")
    check_count(k, "k", most=1000)
    if layer not in (*LAYERS, "scenarios"):
        raise InvalidInput(f"layer must be one of {', '.join(LAYERS)} or scenarios, not {layer!r}")
    if fusion is not None and fusion not in FUSIONS:
        raise InvalidInput(f"fusion must be one of {', '.join(FUSIONS)}, not {fusion!r}")
    if alpha is not None and not (isinstance(alpha, (int, float)) and 0 <= alpha <= 1):
        raise InvalidInput(f"alpha must be a number from 0 to 1, not {alpha!r}")


def query_vector(mem: Memory, query: str, user: str, session: str | None) -> np.ndarray | None:
    """The query's vector, nudged toward the session's last turns (working memory); None
    without an embedder that reads the query's language."""
    with mem.lock:
        mem.embedding.follow(mem.path)
        recent = rows.recent_contents(mem.conn, user, session, 3) if session is not None else []
    return mem.embedding.query_vector(query, recent, mem.settings)


def context_lines(mem: Memory, query: str, *, user: str, budget: int, k: int, session: str | None, layer: Layer,
                  scenarios: bool, persona: bool) -> list[tuple[str, Hit | None]]:
    """context()'s lines, each with the hit it shows (None for the header and persona lines)."""
    if not isinstance(budget, int) or budget < 1:
        raise InvalidInput(f"budget must be a positive integer, not {budget!r}")
    if layer == "scenarios":
        raise InvalidInput('context takes layer "atoms", "turns" or "both"; for scenario blocks pass scenarios=True')
    hits = mem.search(query, user=user, k=k, layer=layer, session=session)
    with mem.lock:
        return contexts.block(mem.conn, hits, user=user, settings=mem.settings, budget=budget, layer=layer,
                              scenarios=scenarios, persona=persona, count_tokens=mem.count_tokens)
