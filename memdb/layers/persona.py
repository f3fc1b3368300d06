"""L3: the persona card, "who is this user" in about persona_tokens tokens.

The file keeps the user's ranked persona lines (table "persona"); the card is the best of them
that fit the reader's budget (render, with the reader's tokenizer). They hold held (never superseded) facts, preferences and constraints about the user's own
speakers, one atom a line, each citing its atom id, ranked by how often and how recently they
were confirmed: confidence x (1 + ln seen) x freshness. It is re-ranked from the best-ranked
persona_candidates atoms (one bounded query, not a rebuild from the turns) whenever absorb
stores, merges or supersedes a fact, preference or constraint, and after a forget.

Ranking all of a user's atoms costs 2-4 us an atom (0.25 s at 100k), too much for every
absorbed atom. So the card of a user with FULL_RANK_BELOW ranked atoms or more is ranked from
all of them only once every (ranked atoms / ATOMS_PER_UPDATE) atoms updated (an extraction
batch's are updated together, flow.persona_after), which bounds a full ranking's share of each
atom's update to ATOMS_PER_UPDATE atoms' worth; the updates in between score again only the
atoms absorb touched and the card's own lines, at the same time. What the card
may miss until the next full ranking: an atom that fell below the card's lines and comes back,
or an older one overtaking newer ones as time passes (bench/results/write_path.json compares
the card with a full ranking's). A smaller user is ranked fully every time and keeps nothing in
meta.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable

import apsw

from .. import codec, text
from ..checks import now
from ..db import connection
from ..settings import Settings
from . import store as layers

_KINDS = codec.codes(codec.KINDS, "fact", "preference", "constraint")
FULL_RANK_BELOW = 500  # ranked atoms from which a card is updated incrementally between full rankings
ATOMS_PER_UPDATE = 100  # ranked atoms per incremental update between two full rankings


def update(conn: apsw.Connection, user: str, settings: Settings, changed: Iterable[int] | None = None) -> None:
    """Re-rank the user's persona lines. Call inside connection.write(). changed: the atoms
    absorb just stored, merged or superseded: unless a full ranking is due, only they and the
    card's atoms are scored again. None (after a forget): rank all of the user's atoms."""
    key = layers.persona_rank_key(user)
    due = _due(conn, key)
    before = None
    if changed is not None and due.get("left", 0) > 0:
        changed = set(changed)
        before = layers.card_rows(conn, user)
        among = {atom_id for atom_id, _, _ in before} | changed
        ranked = _ranked(conn, user, settings, among=among)
        speakers = set(due.get("speakers", ()))
        # Counted by atoms, so a batch's one update (flow.persona_after) brings the next full
        # ranking as near as an update per atom did.
        connection.set_meta(conn, key, json.dumps({**due, "left": due["left"] - max(1, len(changed))}))
    else:
        ranked = _ranked(conn, user, settings)
        speakers = _speakers(conn, user)
        count = conn.execute(f'select count(*) from "atoms" where "user" = ? and "status" in {codec.HELD} '
                             f'and "kind" in {_KINDS}', (user,)).fetchone()[0]
        if count >= FULL_RANK_BELOW:
            connection.set_meta(conn, key, json.dumps({"left": count // ATOMS_PER_UPDATE,
                                                       "speakers": sorted(speakers)}))
        elif due:
            conn.execute('delete from "meta" where "key" = ?', (key,))
    lines: list[tuple[int, str, float]] = []
    shown: dict[str, list[int]] = {}  # term -> the lines kept that hold it
    for atom_id, line, record, score in ranked:
        if speakers and _subject(record) not in speakers:
            continue  # about someone else the user mentioned: not who the user is
        terms = _terms(line)
        # The same thing said in other words (a repeat dedup did not merge) takes no second line.
        if _contained(terms, shown, len(lines), settings.merge_keyword_overlap):
            continue
        for term in terms:
            shown.setdefault(term, []).append(len(lines))
        lines.append((atom_id, f"{line} (#{atom_id})", score))
    layers.write_card(conn, user, lines, before)


# Cached: each update reads the card's persona_candidates lines again, most of them unchanged
# (an atom's line and record never change; a merge changes its counts only).
@functools.lru_cache(maxsize=8192)
def _subject(record: bytes) -> str | None:
    return codec.unpack(record).get("subject")


@functools.lru_cache(maxsize=8192)
def _terms(line: str) -> frozenset[str]:
    return frozenset(text.terms(line))


def _speakers(conn: apsw.Connection, user: str) -> set[str]:
    """The names the user's own turns were said under (LoCoMo's two friends, MemoryBank's user);
    empty when their turns carry no name, and then every subject counts."""
    return {r[0] for r in conn.execute(
        'select distinct "speaker" from "turns" where "user" = ? and "role" = ? and "speaker" is not null',
        (user, codec.ROLES["user"]))}


def _due(conn: apsw.Connection, key: str) -> dict:
    """{"left": atoms updated before the next full ranking, "speakers": as of the last} or {}."""
    try:
        found = json.loads(connection.get_meta(conn, key) or "{}")
    except ValueError:  # a hand edit: rank fully, which writes it again
        return {"left": 0}
    return found if isinstance(found, dict) and isinstance(found.get("left", 0), int) else {"left": 0}


def _ranked(conn: apsw.Connection, user: str, settings: Settings, among: set[int] | None = None) -> list[tuple]:
    """(id, text, record, score) of the user's best-ranked held non-event atoms (of among only,
    given). Lines and records are read for the best alone: reading them for every atom was
    most of a full ranking's time."""
    only = "" if among is None else ' and a."id" in (select "value" from json_each(?))'
    # Given among, its atoms are looked up by id ("+" keeps SQLite off atoms_by_user, which it
    # probed once per id, status and kind: 0.20 against 0.13 ms for a card's 80 atoms at 100k).
    pin = "" if among is None else "+"
    return conn.execute(
        f'''
        with latest as (select coalesce(max("ts"), ?) as at from "turns" where "user" = ?),
        best as (
            select a."id",
                   a."confidence" * (1 + ln(a."seen")) * (? + (1 - ?) * pow(0.5,
                       max(0, julianday(latest.at) - julianday(a."last_seen")) / ?))
                   * case a."kind" when ? then ? when ? then ? else ? end as score
            from "atoms" a, latest
            where {pin}a."user" = ? and {pin}a."status" in {codec.HELD} and {pin}a."kind" in {_KINDS}{only}
            order by score desc, a."id" limit ?)
        select a."id", a."text", a."record", best.score
        from best join "atoms" a on a."id" = best."id"
        order by best.score desc, a."id"''',
        (now(), user, settings.freshness_floor, settings.freshness_floor, settings.persona_half_life_days,
         codec.KINDS["preference"], settings.persona_kind_weight["preference"], codec.KINDS["constraint"],
         settings.persona_kind_weight["constraint"], settings.persona_kind_weight["fact"],
         user, *([] if among is None else [json.dumps(sorted(among))]), settings.persona_candidates)).fetchall()


def _contained(terms: set[str], shown: dict[str, list[int]], lines: int, share: float) -> bool:
    """Whether share of terms are in one of the lines kept (shown: their terms, inverted)."""
    need = share * len(terms)
    if not terms or not lines:
        return False
    if need <= 0:
        return True
    found: dict[int, int] = {}  # line -> terms of it seen so far; stops at the first line that has enough
    for term in terms:
        for line in shown.get(term, ()):
            count = found.get(line, 0) + 1
            if count >= need:
                return True
            found[line] = count
    return False


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
