"""Scenarios in retrieval: which of the user's scenarios a query hits, and the block a hit
scenario becomes in context() (its title, its state, its most relevant members) instead of
scattered atoms."""

from __future__ import annotations

from collections import defaultdict

import apsw

from .. import codec
from ..db import rows
from ..db.rows import Hit
from ..settings import Settings
from . import store as layers


def search(conn: apsw.Connection, atom_hits: list[Hit], settings: Settings, k: int) -> list[Hit]:
    """Scenario hits from atom hits: a scenario scores the sum of its members' hit scores (how
    much of what is relevant lives there), among scenarios with scenario_min_members held atoms."""
    by_atom = layers.scenarios_of(conn, [h.id for h in atom_hits if h.layer == "atom"])
    score: dict[int, float] = defaultdict(float)
    for hit in atom_hits:
        if hit.id in by_atom and hit.layer == "atom":
            score[by_atom[hit.id]] += hit.score
    found = _shown(conn, list(score), settings.scenario_min_members)
    ranked = sorted(found.values(), key=lambda s: (-score[s.id], s.id))[:k]
    return [_hit(conn, s, score[s.id]) for s in ranked]


def _shown(conn: apsw.Connection, scenario_ids: list[int], least: int) -> dict[int, layers.Scenario]:
    if not scenario_ids:
        return {}
    return {s.id: s for s in layers.read(conn, f'where s."id" in {rows.EACH} and s."held" >= ?',
                                         (rows.json_array(scenario_ids), least))}


def _hit(conn: apsw.Connection, scenario: layers.Scenario, score: float) -> Hit:
    turn_ids = sorted({t for a in _held_members(conn, scenario.id) for t in a.turn_ids})
    line = f"{scenario.title} — now: {scenario.state}" if scenario.state else scenario.title
    return Hit(id=scenario.id, layer="scenario", text=line, score=score, turn_ids=turn_ids, ts=scenario.last_seen,
               shows=[a for a in (scenario.title_atom, *scenario.state_atoms) if a])


def _held_members(conn: apsw.Connection, scenario_id: int) -> list[Hit]:
    """The scenario's held members as atom hits, newest first (by event date, else last said)."""
    found = conn.execute(
        f'select {rows.ATOM_HIT.format(score="0.0")} from "scenario_atoms" m join "atoms" a on a."id" = m."atom_id" '
        f'where m."scenario_id" = ? and a."status" in {codec.HELD} '
        'order by case when a."kind" = ? then a."valid_from" else a."last_seen" end desc, a."id" desc',
        (scenario_id, codec.KINDS["event"])).fetchall()
    return [rows.hit(r) for r in found]


def blocks(conn: apsw.Connection, hits: list[Hit], settings: Settings) -> list[Hit]:
    """hits with the scenarios they hit as blocks: where the first member of a scenario holding
    at least two of the atom hits stood, a header (the scenario's title) followed by its member
    hits and then its newest held members, up to scenario_block_members lines; at most
    scenario_blocks scenarios. Other hits keep their places."""
    by_atom = layers.scenarios_of(conn, [h.id for h in hits if h.layer == "atom"])
    hit_count: dict[int, int] = defaultdict(int)
    for hit in hits:
        if hit.layer == "atom" and hit.id in by_atom:
            hit_count[by_atom[hit.id]] += 1
    order = list(dict.fromkeys(by_atom[h.id] for h in hits if h.layer == "atom" and h.id in by_atom))
    found = _shown(conn, [s for s in order if hit_count[s] >= 2], settings.scenario_min_members)
    chosen = [s for s in order if s in found][:settings.scenario_blocks]
    out: list[Hit] = []
    for hit in hits:
        sid = by_atom.get(hit.id) if hit.layer == "atom" else None
        if sid not in chosen:
            out.append(hit)
        elif not any(h.layer == "scenario" and h.id == sid for h in out):
            out += _block(conn, found[sid], [h for h in hits if h.layer == "atom" and by_atom.get(h.id) == sid],
                          settings.scenario_block_members)
    return out


def _block(conn: apsw.Connection, scenario: layers.Scenario, member_hits: list[Hit], size: int) -> list[Hit]:
    title = conn.execute(f'select {rows.ATOM_HIT.format(score="0.0")} from "atoms" a where a."id" = ?',
                         (scenario.title_atom,)).fetchone()
    header = Hit(id=scenario.id, layer="scenario", text=scenario.title, score=0.0, turn_ids=[],
                 ts=rows.hit(title).ts if title else scenario.last_seen,
                 shows=[scenario.title_atom] if scenario.title_atom else [])
    # The title is the header's line: its atom is not repeated below it.
    members = [h for h in member_hits if h.id != scenario.title_atom]
    newest = [h for h in _held_members(conn, scenario.id)
              if h.id != scenario.title_atom and all(h.id != m.id for m in members)]
    return [header, *members, *newest[:max(0, size - len(members))]]
