"""Retrieval: query analysis, the fusion SQL, evidence grouping and the prompt-ready context.

The keyword side (FTS5 bm25 with column weights) and the vector side (sqlite-vec KNN in the
user's partition) are fused in one SQL statement. Afterwards the ranked list is walked once
so that no two hits stand for the same evidence: an atom whose source turns are already
covered, or a turn that a kept atom already stands for, does not take a slot.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import apsw
import numpy as np

from . import codec, store, text
from .cache import SearchCache
from .settings import Settings

log = logging.getLogger("memdb")

LAYERS = ("atoms", "turns", "both")
FUSIONS = ("weighted", "rrf")

# bm25 column weights: user tag (never scores), subject+predicate, value, whole line, kind.
# The source column (the turns an atom came from) finds atoms by what was said; it weighs
# less than the atom's own fields. Chosen on the LoCoMo dev split (bench/locomo_retrieval.py).
ATOM_WEIGHTS = (0.0, 2.0, 2.0, 1.0, 0.3, 1.5)
TURN_WEIGHTS = (0.0, 0.5, 1.0)
MAX_QUERY_TERMS = 32  # a pasted page must not become a 1,000-term OR


@dataclass
class Hit:
    """One search result: an atom or a raw turn, with the L0 turns it stands for."""

    id: int
    layer: str  # "atom" | "turn"
    text: str
    score: float
    turn_ids: list[int]
    ts: str  # an event's date, else when it was last said
    kind: str | None = None  # atoms only
    status: str | None = None  # atoms only
    speaker: str | None = None  # turns only
    conflicts: list[int] = field(default_factory=list)  # atoms that disagree with this one


# ---------------------------------------------------------------- query analysis

_TIME = re.compile(
    r"\b(when|what (time|date|day|year|month)|how long (ago|since)|which (day|year|month|week))\b"
    r"|什么时候|哪天|哪一天|几号|哪年|哪一年|多久|何时|几月",
    re.I,
)
_PREFERENCE = re.compile(
    r"\b(like|likes|liked|prefer\w*|favou?rite|enjoy\w*|love\w*|hate\w*|dislike\w*|recommend\w*|"
    r"into|fan of|taste|hobby|hobbies|interested)\b|喜欢|偏好|爱好|讨厌|推荐|口味|兴趣",
    re.I,
)
_LOOKUP = re.compile(
    r"^\s*(what|which|who|whom|where|how (many|much|old))\b|\d|\"|“|谁|哪里|哪个|多少|什么|是否",
    re.I,
)


def intent(query: str) -> str:
    """A rule-based guess at what the query asks: "time", "preference", "lookup" or "open"."""
    if _TIME.search(query):
        return "time"
    if _PREFERENCE.search(query):
        return "preference"
    if _LOOKUP.search(query):
        return "lookup"
    return "open"


def match_expression(conn: apsw.Connection, layer: str, user: str, query: str, *,
                     cache: SearchCache | None = None, postings: int = 0) -> str | None:
    """The FTS5 MATCH for query on layer ("atoms" or "turns"), scoped to user; None when no
    searchable term is left.

    Every term is quoted, so no operator in user text takes effect. When user is the only one
    in the table, the user scope is left out (it would only add a pass over all their rows)
    and, given a cache and a postings budget, only the rarest terms whose rows fit in the
    budget are kept: bm25 counts and scores every posting of every term, and a term in a
    fifth of the user's rows weighs little (idf ~1.4, a rare name ~7) but costs the most.
    With other users in the file the counts are theirs too and say nothing of which terms
    are common for this user: pruning by them lost 18% of MRR at 1,000 users x 1k atoms
    (bench/scale.py), so it is left to single-user files.
    """
    terms = [t for t in text.terms(query)[:MAX_QUERY_TERMS] if text.quote(t)]
    sole = _sole_user(conn, layer, user)
    if sole and cache is not None and postings and terms:
        terms = _affordable(terms, cache.document_frequencies(conn, layer, terms, postings), postings)
    if not terms:
        return None
    expression = " OR ".join(text.quote(t) for t in terms)
    return expression if sole else f'u : "{store.user_tag(user)}" AND ({expression})'


def _affordable(terms: list[str], counts: list[int], postings: int) -> list[str]:
    # Rarest first, while their postings fit. Counts may be a little stale (cache.py): that
    # only moves terms that are common anyway, and a term counted 0 always fits.
    kept, spent = set(), 0
    for count, term in sorted(zip(counts, terms)):
        if spent + count > postings:
            break
        kept.add(term)
        spent += count
    return [t for t in terms if t in kept]


def _sole_user(conn: apsw.Connection, layer: str, user: str) -> bool:
    # Two subqueries, each answered from the user index in O(log n) (a single select with
    # both min() and max() would scan it).
    row = conn.execute(
        f'select (select min("user") from "{layer}"), (select max("user") from "{layer}")'
    ).fetchone()
    return row[0] == user and row[1] == user


# ---------------------------------------------------------------- the fusion statement

_EMPTY = "select null as id, null as s where 0"


def _keyword_cte(table: str, weights: Sequence[float], param: str | None) -> str:
    if param is None:
        return _EMPTY
    w = ", ".join(str(x) for x in weights)
    return (
        f'select rowid as id, -bm25("{table}", {w}) as s from "{table}" '
        f'where "{table}" match :{param} order by s desc limit :pool'
    )


def _vector_cte(table: str, key: str, source: str | None, active_filter: str = "") -> str:
    """The vector side: sqlite-vec KNN in the user's partition ("knn"), or the (id, cosine)
    pairs ranked by the in-process copy (cache.py), bound as JSON ("copy:<param>")."""
    if source is None:
        return _EMPTY
    if source.startswith("copy:"):
        return f"select value ->> 0 as id, value ->> 1 as s from json_each(:{source[5:]})"
    return (
        f'select "{key}" as id, 1.0 - distance as s from "{table}" '
        f"where embedding match :vector and k = :pool and user = :user{active_filter}"
    )


def _ranked(name: str, source: str) -> str:
    # Each side is normalised by its best score (so the top hit of each side is 1.0) and ranked.
    return (
        f"{name} as (select id, s / nullif((select max(s) from {source}), 0) as n, "
        f"row_number() over (order by s desc) as r from {source})"
    )


def _fused(layer: str, kw: str, vec: str) -> str:
    return (
        f"{layer}_fused as (select c.id, case when :rrf then "
        f"coalesce(1.0 / (:rrf_k + {kw}.r), 0) + coalesce(1.0 / (:rrf_k + {vec}.r), 0) "
        f"else :alpha * coalesce({kw}.n, 0) + (1 - :alpha) * coalesce({vec}.n, 0) end as base "
        f"from (select id from {kw} union select id from {vec}) c "
        f"left join {kw} using (id) left join {vec} using (id))"
    )


@dataclass
class Sides:
    """Which candidate lists the fusion statement reads: for each layer its keyword side (the
    bound MATCH's parameter name, or None) and its vector side (see _vector_cte, or None)."""

    atom_keyword: str | None = None
    atom_vector: str | None = None
    turn_keyword: str | None = None
    turn_vector: str | None = None


def fusion_sql(sides: Sides, *, include_superseded: bool) -> str:
    """One statement that fuses keyword and vector candidates of atoms and/or turns.

    Atom scores are also scaled by confidence and by freshness: a per-kind half-life (no
    decay for facts and constraints) measured back from the user's latest turn.
    """
    active = "" if include_superseded else " and active = 1"
    statuses = "(0, 1, 2)" if include_superseded else "(0, 2)"
    # Each side is read twice (its rows and its max score): "materialized" makes SQLite run
    # it once. Without it the KNN ran twice per statement (bench/scale.py: +40% latency).
    ctes = [
        f"akw as materialized ({_keyword_cte('atoms_fts', ATOM_WEIGHTS, sides.atom_keyword)})",
        f"avec as materialized ({_vector_cte('atoms_vec', 'atom_id', sides.atom_vector, active)})",
        f"tkw as materialized ({_keyword_cte('turns_fts', TURN_WEIGHTS, sides.turn_keyword)})",
        f"tvec as materialized ({_vector_cte('turns_vec', 'turn_id', sides.turn_vector)})",
        _ranked("akw_r", "akw"), _ranked("avec_r", "avec"),
        _ranked("tkw_r", "tkw"), _ranked("tvec_r", "tvec"),
        _fused("atom", "akw_r", "avec_r"), _fused("turn", "tkw_r", "tvec_r"),
        "half_lives(kind, days) as (values (0, :hl_fact), (1, :hl_preference), "
        "(2, :hl_constraint), (3, :hl_event))",
    ]
    atom_select = (
        "select 'atom' as layer, a.id, a.text, "
        "f.base * :atom_weight * (0.5 + 0.5 * a.confidence) * case when h.days is null then 1.0 "
        "else :floor + (1 - :floor) * pow(0.5, max(0, julianday(:now) - julianday(a.last_seen)) / h.days) "
        "end as score, "
        "(select group_concat(s.turn_id) from atom_sources s where s.atom_id = a.id) as turn_ids, "
        "case when a.kind = 3 then a.valid_from else a.last_seen end as ts, "
        "a.kind, a.status, null as speaker "
        "from atom_fused f join atoms a on a.id = f.id join half_lives h on h.kind = a.kind "
        f"where a.user = :user and a.status in {statuses}"
    )
    turn_select = (
        "select 'turn', t.id, t.content, "
        # Turns the pre-filter skipped (greetings, thanks) rank lower: they rarely hold an answer.
        "f.base * case when t.state = 2 then :skipped_weight else 1.0 end, "
        "cast(t.id as text), t.ts, null, null, "
        "coalesce(t.speaker, (select r.name from roles r where r.code = t.role)) "
        "from turn_fused f join turns t on t.id = f.id where t.user = :user"
    )
    return (
        "with " + ",\n".join(ctes) + "\n"
        f"{atom_select}\nunion all\n{turn_select}\norder by score desc limit :pool"
    )


# ---------------------------------------------------------------- search


def search(
    conn: apsw.Connection,
    query: str,
    *,
    user: str,
    k: int,
    layer: str,
    settings: Settings,
    query_vector: np.ndarray | None,
    fusion: str | None = None,
    alpha: float | None = None,
    include_superseded: bool = False,
    cache: SearchCache | None = None,
) -> list[Hit]:
    """Fused, evidence-deduplicated hits for one user. Raises apsw.Error if SQL fails.

    With a cache, large users' vectors are ranked in memory and common query terms are
    pruned (cache.py); without one, every side is asked of SQLite."""
    fusion = fusion or settings.fusion
    alpha = settings.alpha.get(intent(query), 0.5) if alpha is None else alpha
    pool = max(settings.candidate_pool, 3 * k)
    vector_ok = query_vector is not None and store.has_vectors(conn)
    params: dict = {"user": user, "pool": pool, "vector": store.as_blob(query_vector) if vector_ok else None}
    sides = Sides()
    for name in [n for n in ("atoms", "turns") if layer in (n, "both")]:
        side = name[:-1]  # "atom" | "turn"
        match = match_expression(conn, name, user, query, cache=cache, postings=settings.keyword_postings)
        if match is not None:
            params[f"{side}_match"] = match
            setattr(sides, f"{side}_keyword", f"{side}_match")
        if vector_ok:
            setattr(sides, f"{side}_vector", _vector_side(
                conn, cache, name, user, query_vector, pool, not include_superseded, params))
    if not any(vars(sides).values()):
        return []
    hl = settings.half_life_days
    params.update({
        "rrf": fusion == "rrf", "rrf_k": settings.rrf_k, "alpha": alpha,
        "atom_weight": settings.atom_weight, "skipped_weight": settings.skipped_turn_weight,
        "floor": settings.freshness_floor,
        "now": _user_now(conn, user),
        "hl_fact": hl.get("fact"), "hl_preference": hl.get("preference"),
        "hl_constraint": hl.get("constraint"), "hl_event": hl.get("event"),
    })
    rows = conn.execute(fusion_sql(sides, include_superseded=include_superseded), params).fetchall()
    hits = [_hit(row) for row in rows]
    hits = distinct_evidence(hits)[:k]
    _attach_conflicts(conn, hits)
    return hits


def _vector_side(conn: apsw.Connection, cache: SearchCache | None, layer: str, user: str,
                 vector: np.ndarray, pool: int, active_only: bool, params: dict) -> str:
    ranked = cache.top_k(conn, layer, user, vector, pool, active_only=active_only) if cache else None
    if ranked is None:
        return "knn"
    param = f"{layer[:-1]}_vector_hits"
    params[param] = json.dumps(ranked)
    return f"copy:{param}"


def _user_now(conn: apsw.Connection, user: str) -> str:
    row = conn.execute('select max("ts") from "turns" where "user" = ?', (user,)).fetchone()
    return row[0] or store.now()


def _hit(row: tuple) -> Hit:
    layer, id_, line, score, turn_ids, ts, kind, status, speaker = row
    return Hit(
        id=id_, layer=layer, text=line, score=float(score or 0.0),
        turn_ids=sorted(int(t) for t in str(turn_ids).split(",")) if turn_ids else [],
        ts=ts, kind=codec.KIND_NAMES.get(kind), status=codec.STATUS_NAMES.get(status),
        speaker=speaker,
    )


def distinct_evidence(hits: list[Hit]) -> list[Hit]:
    """Keep hits in rank order, dropping any whose turns are all covered by kept hits."""
    covered: set[int] = set()
    kept = []
    for hit in hits:
        if hit.turn_ids and covered.issuperset(hit.turn_ids):
            continue
        covered.update(hit.turn_ids)
        kept.append(hit)
    return kept


def _attach_conflicts(conn: apsw.Connection, hits: list[Hit]) -> None:
    for hit in hits:
        if hit.layer == "atom" and hit.status == "conflicting":
            hit.conflicts = [
                other
                for (other,) in conn.execute(
                    'select "other_id" from "atom_conflicts" where "atom_id" = ? '
                    'union select "atom_id" from "atom_conflicts" where "other_id" = ?',
                    (hit.id, hit.id),
                )
            ]


# ---------------------------------------------------------------- context


def render_line(hit: Hit) -> str:
    """One context line: date · kind · text (turns: date · speaker: words)."""
    date = (hit.ts or "")[:10]
    if hit.layer == "atom":
        return f"{date} · {hit.kind} · {hit.text}"
    said = " ".join(hit.text.split())
    return f"{date} · {hit.speaker}: {said}"


def context(
    hits: list[Hit],
    related: Callable[[Hit], list[Hit]],
    *,
    budget: int,
    count_tokens: Callable[[str], int],
) -> str:
    """The best hits as prompt-ready lines under budget tokens, most useful first.

    After each atom come its conflicting partners and, while the budget allows, closely
    related atoms (same source turn or subject), so "likes sci-fi" arrives together with
    "watched Interstellar twice".
    """
    lines: list[str] = []
    used = 0
    shown: set[tuple[str, int]] = set()
    for hit in hits:
        group = [hit] + (related(hit) if hit.layer == "atom" else [])
        for member in group:
            key = (member.layer, member.id)
            if key in shown:
                continue
            line = render_line(member)
            if member.status == "conflicting":
                line += " (conflicts with another statement; ask which holds)"
            cost = count_tokens(line + "\n")
            if used + cost > budget:
                continue
            shown.add(key)
            lines.append(line)
            used += cost
    return "\n".join(lines)


def related_atoms(conn: apsw.Connection, hit: Hit, *, limit: int = 3) -> list[Hit]:
    """Active atoms close to an atom hit: its conflicting partners first, then atoms sharing a
    source turn, then atoms about the same subject."""
    if hit.layer != "atom":
        return []
    rows = conn.execute(
        """
        with me as (select "user", "record" from "atoms" where "id" = :id),
        linked as (
            select "other_id" as id, 0 as rank from "atom_conflicts" where "atom_id" = :id
            union select "atom_id", 0 from "atom_conflicts" where "other_id" = :id
            union select s2."atom_id", 1 from "atom_sources" s1
                join "atom_sources" s2 on s2."turn_id" = s1."turn_id"
                where s1."atom_id" = :id and s2."atom_id" != :id
        )
        select 'atom', a."id", a."text", 0.0,
               (select group_concat(s."turn_id") from "atom_sources" s where s."atom_id" = a."id"),
               case when a."kind" = 3 then a."valid_from" else a."last_seen" end,
               a."kind", a."status", null
        from linked l join "atoms" a on a."id" = l.id
        where a."user" = (select "user" from me) and a."status" in (0, 2)
        group by a."id" order by min(l.rank), a."last_seen" desc limit :limit
        """,
        {"id": hit.id, "limit": limit},
    ).fetchall()
    return [_hit(row) for row in rows]
