"""The keyword index: FTS5 MATCH expressions scoped to a user, and which query terms are
worth scoring.

Text is indexed as a segmented copy (text.segment: CJK runs as unigrams and bigrams), and each
row carries a user tag token in column "u", so one FTS5 table serves every user of the file.
"""

from __future__ import annotations

from collections.abc import Callable

import apsw

from .. import text
from ..db.rows import user_tag

MAX_QUERY_TERMS = 32  # a pasted page must not become a 1,000-term OR
MAX_COUNTED_TERMS = 200_000  # term counts kept before they are all counted afresh


def match_expression(conn: apsw.Connection, layer: str, user: str, query: str, *,
                     term_counts: TermCounts | None = None, postings: int = 0,
                     common: tuple[float, int] | None = None) -> str | None:
    """The FTS5 MATCH for query on layer ("atoms" or "turns"), scoped to user; None when no
    searchable term is left.

    Every term is quoted, so no operator in user text takes effect. When user is the only one
    in the table, the user scope is left out (it would only add a pass over all their rows)
    and, given term counts and a postings budget, only the rarest terms whose rows fit in the
    budget are kept: bm25 counts and scores every posting of every term, and a term in a
    fifth of the user's rows weighs little (idf ~1.4, a rare name ~7) but costs the most.
    With other users in the file the counts are theirs too and say nothing of which terms
    are common for this user: pruning by them lost MRR at 1,000 users x 1k atoms
    (bench/scale.py --configs 1000x1k), so it is left to single-user files.

    common = (share, least_rows): terms in more than share of the user's rows are left out
    once the user has least_rows rows (common_terms).
    """
    terms, sole = match_terms(conn, layer, user, query, term_counts=term_counts, postings=postings, common=common)
    return expression_for(layer, user, terms, sole=sole)


def match_terms(conn: apsw.Connection, layer: str, user: str, query: str, *,
                term_counts: TermCounts | None = None, postings: int = 0,
                common: tuple[float, int] | None = None, counter: Counter | None = None) -> tuple[list[str], bool]:
    """The terms match_expression ORs together (each once per time it is given), and whether
    user is the only one in layer's table: what an in-memory keyword copy scores instead.
    counter: counts the terms term_counts has not counted yet as FTS5 would (a keyword copy)."""
    sole = sole_user(conn, layer, user)
    terms = distinctive_terms(conn, layer, user, query, common=common, term_counts=term_counts if sole else None)
    return affordable_terms(layer, terms, sole=sole, conn=conn, term_counts=term_counts, postings=postings,
                            counter=counter), sole


def match_for_terms(layer: str, user: str, terms: list[str], *, sole: bool, conn: apsw.Connection,
                    term_counts: TermCounts | None = None, postings: int = 0) -> str | None:
    """The MATCH of match_expression for terms already chosen (distinctive_terms); sole: whether
    user is the only one in layer's table."""
    terms = affordable_terms(layer, terms, sole=sole, conn=conn, term_counts=term_counts, postings=postings)
    return expression_for(layer, user, terms, sole=sole)


def affordable_terms(layer: str, terms: list[str], *, sole: bool, conn: apsw.Connection,
                     term_counts: TermCounts | None = None, postings: int = 0,
                     counter: Counter | None = None) -> list[str]:
    """terms, without the commonest beyond the postings budget in a file of one user."""
    if sole and term_counts is not None and postings and terms:
        return _affordable(terms, term_counts.count(conn, layer, terms, postings, counter=counter), postings)
    return terms


def expression_for(layer: str, user: str, terms: list[str], *, sole: bool) -> str | None:
    """The FTS5 MATCH ORing terms, scoped to user unless they are the table's only one."""
    if not terms:
        return None
    expression = " OR ".join(text.quote(t) for t in terms)
    return expression if sole else f'u : "{user_tag(user)}" AND ({expression})'


# A Chinese question's bigrams that straddle a function word or a question word ("身的", "给我",
# "哪些", "什么") match the way people talk, not what they talk about.
_ZH_QUESTION_CHARS = frozenset("哪什么谁吗呢怎几")


def query_terms(query: str) -> list[str]:
    """The query's searchable terms, in order: each becomes one phrase of an OR. Chinese bigrams
    with a function or question character are left out while others remain (a better MRR and
    recall on MemoryBank-cn dev: bench/memorybank_retrieval.py)."""
    terms = [t for t in text.terms(query)[:MAX_QUERY_TERMS] if text.quote(t)]
    content = [t for t in terms if not _zh_function_bigram(t)]
    return content or terms


def _zh_function_bigram(term: str) -> bool:
    return len(term) == 2 and text.is_cjk(term[0]) and text.is_cjk(term[1]) and bool(
        set(term) & (text.ZH_STOP_CHARS | _ZH_QUESTION_CHARS))


def distinctive_terms(conn: apsw.Connection, layer: str, user: str, query: str, *,
                      common: tuple[float, int] | None, term_counts: TermCounts | None = None) -> list[str]:
    """The query's terms without those in most of the user's rows (common_terms); term_counts
    only when the user is the file's only one."""
    terms = query_terms(query)
    if common is None or not terms:
        return terms
    skip = common_terms(conn, layer, user, terms, *common, counts=term_counts)
    return [t for t in terms if t not in skip]


def common_terms(conn: apsw.Connection, layer: str, user: str, terms: list[str], share: float,
                 least_rows: int, *, counts: TermCounts | None = None) -> set[str]:
    """The terms found in more than share of the user's rows of layer.

    bm25's term statistics are the whole file's, so in a file of many users a user's own
    name is a rare word that weighs like a topic: "what movies does Bob like?" ranked every
    "Bob ..." atom first. Within the user's rows such a term says nothing about which row
    answers; and even where bm25 gives it no weight (a file of one user), each side of the
    fusion is normalised by its best score, so a match on it alone still scored 1.0. Each term
    is counted up to the share only; counts (the file's term counts) serve a file of one user.
    """
    if share >= 1:
        return set()
    rows = conn.execute(f'select count(*) from "{layer}" where "user" = ?', (user,)).fetchone()[0]
    if rows < least_rows:
        return set()
    most = int(share * rows)
    if counts is not None:
        return {term for term, found in zip(terms, counts.count(conn, layer, terms, most)) if found > most}
    fts = f"{layer}_fts"
    scope = f'u : "{user_tag(user)}" AND '
    common = set()
    for term in terms:
        found = conn.execute(f'select count(*) from (select 1 from "{fts}" where "{fts}" match ? limit ?)',
                             (scope + text.quote(term), most + 1)).fetchone()[0]
        if found > most:
            common.add(term)
    return common


def _affordable(terms: list[str], counts: list[int], postings: int) -> list[str]:
    # Rarest first, while their postings fit. Counts may be a little stale (TermCounts): that
    # only moves terms that are common anyway, and a term counted 0 always fits.
    kept, spent = set(), 0
    for count, term in sorted(zip(counts, terms)):
        if spent + count > postings:
            break
        kept.add(term)
        spent += count
    return [t for t in terms if t in kept]


def sole_user(conn: apsw.Connection, layer: str, user: str) -> bool:
    """Whether user is the only one with rows in layer."""
    # Two subqueries, each answered from the user index in O(log n) (a single select with
    # both min() and max() would scan it).
    row = conn.execute(
        f'select (select min("user") from "{layer}"), (select max("user") from "{layer}")'
    ).fetchone()
    return row[0] == user and row[1] == user


# Counts rows holding each term, capped (terms, cap) -> counts, as TermCounts.count's query does;
# None: it cannot (FTS5 counts them).
Counter = Callable[[list[str], int], "list[int] | None"]


class TermCounts:
    """How many rows hold each query term, per connection: bm25 first counts every posting of
    every query term, so the commonest terms cost the most and weigh the least; in a file of one
    user, match_expression drops the commonest terms beyond a postings budget using these counts.
    Not thread-safe: Memory holds its lock around every use."""

    def __init__(self, *, growth: float = 1.1) -> None:
        self.growth = growth
        self.frequencies: dict[tuple[str, str], tuple[int, int]] = {}  # (count, counted up to)
        self.frequencies_size: dict[str, int] = {}

    def count(self, conn: apsw.Connection, layer: str, terms: list[str], cap: int, *,
              counter: Counter | None = None) -> list[int]:
        """How many rows of the layer's FTS table (all users) hold each term, counted up to
        cap + 1: past the budget a term is dropped whatever its count, and counting a common
        term of a file with many users to the end would cost what pruning saves. counter
        counts the terms not held here instead of FTS5, with the same answer (a keyword copy
        of the file's one user: a new word of an absorbed atom cost a query reading up to
        cap postings, ~1 ms at 100k atoms).

        Counts are kept until the table has grown by `growth` (a tenth): they decide which terms are too
        common to be worth scoring, which a few new rows do not change."""
        fts = f"{layer}_fts"
        size = conn.execute(f'select coalesce(max("id"), 0) from "{layer}"').fetchone()[0]
        held = self.frequencies_size.get(layer)
        if held is None or size > held * self.growth or size < held or len(self.frequencies) > MAX_COUNTED_TERMS:
            self.frequencies = {k: v for k, v in self.frequencies.items() if k[0] != layer}
            self.frequencies_size[layer] = size
        out: list[int | None] = []
        for term in terms:
            count, counted_to = self.frequencies.get((layer, term), (None, cap))
            out.append(None if count is None or count > counted_to and cap > counted_to else count)  # new, or stopped short
        todo = [term for term, count in zip(terms, out) if count is None]
        counted = counter(todo, cap) if counter is not None and todo else None
        if counted is None:
            counted = [conn.execute(f'select count(*) from (select 1 from "{fts}" where "{fts}" match ? limit ?)',
                                    (text.quote(term), cap + 1)).fetchone()[0] for term in todo]
        for term, count in zip(todo, counted):
            self.frequencies[(layer, term)] = (count, cap)
        fresh = iter(counted)
        return [next(fresh) if count is None else count for count in out]
