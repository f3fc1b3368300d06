"""The fusion: keyword and vector candidates of atoms and turns, scored in one SQL statement.

The keyword side is FTS5 bm25 with column weights; the vector side is the user's nearest
vectors (index/vectors.py: vec0 KNN or the in-memory copy), bound as JSON. Each side is
normalised by its best score and fused by weight or by reciprocal rank; atoms are scaled by
confidence and freshness. Afterwards the ranked list is walked once so that no two hits stand
for the same evidence: an atom whose source turns are already covered, or a turn that a kept
atom already stands for, does not take a slot; an atom of a kept raw turn takes its place.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import apsw
import numpy as np

from .. import codec, text, timeparse
from ..checks import now
from ..db import rows
from ..db.rows import Hit
from ..index import fts, vectors
from ..index.engine import Engine
from ..settings import Settings
from . import relevance
from .query import intent

LAYERS = ("atoms", "turns", "both")

_EMPTY = "select null as id, null as s where 0"


def _keyword_cte(table: str, weights: Sequence[float], param: str | None) -> str:
    if param is None:
        return _EMPTY
    if param.endswith("_hits"):  # (id, bm25) ranked by a keyword copy (index/keywords.py)
        return _vector_cte(param)
    w = ", ".join(str(float(x)) for x in weights)
    return (
        f'select rowid as id, -bm25("{table}", {w}) as s from "{table}" '
        f'where "{table}" match :{param} order by s desc limit :pool'
    )


def _vector_cte(param: str | None) -> str:
    # The (id, cosine) pairs of vectors.nearest, bound as one JSON array.
    if param is None:
        return _EMPTY
    return f"select value ->> 0 as id, value ->> 1 as s from json_each(:{param})"


def _ranked(name: str, source: str) -> str:
    # Each side is normalised by its best score (so the top hit of each side is 1.0) and ranked.
    return (
        f"{name} as (select id, s / nullif((select max(s) from {source}), 0) as n, "
        f"row_number() over (order by s desc) as r from {source})"
    )


def _fused(layer: str, kw: str, vec: str, day: str) -> str:
    # A row from a day the query names ("在5月4日", "on 8 May 2023") is a candidate whatever its
    # words, and gains :date_weight: neither side knows when a row was said.
    return (
        f"{layer}_fused as (select c.id, case when :rrf then "
        f"coalesce(1.0 / (:rrf_k + {kw}.r), 0) + coalesce(1.0 / (:rrf_k + {vec}.r), 0) "
        f"else :alpha * coalesce({kw}.n, 0) + (1 - :alpha) * coalesce({vec}.n, 0) end "
        f"+ case when {day}.id is null then 0 else :date_weight end as base "
        f"from (select id from {kw} union select id from {vec} union select id from {day}) c "
        f"left join {kw} using (id) left join {vec} using (id) left join {day} using (id))"
    )


@dataclass
class Sides:
    """The bound parameter each candidate list is read from, or None when that side is off."""

    atom_keyword: str | None = None
    atom_vector: str | None = None
    turn_keyword: str | None = None
    turn_vector: str | None = None
    atom_day: str | None = None
    turn_day: str | None = None


def fusion_sql(sides: Sides, settings: Settings, *, include_superseded: bool) -> str:
    """One statement that fuses keyword and vector candidates of atoms and/or turns.

    Atom scores are also scaled by confidence and by freshness: a per-kind half-life (no
    decay for facts and constraints) measured back from the user's latest turn.
    """
    held = codec.codes(codec.STATUSES, *codec.STATUSES) if include_superseded else codec.HELD
    kinds = codec.KINDS
    # Each side is read twice (its rows and its max score): "materialized" makes SQLite run
    # it once. Without it the KNN ran twice per statement.
    ctes = [
        f"akw as materialized ({_keyword_cte('atoms_fts', settings.atom_columns, sides.atom_keyword)})",
        f"avec as materialized ({_vector_cte(sides.atom_vector)})",
        f"tkw as materialized ({_keyword_cte('turns_fts', settings.turn_columns, sides.turn_keyword)})",
        f"tvec as materialized ({_vector_cte(sides.turn_vector)})",
        f"aday as materialized ({_vector_cte(sides.atom_day)})",
        f"tday as materialized ({_vector_cte(sides.turn_day)})",
        _ranked("akw_r", "akw"), _ranked("avec_r", "avec"),
        _ranked("tkw_r", "tkw"), _ranked("tvec_r", "tvec"),
        _fused("atom", "akw_r", "avec_r", "aday"), _fused("turn", "tkw_r", "tvec_r", "tday"),
        f"half_lives(kind, days) as (values ({kinds['fact']}, :hl_fact), ({kinds['preference']}, :hl_preference), "
        f"({kinds['constraint']}, :hl_constraint), ({kinds['event']}, :hl_event))",
    ]
    atom_score = (
        "f.base * :atom_weight * (:conf_floor + (1 - :conf_floor) * a.confidence) * case when h.days is null "
        "then 1.0 else :floor + (1 - :floor) * pow(0.5, max(0, julianday(:now) - julianday(a.last_seen)) / h.days) end"
    )
    # Turns the pre-filter skipped (greetings, thanks) rank lower: they rarely hold an answer.
    turn_score = f"f.base * case when t.state = {codec.STATES['skipped']} then :skipped_weight else 1.0 end"
    atom_select = (
        f"select {rows.ATOM_HIT.format(score=f'({atom_score}) as score')} "
        "from atom_fused f join atoms a on a.id = f.id join half_lives h on h.kind = a.kind "
        f"where a.user = :user and a.status in {held}"
    )
    turn_select = f"select {rows.TURN_HIT.format(score=turn_score)} from turn_fused f join turns t on t.id = f.id where t.user = :user"
    return (
        "with " + ",\n".join(ctes) + "\n"
        f"{atom_select}\nunion all\n{turn_select}\norder by score desc limit :pool"
    )


def _relevance(near: list[tuple[int, float | None]], baseline: float) -> list[tuple[int, float | None]]:
    """Cosines rescaled so that the cosine of unrelated texts (the embedder's baseline) is 0 and
    a perfect match 1: the vector side is normalised by its best hit, and e5's cosines, all
    0.72-0.85, made every hit weigh about as much as the best (on LoCoMo dev, e5's raw cosines
    ranked atoms worse than MiniLM's)."""
    if not baseline:
        return near
    return [(i, None if s is None else (s - baseline) / (1 - baseline)) for i, s in near]


def _alpha(query: str, settings: Settings) -> float:
    """The keyword weight: by language, then intent. A Chinese query reaches here with a vector
    only from an embedder that reads Chinese (embedding.py drops MiniLM's), and bigram bm25 over
    a companion's chatter is the weaker half there (bench/memorybank_retrieval.py)."""
    if text.has_cjk(query):
        return settings.alpha_cjk
    return settings.alpha.get(intent(query), 0.5)


@dataclass(frozen=True)
class Query:
    """One search call: what is asked, of whom, and how it is to be fused.

    vector is the query's embedding (None: keywords only); fusion and alpha, when given,
    override the settings' for this call; cosine_baseline is the cosine of unrelated texts
    for this query (search/relevance.py), subtracted before the relevance floor."""

    text: str
    user: str
    k: int = 10
    layer: str = "both"
    vector: np.ndarray | None = None
    fusion: str | None = None
    alpha: float | None = None
    include_superseded: bool = False
    cosine_baseline: float = 0.0


def search(conn: apsw.Connection, query: Query, engine: Engine) -> list[Hit]:
    """Fused, evidence-deduplicated hits for one user. Raises apsw.Error if SQL fails."""
    settings = engine.settings
    fusion = query.fusion or settings.fusion
    pool = max(settings.candidate_pool, settings.pool_per_hit * query.k)
    params: dict = {"user": query.user, "pool": pool}
    sides = Sides()
    for name in [n for n in ("atoms", "turns") if query.layer in (n, "both")]:
        side = name[:-1]  # "atom" | "turn"
        keyword = _keyword_side(conn, name, query, engine, pool)
        if keyword is not None:
            params[keyword[0]] = keyword[1]
            setattr(sides, f"{side}_keyword", keyword[0])
        if query.vector is not None:
            near = vectors.nearest(conn, name, query.user, query.vector, pool, copies=engine.copies,
                                   active_only=not query.include_superseded, rescore=settings.vector_rescore)
            # The relevance floor: a vector this far from the query is noise, and without the
            # floor search filled k with it ("My sister Dana lives in Lisbon" for "peanut allergy").
            near = [(i, s) for i, s in _relevance(near, query.cosine_baseline) if s is None or s >= settings.min_similarity]
            params[f"{side}_vector_hits"] = json.dumps(near)
            setattr(sides, f"{side}_vector", f"{side}_vector_hits")
    if not any(vars(sides).values()):
        return []
    now_ = user_now(conn, query.user)
    if settings.date_weight and fusion != "rrf":
        for name, ids in _dated(conn, query.user, query.text, now_, query.layer, pool).items():
            params[f"{name[:-1]}_day_hits"] = json.dumps([[i, 1.0] for i in ids])
            setattr(sides, f"{name[:-1]}_day", f"{name[:-1]}_day_hits")
    hl = settings.half_life_days
    params.update({
        "rrf": fusion == "rrf", "rrf_k": settings.rrf_k,
        "alpha": _alpha(query.text, settings) if query.alpha is None else query.alpha,
        "atom_weight": settings.atom_weight, "skipped_weight": settings.skipped_turn_weight,
        "floor": settings.freshness_floor, "conf_floor": settings.confidence_floor,
        "now": now_, "date_weight": settings.date_weight,
        "hl_fact": hl.get("fact"), "hl_preference": hl.get("preference"),
        "hl_constraint": hl.get("constraint"), "hl_event": hl.get("event"),
    })
    found = conn.execute(fusion_sql(sides, settings, include_superseded=query.include_superseded), params).fetchall()
    # The assistant's pleasantries never stand for anything (search/relevance.py).
    hits = distinct_evidence([h for h in map(rows.hit, found) if not relevance.pleasantry(h.role, h.text)])[:query.k]
    for hit in hits:
        if hit.layer == "atom" and hit.status == "conflicting":
            hit.conflicts = rows.conflict_partners(conn, hit.id)
    return hits


def _keyword_side(conn: apsw.Connection, layer: str, query: Query, engine: Engine,
                  pool: int) -> tuple[str, str] | None:
    """The keyword side of layer as (parameter name, bound value): the user's keyword copy's
    ranking as JSON (which also leaves out the user's common terms, counted in the copy), else
    an FTS5 MATCH of the distinctive terms; None when no searchable term is left."""
    settings, side = engine.settings, layer[:-1]
    common = (settings.common_term_share, settings.common_term_rows)
    terms = fts.query_terms(query.text)
    ranked = None if engine.keywords is None else engine.keywords.top_k(conn, layer, query.user, terms, pool,
                                                                         common=common)
    if ranked is not None:
        return f"{side}_keyword_hits", json.dumps(ranked)
    sole = fts.sole_user(conn, layer, query.user)
    terms = fts.distinctive_terms(conn, layer, query.user, query.text, common=common,
                                  term_counts=engine.term_counts if sole else None)
    match = fts.match_for_terms(layer, query.user, terms, sole=sole, conn=conn, term_counts=engine.term_counts,
                                postings=settings.keyword_postings)
    return None if match is None else (f"{side}_match", match)


def query_days(query: str, now: str) -> list[str]:
    """The days (ISO dates) the query names, resolved from now: "5月4日", "May 4th", "yesterday".
    A week, month or year names too many days to pick rows by."""
    try:
        found = timeparse.find(query, now)
    except ValueError:  # a stored ts that is not a date: no day to resolve from
        return []
    return sorted({iso for phrase, iso in found if len(iso) == 10 and not _WEEK.search(phrase)})


_WEEK = re.compile(r"week|周|星期|礼拜", re.I)


def _dated(conn: apsw.Connection, user: str, query: str, now: str, layer: str, pool: int) -> dict[str, list[int]]:
    """Ids of the user's turns said on a day the query names, and of the atoms drawn from them
    or dated that day (an event's valid_from), by layer; {} when the query names no day."""
    days = query_days(query, now)
    if not days:
        return {}
    turn_ids: list[int] = []
    for day in days:  # ts is ISO text: the day's turns sort between "day" and "day" + "U"
        turn_ids += [r[0] for r in conn.execute(
            'select "id" from "turns" where "user" = ? and "ts" >= ? and "ts" < ? order by "ts" limit ?',
            (user, day, day + "U", pool))]
    out: dict[str, list[int]] = {}
    if layer in ("turns", "both"):
        out["turns"] = turn_ids
    if layer in ("atoms", "both"):
        # Atoms drawn from the day's turns (found through atom_sources_by_turn), and events dated that day.
        out["atoms"] = [r[0] for r in conn.execute(
            f'select "atom_id" from "atom_sources" where "turn_id" in {rows.EACH} union '
            f'select "id" from "atoms" where "user" = ? and substr("valid_from", 1, 10) in {rows.EACH} limit ?',
            (rows.json_array(turn_ids), user, rows.json_array(days), pool))]
    return out


def user_now(conn: apsw.Connection, user: str) -> str:
    """The time relative dates are resolved from: the user's latest turn, else now."""
    row = conn.execute('select max("ts") from "turns" where "user" = ?', (user,)).fetchone()
    return row[0] or now()


def distinct_evidence(hits: list[Hit]) -> list[Hit]:
    """Keep hits in rank order, dropping any whose turns are all covered by kept hits; the first
    atom drawn from one kept raw turn takes that turn's place (and score): the note says in a
    line what the turn said, so atoms never push evidence out of `both`, they stand in for it."""
    covered: set[int] = set()
    kept: list[Hit] = []
    raw_at: dict[int, int] = {}  # turn id -> where its raw turn sits in kept
    for hit in hits:
        if hit.turn_ids and covered.issuperset(hit.turn_ids):
            if hit.layer == "atom" and len(hit.turn_ids) == 1 and hit.turn_ids[0] in raw_at:
                at = raw_at.pop(hit.turn_ids[0])
                kept[at] = dataclasses.replace(hit, score=kept[at].score)
            continue
        covered.update(hit.turn_ids)
        if hit.layer == "turn":
            raw_at[hit.id] = len(kept)
        kept.append(hit)
    return kept
