"""L3: the persona card, "who is this user" in about persona_tokens tokens.

The file keeps the user's ranked persona lines (table "persona"); the card is the best of them
that fit the reader's budget (render, with the reader's tokenizer). They hold held (never superseded) facts, preferences and constraints about the user's own
speakers, one atom a line, each citing its atom id, ranked by how often and how recently they
were confirmed: confidence x (1 + ln seen) x freshness. It is re-ranked from the best-ranked
persona_candidates atoms (one bounded query, not a rebuild from the turns) whenever absorb
stores, merges or supersedes a fact, preference or constraint, and after a forget.
"""

from __future__ import annotations

from collections.abc import Callable

import apsw

from .. import codec, text
from ..checks import now
from ..settings import Settings
from . import store as layers

_KINDS = codec.codes(codec.KINDS, "fact", "preference", "constraint")


def update(conn: apsw.Connection, user: str, settings: Settings) -> None:
    """Re-rank the user's persona lines. Call inside connection.write()."""
    speakers = _speakers(conn, user)
    lines: list[tuple[int, str, float]] = []
    shown: list[set[str]] = []
    for atom_id, line, record, score in _ranked(conn, user, settings):
        if speakers and codec.unpack(record).get("subject") not in speakers:
            continue  # about someone else the user mentioned: not who the user is
        terms = set(text.terms(line))
        # The same thing said in other words (a repeat dedup did not merge) takes no second line.
        if any(_contained(terms, other, settings.merge_keyword_overlap) for other in shown):
            continue
        lines.append((atom_id, f"{line} (#{atom_id})", score))
        shown.append(terms)
    layers.write_card(conn, user, lines)


def _speakers(conn: apsw.Connection, user: str) -> set[str]:
    """The names the user's own turns were said under (LoCoMo's two friends, MemoryBank's user);
    empty when their turns carry no name, and then every subject counts."""
    return {r[0] for r in conn.execute(
        'select distinct "speaker" from "turns" where "user" = ? and "role" = ? and "speaker" is not null',
        (user, codec.ROLES["user"]))}


def _ranked(conn: apsw.Connection, user: str, settings: Settings) -> list[tuple]:
    """(id, text, record, score) of the user's best-ranked held non-event atoms."""
    return conn.execute(
        f'''
        with latest as (select coalesce(max("ts"), ?) as at from "turns" where "user" = ?)
        select a."id", a."text", a."record",
               a."confidence" * (1 + ln(a."seen")) * (? + (1 - ?) * pow(0.5,
                   max(0, julianday(latest.at) - julianday(a."last_seen")) / ?))
               * case a."kind" when ? then ? when ? then ? else ? end as score
        from "atoms" a, latest
        where a."user" = ? and a."status" in {codec.HELD} and a."kind" in {_KINDS}
        order by score desc, a."id" limit ?''',
        (now(), user, settings.freshness_floor, settings.freshness_floor, settings.persona_half_life_days,
         codec.KINDS["preference"], settings.persona_kind_weight["preference"], codec.KINDS["constraint"],
         settings.persona_kind_weight["constraint"], settings.persona_kind_weight["fact"],
         user, settings.persona_candidates)).fetchall()


def _contained(terms: set[str], other: set[str], share: float) -> bool:
    return bool(terms) and len(terms & other) >= share * len(terms)


def render(card: list[tuple[int, str]], budget: int, count_tokens: Callable[[str], int]) -> list[str]:
    """The card's lines that fit budget tokens (by the caller's tokenizer), best first."""
    out, used = [], 0
    for _, line in card:
        cost = count_tokens(line + "\n")
        if used + cost > budget:
            break
        out.append(line)
        used += cost
    return out
