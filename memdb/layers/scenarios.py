"""L2: placing each absorbed atom in a scenario, incrementally.

An atom that absorb stored joins the user's scenario it scores best with (its centroid's cosine,
the scenario's keywords, a shared source turn or named thing), or seeds a new one; an atom that
replaced another goes where the replaced one is, since they fill the same slot. No scenario is
re-clustered from scratch: after each placement only the touched scenarios are rewritten
(store.refresh), the one the atom joined may merge with its nearest neighbour, and one that
grew past scenario_max_members may split in two when its members fall in two groups.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import apsw
import numpy as np

from .. import codec
from ..index import vectors
from ..index.copies import VectorCopies
from ..settings import Settings
from ..vecmath import unit
from . import store as layers
from .index import ScenarioIndex, UserScenarios


def place(conn: apsw.Connection, *, user: str, atom_id: int, vector: np.ndarray | None, ts: str,
          settings: Settings, cosine_baseline: float = 0.0, copies: VectorCopies | None = None,
          index: ScenarioIndex | None = None) -> int:
    """Keep the user's scenarios current after absorb stored or merged atom_id; returns its
    scenario. Call inside connection.write(). copies: the connection's vector copies, which
    rank a large user's neighbours (as dedup does) instead of vec0's scan. index: the
    connection's scenario index (layers/index.py), which holds the user's scenarios instead of
    reading them all for each atom; the placement is the same."""
    held = index.get(conn, user) if index is not None else None
    cache = held.vectors if held is not None else None  # member vectors read before

    def wrote(sids: set[int]) -> None:
        if index is not None:
            index.reread(conn, held, sids)

    scenario_id = layers.scenario_of(conn, atom_id)
    touched = set(layers.scenarios_of(conn, _replaced(conn, atom_id)).values())
    if scenario_id is None:
        scenario_id = _choose(conn, user, atom_id, vector, settings, cosine_baseline, prefer=touched, copies=copies,
                              held=held)
        if scenario_id is None:
            scenario_id = layers.create(conn, user, ts)
        layers.add_member(conn, scenario_id, atom_id, ts)
    for sid in touched | {scenario_id}:  # replaced atoms leave the state lines they were on
        layers.refresh(conn, sid, settings, cache)
    wrote(touched | {scenario_id})
    scenario_id = _merge_nearest(conn, user, scenario_id, settings, cosine_baseline, held, wrote)
    _split(conn, user, scenario_id, ts, settings, cosine_baseline, wrote, cache)
    return scenario_id


def _replaced(conn: apsw.Connection, atom_id: int) -> list[int]:
    """Atoms that atom_id superseded, was superseded by (a backfilled older statement) or
    disagrees with: the same slot, another value."""
    return [r[0] for r in conn.execute(
        'select "id" from "atoms" where "superseded_by" = ?1 '
        'union select "superseded_by" from "atoms" where "id" = ?1 and "superseded_by" is not null '
        'union select "other_id" from "atom_conflicts" where "atom_id" = ?1 '
        'union select "atom_id" from "atom_conflicts" where "other_id" = ?1', (atom_id,))]


def _choose(conn: apsw.Connection, user: str, atom_id: int, vector: np.ndarray | None, settings: Settings,
            baseline: float, *, prefer: set[int], copies: VectorCopies | None = None,
            held: UserScenarios | None = None) -> int | None:
    """The scenario atom_id joins, or None for a new one.

    Only scenarios that share a content term with the atom, or a source turn, are considered:
    on LoCoMo dev the embedder places any two chatty notes about one person close (the median
    atom has a neighbour at 0.72 rescaled cosine whatever the topic), so vectors alone chained
    everything into two scenarios, one per speaker. Terms are weighed by how few scenarios use
    them ("love", "says" weigh nothing), and the vector side is the atom's cosine to the
    scenario's nearest member among its vector neighbours, else to the centroid."""
    if prefer:
        return min(prefer)
    line, record = conn.execute('select "text", "record" from "atoms" where "id" = ?', (atom_id,)).fetchone()
    subject = codec.unpack(record).get("subject", "")
    terms = set(layers.content_terms(line, subject))
    names = set(_names(line, subject))
    linked = _sharing_turns(conn, atom_id)
    if held is None:
        found = layers.candidates(conn, user)
        weight = _term_weights(terms, len(found), lambda t: sum(t in keywords for _, _, keywords, _ in found))
    else:  # only the scenarios the loop below would not skip, in the same (id) order
        weight = _term_weights(terms, len(held.found), held.holding)
        found = [(sid, s.centroid, s.keywords, s.members) for sid in sorted(held.sharing(terms) | linked)
                 if (s := held.found.get(sid)) is not None]
    near = _nearest_members(conn, user, atom_id, vector, settings.dedup_candidates, baseline, copies,
                            rescore=settings.dedup_rescore)
    if vector is not None:
        vector = unit(vector)
    best, best_score = None, -1.0
    total = sum(weight.values()) or 1.0  # once, not per scenario: an atom has tens to score
    for sid, centroid, keywords, _ in found:
        shared = terms & keywords
        if not shared and sid not in linked:
            continue
        words = sum(weight[t] for t in shared) / total
        if sid in near:
            cosine = near[sid]
        elif vector is not None and centroid is not None:
            cosine = _rescaled(float(np.dot(vector, centroid)), baseline)
        elif vector is not None:  # a one-atom scenario (no centroid kept) whose atom is not near
            cosine = 0.0
        else:
            cosine = None
        if cosine is None:  # keyword-only: the terms alone, against their own bar
            score = words + settings.scenario_join - settings.scenario_join_keywords
        else:
            score = settings.scenario_vector_weight * cosine + settings.scenario_keyword_weight * words
        if sid in linked or names & keywords:
            score += settings.scenario_link_bonus
        if score > best_score:  # candidates come in id order: a tie goes to the older scenario
            best, best_score = sid, score
    return best if best_score >= settings.scenario_join else None


def _term_weights(terms: set[str], total: int, holding: Callable[[str], int]) -> dict[str, float]:
    """A smooth idf over the user's total scenarios (holding: how many hold a term): a term in
    every scenario's keywords weighs least, one in none (new to the user) most, but never so
    much that one new word outweighs the rest."""
    return {t: math.log(1 + (total + 1) / (holding(t) + 1)) for t in terms}


def _nearest_members(conn: apsw.Connection, user: str, atom_id: int, vector: np.ndarray | None, k: int,
                     baseline: float, copies: VectorCopies | None = None, rescore: int = 0) -> dict[int, float]:
    """{scenario: rescaled cosine of its nearest member} over the atom's k vector neighbours
    (found as dedup found them: rescore is Settings.dedup_rescore)."""
    if vector is None:
        return {}
    near = [(i, c) for i, c in vectors.nearest(conn, "atoms", user, vector, k + 1, copies=copies, rescore=rescore)
            if i != atom_id and c is not None]
    of = layers.scenarios_of(conn, [i for i, _ in near])
    out: dict[int, float] = {}
    for i, c in near:
        if i in of:
            out[of[i]] = max(out.get(of[i], 0.0), _rescaled(c, baseline))
    return out


def _rescaled(cosine: float, baseline: float) -> float:
    # As in search: the cosine of unrelated texts (the embedder's baseline) is 0, a match 1.
    return max(0.0, (cosine - baseline) / (1 - baseline)) if baseline < 1 else cosine


def _names(line: str, subject: str) -> list[str]:
    """The capitalised words of a line after its first (people, places, titles), but not the
    subject's own name: two notes naming the same person or thing likely belong together."""
    words = line.split()[1:]
    return [t for w in words if w[:1].isupper() for t in layers.content_terms(w, subject)]


def _sharing_turns(conn: apsw.Connection, atom_id: int) -> set[int]:
    """Scenarios holding an atom taken from one of atom_id's source turns."""
    return {r[0] for r in conn.execute(
        'select distinct m."scenario_id" from "atom_sources" s1 '
        'join "atom_sources" s2 on s2."turn_id" = s1."turn_id" and s2."atom_id" != s1."atom_id" '
        'join "scenario_atoms" m on m."atom_id" = s2."atom_id" where s1."atom_id" = ?', (atom_id,))}


def _merge_nearest(conn: apsw.Connection, user: str, scenario_id: int, settings: Settings, baseline: float,
                   held: UserScenarios | None = None, wrote: Callable[[set[int]], None] | None = None) -> int:
    """Merge scenario_id with its nearest scenario when their centroids are this close and
    they share scenario_merge_keywords of the smaller one's keywords: two threads that turned
    out to be one. The larger keeps its id; returns the survivor."""
    if held is not None:
        near = held.nearest(scenario_id)
        if near is None:
            return scenario_id
        mine = (held.found[scenario_id].vector, held.found[scenario_id].keywords, held.found[scenario_id].members)
        theirs = (held.found[near].vector, held.found[near].keywords, held.found[near].members)
    else:
        found = layers.candidates(conn, user)
        alone = layers.single_members(conn, [sid for sid, c, _, n in found if c is None and n == 1])
        vectors = layers.atom_vectors(conn, list(alone.values()))
        others = {sid: (c if c is not None else vectors.get(alone.get(sid, -1)), words, n)
                  for sid, c, words, n in found}
        others = {sid: v for sid, v in others.items() if v[0] is not None}
        mine = others.pop(scenario_id, None)
        if mine is None or not others:
            return scenario_id
        near = max(others, key=lambda sid: float(np.dot(others[sid][0], mine[0])))
        theirs = others[near]
    if _rescaled(float(np.dot(theirs[0], mine[0])), baseline) < settings.scenario_merge_similarity:
        return scenario_id
    if len(mine[1] & theirs[1]) < settings.scenario_merge_keywords * min(len(mine[1]), len(theirs[1])):
        return scenario_id
    keep, gone = (near, scenario_id) if (theirs[2], -near) >= (mine[2], -scenario_id) else (scenario_id, near)
    cache = held.vectors if held is not None else None
    layers.move_members(conn, [m.id for m in layers.members(conn, gone, cache)], keep)
    layers.delete(conn, [gone])
    layers.refresh(conn, keep, settings, cache)
    if wrote is not None:
        wrote({keep, gone})
    return keep


def _split(conn: apsw.Connection, user: str, scenario_id: int, ts: str, settings: Settings, baseline: float,
           wrote: Callable[[set[int]], None] | None = None, cache: dict[int, np.ndarray] | None = None) -> None:
    """Split a scenario grown past scenario_max_members in two when its members fall in two
    groups (two-means on their vectors) that are each big enough and no closer than joining
    needs; otherwise it stays whole: its members say it is one thing."""
    size = conn.execute('select "members" from "scenarios" where "id" = ?', (scenario_id,)).fetchone()
    if size is None or size[0] <= settings.scenario_max_members:  # refresh counted them: no need to read them
        return
    found = [m for m in layers.members(conn, scenario_id, cache) if m.vector is not None]
    if len(found) <= settings.scenario_max_members:
        return
    groups = _two_means(np.stack([m.vector for m in found]))
    if groups is None:
        return
    labels, centroids = groups
    smaller = int(np.argmin(np.bincount(labels, minlength=2)))  # the smaller group moves out
    moving = [m.id for m, label in zip(found, labels) if label == smaller]
    if min(len(moving), len(found) - len(moving)) < settings.scenario_min_members:
        return
    if _rescaled(float(np.dot(centroids[0], centroids[1])), baseline) >= settings.scenario_join:
        return
    new = layers.create(conn, user, ts)
    layers.move_members(conn, moving, new)
    layers.refresh(conn, scenario_id, settings, cache)
    layers.refresh(conn, new, settings, cache)
    if wrote is not None:
        wrote({scenario_id, new})


def _two_means(vectors: np.ndarray, rounds: int = 8) -> tuple[np.ndarray, np.ndarray] | None:
    """Labels (0/1) and unit centroids of two groups, seeded deterministically by the member
    farthest from the mean and the one farthest from that."""
    first = int(np.argmin(vectors @ unit(vectors.mean(axis=0))))
    second = int(np.argmin(vectors @ vectors[first]))
    if first == second:
        return None
    centroids = vectors[[first, second]]
    for _ in range(rounds):
        labels = np.argmax(vectors @ centroids.T, axis=1)
        if labels.min() == labels.max():
            return None
        centroids = np.stack([unit(vectors[labels == g].mean(axis=0)) for g in (0, 1)])
    return labels, centroids


def rebuild(conn: apsw.Connection, user: str, settings: Settings, cosine_baseline: float = 0.0) -> int:
    """Place every atom of user that is in no scenario yet, in the order they were stored (the
    order absorb would have placed them): a file made before scenarios existed, or after
    reembed. Returns how many were placed."""
    todo = [r for r in conn.execute(
        'select a."id", a."last_seen" from "atoms" a where a."user" = ? and not exists '
        '(select 1 from "scenario_atoms" m where m."atom_id" = a."id") order by a."id"', (user,))]
    vectors = layers.atom_vectors(conn, [i for i, _ in todo])
    for atom_id, ts in todo:
        place(conn, user=user, atom_id=atom_id, vector=vectors.get(atom_id), ts=ts, settings=settings,
              cosine_baseline=cosine_baseline)
    return len(todo)

