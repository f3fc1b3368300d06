"""The prompt-ready block: hits as dated lines under a token budget. The first atoms bring the
turn they came from when it says more than the note (a note is a summary: "Rosalind's grandma
gave her a necklace" drops "in Sweden"); every atom brings its conflicting partners and, while the
budget allows, the atoms that share its source turns. Nothing is shown as current that a later
statement replaced: a turn whose every atom was superseded says what replaced it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apsw

from .. import codec, privacy, text
from ..db import rows
from ..db.rows import Hit
from ..layers import persona as personas, search as scenario_search, store as layers
from ..settings import Settings
from . import relevance


def render_line(hit: Hit) -> str:
    """One context line: date · kind · text (turns: date · speaker: words). A date taken
    from a UTC time says so ("2025-12-31 UTC"): said at 07:00 +08:00 on 1 January, it is
    the 31st in UTC, and a reader must not take it for the speaker's own date."""
    date = (hit.ts or "")[:10] + (" UTC" if (hit.ts or "").endswith("Z") else "")
    if hit.layer == "atom":
        return f"{date} · {hit.kind} · {hit.text}"
    if hit.layer == "scenario":  # a block's header: the members that follow belong to it
        return f"{date} · scenario · {hit.text}"
    said = " ".join(hit.text.split())
    return f"{date} · {hit.speaker}: {said}"


def context(hits: list[Hit], related: Callable[[Hit], list[Hit]], **kwargs: Any) -> str:
    """The best hits as prompt-ready lines under budget tokens (see lines)."""
    return "\n".join(line for line, _ in lines(hits, related, **kwargs))


def lines(
    hits: list[Hit],
    related: Callable[[Hit], list[Hit]],
    *,
    budget: int,
    count_tokens: Callable[[str], int],
    evidence: Callable[[Hit], list[Hit]] = lambda hit: [],
    evidence_for: int = 0,
    replaced: Callable[[Hit], str | None] = lambda hit: None,
) -> list[tuple[str, Hit]]:
    """The best hits as prompt-ready lines under budget tokens, most useful first, each with
    the hit it renders.

    The first evidence_for atoms are followed by their source turns (evidence) when a turn
    holds words the note left out. After each atom come its conflicting partners and, while
    the budget allows, closely related atoms (a shared source turn), so "likes sci-fi" arrives
    together with "watched Interstellar twice".
    """
    out: list[tuple[str, Hit]] = []
    used = 0
    shown: set[tuple[str, int]] = set()
    atoms_seen = 0
    for hit in hits:
        group = [hit]
        if hit.layer == "atom":
            atoms_seen += 1
            if atoms_seen <= evidence_for:
                group += [t for t in evidence(hit) if _says_more(t, hit)]
            told = {t.id for t in group if t.layer == "turn"}
            # Atoms of a turn shown whole would only repeat it.
            group += [a for a in related(hit) if not (told and set(a.turn_ids) <= told)]
        for member in group:
            key = (member.layer, member.id)
            if key in shown:
                continue
            line = render_line(member)
            if member.status == "conflicting":
                line += " (conflicts with another statement; ask which holds)"
            now = replaced(member)
            if now is not None:  # said once, corrected since: never shown as if it still held
                line += f" (no longer holds; later: {now})" if now else " (no longer holds)"
            cost = count_tokens(line + "\n")
            if used + cost > budget:
                continue
            shown.add(key)
            shown.update(("atom", a) for a in member.shows)  # a scenario's title is its central atom
            out.append((line, member))
            used += cost
    return out


def _says_more(turn: Hit, atom: Hit) -> bool:
    # At least three content words of the turn that the note does not have.
    return len(set(text.terms(turn.text)) - set(text.terms(atom.text))) >= 3


def replaced_by(conn: apsw.Connection, hit: Hit) -> str | None:
    """For a superseded atom, or a turn whose every atom was superseded: the text of what holds
    now ("" when the chain ends in nothing held); None when the hit still holds."""
    if hit.layer == "atom":
        ids = [hit.id] if hit.status == "superseded" else []
    elif hit.layer == "turn":
        found = conn.execute('select a."id", a."status" from "atom_sources" s join "atoms" a on a."id" = s."atom_id" '
                             'where s."turn_id" = ?', (hit.id,)).fetchall()
        superseded = codec.STATUSES["superseded"]
        ids = [i for i, status in found] if found and all(status == superseded for _, status in found) else []
    else:
        ids = []
    if not ids:
        return None
    current = ids[0]
    for _ in range(64):  # a chain of versions; bounded in case a file holds a cycle
        row = conn.execute('select "superseded_by", "status", "text" from "atoms" where "id" = ?', (current,)).fetchone()
        if row is None:
            return ""
        following, status, line = row
        if status != codec.STATUSES["superseded"]:
            return line
        if following is None:
            return ""
        current = following
    return ""


def source_turns(conn: apsw.Connection, hit: Hit) -> list[Hit]:
    """The turns an atom hit was taken from, as turn hits."""
    if hit.layer != "atom" or not hit.turn_ids:
        return []
    found = conn.execute(f'select {rows.TURN_HIT.format(score="0.0")} from "turns" t where t."id" in {rows.EACH} '
                         'order by t."id"', (rows.json_array(hit.turn_ids),)).fetchall()
    return [rows.hit(row) for row in found]


def related_atoms(conn: apsw.Connection, hit: Hit, *, limit: int = 3) -> list[Hit]:
    """Held atoms close to an atom hit: its conflicting partners first, then atoms sharing a
    source turn, most recent first."""
    if hit.layer != "atom":
        return []
    found = conn.execute(
        f"""
        with me as (select "user" from "atoms" where "id" = :id),
        linked as (
            select "other_id" as id, 0 as rank from "atom_conflicts" where "atom_id" = :id
            union select "atom_id", 0 from "atom_conflicts" where "other_id" = :id
            union select s2."atom_id", 1 from "atom_sources" s1
                join "atom_sources" s2 on s2."turn_id" = s1."turn_id"
                where s1."atom_id" = :id and s2."atom_id" != :id
        )
        select {rows.ATOM_HIT.format(score="0.0")}
        from linked l join "atoms" a on a."id" = l.id
        where a."user" = (select "user" from me) and a."status" in {codec.HELD}
        group by a."id" order by min(l.rank), a."last_seen" desc limit :limit
        """,
        {"id": hit.id, "limit": limit},
    ).fetchall()
    return [rows.hit(row) for row in found]


def block(conn: apsw.Connection, hits: list[Hit], *, user: str, settings: Settings, budget: int, layer: str,
          scenarios: bool, persona: bool, count_tokens: Callable[[str], int]) -> list[tuple[str, Hit | None]]:
    """context()'s lines, each with the hit it shows (None for the header and persona lines):
    the hits above settings.context_min_share of the best, under budget tokens with the header;
    the persona card first (persona=True), and a scenario the hits fall in as one block
    (scenarios=True). Call under the Memory's lock."""
    top = max((h.score for h in hits), default=0.0)
    hits = [h for h in hits if h.score >= settings.context_min_share * top]
    header = settings.context_header
    header_cost = count_tokens(header + "\n") if header else 0
    card = [(f"persona · {line}", None) for line in personas.render(
        layers.card(conn, user), min(budget - header_cost, settings.persona_tokens),
        lambda line: count_tokens("persona · " + line))] if persona and budget > header_cost else []
    left = budget - header_cost - sum(count_tokens(line + "\n") for line, _ in card)
    if scenarios:
        hits = scenario_search.blocks(conn, hits, settings)
    found = lines(hits, lambda h: related_atoms(conn, h), budget=left, count_tokens=count_tokens,
                  # The assistant's pleasantries never come in as evidence either.
                  evidence=lambda h: [t for t in source_turns(conn, h) if not relevance.pleasantry(t.role, t.text)],
                  evidence_for=settings.context_evidence if layer == "both" else 0,
                  replaced=lambda h: replaced_by(conn, h)) if left > 0 else []
    # Raw turns are verbatim: a sentence of one that names a credential is withheld here, so
    # that it never reaches a prompt (the turn itself stays in L0 until forgotten).
    out = [(privacy.redact(line), hit) for line, hit in [*card, *found]]
    return [(header, None), *out] if out and header else out
