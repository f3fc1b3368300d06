"""What every search and every absorb on one connection share: the settings and the
connection's in-memory indexes (index/copies.py, index/fts.py, index/keywords.py), passed as
one object rather than as a handful of keyword arguments."""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import Settings
from .copies import VectorCopies
from .fts import TermCounts
from .keywords import KeywordCopies


@dataclass(frozen=True)
class Engine:
    """The settings and the connection's in-memory indexes. With copies, large users' vectors
    are ranked in memory; with term counts, common query terms are pruned in single-user files;
    with keyword copies, large users' postings are scored in memory. None: SQLite answers that
    side."""

    settings: Settings
    copies: VectorCopies | None = None
    term_counts: TermCounts | None = None
    keywords: KeywordCopies | None = None
