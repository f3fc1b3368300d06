"""L2 scenarios and the L3 persona card as rows.

Everything a scenario shows (title, state line, keywords, centroid, heat, times) is derived
from its member atoms here, and `refresh` rewrites all of it whenever its members change: a
join, a merge, a split, a supersession or a forget. So a scenario never holds a word that its
held members no longer say, and a forgotten atom leaves no trace in it. Which scenario an atom
joins is decided later in the flow (layers/scenarios.py); the persona card's ranking too
(layers/persona.py). Call the writers inside connection.write().
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import apsw
import numpy as np

from .. import codec, text
from ..checks import now
from ..db import connection, rows
from ..settings import Settings
from ..vecmath import as_blob, unit


@dataclass
class Scenario:
    """An L2 scenario as read back: a named cluster of one user's atoms."""

    id: int
    user: str
    title: str
    state: str
    held: int
    members: int
    heat: float
    heat_at: str
    first_seen: str
    last_seen: str
    title_atom: int | None
    state_atoms: list[int]
    atom_ids: list[int] = field(default_factory=list)


_COLUMNS = ('s."id", s."user", s."title", s."state", s."held", s."members", s."heat", s."heat_at", '
            's."first_seen", s."last_seen", s."title_atom", s."state_atoms", '
            '(select group_concat(m."atom_id") from "scenario_atoms" m where m."scenario_id" = s."id")')


def read(conn: apsw.Connection, where: str, args: tuple) -> list[Scenario]:
    """Scenarios of `select ... from "scenarios" s {where}`."""
    found = conn.execute(f'select {_COLUMNS} from "scenarios" s {where}', args).fetchall()
    return [Scenario(*r[:11], state_atoms=rows.parse_ids(r[11]), atom_ids=rows.parse_ids(r[12])) for r in found]


def shown(conn: apsw.Connection, user: str, least: int) -> list[Scenario]:
    """The user's scenarios with at least `least` held members, hottest first."""
    return read(conn, 'where s."user" = ? and s."held" >= ? order by s."heat" desc, s."last_seen" desc, s."id"',
                (user, least))


def scenario_of(conn: apsw.Connection, atom_id: int) -> int | None:
    row = conn.execute('select "scenario_id" from "scenario_atoms" where "atom_id" = ?', (atom_id,)).fetchone()
    return row[0] if row else None


def scenarios_of(conn: apsw.Connection, atom_ids: Sequence[int]) -> dict[int, int]:
    """{atom id: its scenario id} for those of atom_ids that belong to one."""
    return _pairs(conn, f'select "atom_id", "scenario_id" from "scenario_atoms" where "atom_id" in {rows.EACH}', atom_ids)


def _pairs(conn: apsw.Connection, sql: str, ids: Sequence[int]) -> dict[int, int]:
    return dict(conn.execute(sql, (rows.json_array(ids),)).fetchall())


def candidates(conn: apsw.Connection, user: str) -> list[tuple[int, np.ndarray | None, set[str], int]]:
    """(id, centroid, keywords, members) of every scenario of user: what a new atom is scored against."""
    return [(sid, None if blob is None else np.frombuffer(blob, dtype=np.float32), set(words.split()), members)
            for sid, blob, words, members in conn.execute(
                'select "id", "centroid", "keywords", "members" from "scenarios" where "user" = ? order by "id"',
                (user,))]


def single_members(conn: apsw.Connection, scenario_ids: Sequence[int]) -> dict[int, int]:
    """{scenario id: its one atom} for one-atom scenarios (they keep no centroid of their own)."""
    return _pairs(conn, f'select "scenario_id", min("atom_id") from "scenario_atoms" where "scenario_id" in {rows.EACH} '
                  'group by 1', scenario_ids)


def create(conn: apsw.Connection, user: str, ts: str) -> int:
    """A new, empty scenario of user (filled by add_member, then refresh)."""
    conn.execute(
        f'insert into "scenarios" ("id", "user", "heat_at", "first_seen", "last_seen", "created_at") '
        f'values ({_next_id()}, ?, ?, ?, ?, ?)', (user, ts, ts, ts, now()))
    return conn.last_insert_rowid()


def _next_id() -> str:
    # Like turns and atoms, a scenario id is never handed to another scenario after a forget.
    return ('(select max(coalesce((select max("id") from "scenarios"), 0), coalesce((select cast("value" as '
            'integer) from "meta" where "key" = \'scenarios_high_id\'), 0)) + 1)')


def add_member(conn: apsw.Connection, scenario_id: int, atom_id: int, ts: str) -> None:
    """Put an atom that is in no scenario into one (move_members moves one that is)."""
    # A plain insert: "insert or replace" took ~1 ms on one call in six inside a long write
    # (foreign keys on; median 50 us against 17; bench/write_path.py), and placement only adds
    # an atom it found in no scenario.
    conn.execute('insert into "scenario_atoms" ("scenario_id", "atom_id", "joined_at") values (?, ?, ?)',
                 (scenario_id, atom_id, ts))


def move_members(conn: apsw.Connection, atom_ids: Sequence[int], to: int) -> None:
    conn.executemany('update "scenario_atoms" set "scenario_id" = ? where "atom_id" = ?', [(to, a) for a in atom_ids])


def delete(conn: apsw.Connection, scenario_ids: Sequence[int]) -> None:
    """Delete scenarios (their member rows cascade; the atoms stay)."""
    if not scenario_ids:
        return
    connection.set_meta(conn, "scenarios_high_id", str(max(
        connection.meta_int(conn, "scenarios_high_id"),
        conn.execute('select coalesce(max("id"), 0) from "scenarios"').fetchone()[0])))
    conn.executemany('delete from "scenarios" where "id" = ?', [(s,) for s in scenario_ids])


def stale(conn: apsw.Connection, user: str | None) -> list[int]:
    """Scenarios whose member count no longer matches their rows: members were forgotten
    (the member rows cascade with the atom) and the derived columns must be rewritten."""
    where, args = ('where s."user" = ?', (user,)) if user is not None else ("", ())
    return [r[0] for r in conn.execute(
        f'select s."id" from "scenarios" s {where} '
        f'{"and" if where else "where"} s."members" != (select count(*) from "scenario_atoms" m '
        'where m."scenario_id" = s."id")', args)]


# ---------------------------------------------------------------- derived columns


@dataclass
class Member:
    id: int
    text: str
    held: bool
    seen: int
    first_seen: str
    last_seen: str
    when: str  # an event's date, else when it was last said
    subject: str
    vector: np.ndarray | None = None


def members(conn: apsw.Connection, scenario_id: int, vectors: dict[int, np.ndarray] | None = None) -> list[Member]:
    """The member atoms of a scenario with their vectors, in id order. vectors: atom vectors
    already read (atom_vectors' cache)."""
    found = conn.execute(
        'select a."id", a."text", a."status", a."seen", a."first_seen", a."last_seen", a."kind", a."valid_from", '
        'a."record" from "scenario_atoms" m join "atoms" a on a."id" = m."atom_id" '
        'where m."scenario_id" = ? order by a."id"', (scenario_id,)).fetchall()
    out = [Member(id=r[0], text=r[1], held=r[2] != codec.STATUSES["superseded"], seen=r[3], first_seen=r[4],
                  last_seen=r[5], when=(r[7] if r[6] == codec.KINDS["event"] and r[7] else r[5]),
                  subject=_subject(r[8])) for r in found]
    found_vectors = atom_vectors(conn, [m.id for m in out], vectors)
    for m in out:
        m.vector = found_vectors.get(m.id)
    return out


MAX_CACHED_VECTORS = 4096  # atom vectors a cache (atom_vectors) keeps before it starts afresh: 6 MB at 384 dims


# Cached: a scenario's members are read again at each join, and decoding their records was a
# third of a refresh's time (an atom's record never changes; a merge changes its counts only).
@functools.lru_cache(maxsize=16384)
def _subject(record: bytes) -> str:
    return codec.unpack(record).get("subject", "")


def atom_vectors(conn: apsw.Connection, atom_ids: Sequence[int],
                 cache: dict[int, np.ndarray] | None = None) -> dict[int, np.ndarray]:
    """{atom id: its stored vector} for those of atom_ids that have one. cache: vectors read
    before, kept and added to; it must be dropped when the vectors may have changed (a
    rollback, a new vectors_epoch): layers/index.py holds one per user's scenario index."""
    if not atom_ids or not connection.has_vectors(conn):
        return {}
    # One point lookup per id: vec0 answers `atom_id in (...)` by scanning its rowid chunks
    # (6-77 ms for 40 ids at 100k atoms, 0.3-0.4 ms as lookups; bench/results/write_path.json).
    # A scenario's members are read again at each join (refresh), most of them read before.
    out = {}
    for i in atom_ids:
        found = cache.get(i) if cache is not None else None
        if found is None:
            row = conn.execute("select embedding from atoms_vec where atom_id = ?", (i,)).fetchone()
            if row is None:
                continue
            found = np.frombuffer(row[0], dtype=np.float32)
            if cache is not None:
                if len(cache) >= MAX_CACHED_VECTORS:
                    cache.clear()
                cache[i] = found
        out[i] = found
    return out


def content_terms(line: str, subject: str) -> list[str]:
    """The terms of an atom's line that are not its subject's name: what it is about."""
    return list(_content_terms(line, subject))


@functools.lru_cache(maxsize=16384)
def _content_terms(line: str, subject: str) -> tuple[str, ...]:
    # Cached: a scenario's refresh reads the terms of all its members again at each join.
    own = set(text.terms(subject))
    return tuple(t for t in text.terms(line) if t not in own)


def refresh(conn: apsw.Connection, scenario_id: int, settings: Settings,
            vectors: dict[int, np.ndarray] | None = None) -> None:
    """Rewrite every derived column of a scenario from its members; delete it when it has none.
    vectors: atom vectors already read (atom_vectors' cache)."""
    found = members(conn, scenario_id, vectors)
    if not found:
        delete(conn, [scenario_id])
        return
    held = [m for m in found if m.held]
    basis = held or found
    vectors = [m.vector for m in basis if m.vector is not None]
    centroid = unit(np.mean(vectors, axis=0)) if vectors else None
    title = _central(held, centroid)
    # A one-atom scenario's centroid is its atom's vector, already in atoms_vec: storing it again
    # was most of the layers' size (LoCoMo conv-26: 254 scenarios, 203 of one atom, 1.5 kB each).
    stored = centroid if len(vectors) > 1 else None
    newest = sorted((m for m in held if m is not title), key=lambda m: (m.when, m.id), reverse=True)
    state = newest[:settings.scenario_state_atoms]
    words = Counter(t for m in basis for t in dict.fromkeys(_content_terms(m.text, m.subject)))
    last = max(m.last_seen for m in found)
    conn.execute(
        'update "scenarios" set "title" = ?, "state" = ?, "title_atom" = ?, "state_atoms" = ?, "members" = ?, '
        '"held" = ?, "keywords" = ?, "centroid" = ?, "heat" = ?, "heat_at" = ?, "first_seen" = ?, "last_seen" = ? '
        'where "id" = ?',
        (title.text if title else "", "; ".join(m.text for m in state), title.id if title else None,
         ",".join(str(m.id) for m in state), len(found), len(held),
         " ".join(w for w, _ in words.most_common(settings.scenario_keywords)),
         None if stored is None else as_blob(stored), heat(found, last, settings.scenario_half_life_days),
         last, min(m.first_seen for m in found), last, scenario_id))


def _central(held: list[Member], centroid: np.ndarray | None) -> Member | None:
    # The title is the held member nearest the centroid (most confirmed, then oldest, without vectors):
    # a grounded line in the user's language, as checked as any atom.
    def closeness(m: Member) -> float:
        return float(np.dot(m.vector, centroid)) if centroid is not None and m.vector is not None else -1.0
    return max(held, key=lambda m: (closeness(m), m.seen, -m.id), default=None)


def heat(found: list[Member], at: str, half_life_days: float) -> float:
    """Mentions fading with a half-life: each member counts its `seen` statements as said when it
    was last said (the file keeps no earlier times), decayed back from `at`."""
    now_days = _days(at)
    return sum(m.seen * math.pow(0.5, max(0.0, now_days - _days(m.last_seen)) / half_life_days) for m in found)


def heat_now(scenario: Scenario, at: str, half_life_days: float) -> float:
    """A scenario's heat carried forward from heat_at to at."""
    return scenario.heat * math.pow(0.5, max(0.0, _days(at) - _days(scenario.heat_at)) / half_life_days)


@functools.lru_cache(maxsize=16384)  # a scenario's members' times, read again at each refresh
def _days(ts: str) -> float:
    return dt.datetime.fromisoformat(ts[:19]).timestamp() / 86400


# ---------------------------------------------------------------- persona card


def write_card(conn: apsw.Connection, user: str, lines: list[tuple[int, str, float]],
               before: list[tuple[int, str, float]] | None = None) -> None:
    """Replace user's persona card with lines (atom id, line, score), best first. before: the
    card's rows as read in this transaction (card_rows), of which the lines above the first
    that differs are kept."""
    # Rewritten from the first line that changed: a line that enters the card moves every line
    # below it down one rank, and updating those rows cost twice the delete and inserts
    # (bench/write_path.py); most updates of a large card change none or a few at its end.
    same = 0
    if before is not None:
        while same < min(len(lines), len(before)) and tuple(lines[same]) == tuple(before[same]):
            same += 1
        if same == len(lines) == len(before):
            return
    conn.execute('delete from "persona" where "user" = ? and "rank" > ?', (user, same))
    conn.executemany('insert into "persona" ("user", "rank", "atom_id", "line", "score") values (?, ?, ?, ?, ?)',
                     [(user, rank, atom_id, line, score)
                      for rank, (atom_id, line, score) in enumerate(lines[same:], same + 1)])


def card_rows(conn: apsw.Connection, user: str) -> list[tuple[int, str, float]]:
    """(atom id, line, score) of user's persona card, best first, as write_card writes them."""
    return conn.execute('select "atom_id", "line", "score" from "persona" where "user" = ? order by "rank"',
                        (user,)).fetchall()


def card(conn: apsw.Connection, user: str) -> list[tuple[int, str]]:
    """(atom id, line) of user's persona card, best first."""
    return conn.execute('select "atom_id", "line" from "persona" where "user" = ? order by "rank"', (user,)).fetchall()


def forget_user(conn: apsw.Connection, user: str) -> None:
    """Delete the user's scenarios and persona card."""
    delete(conn, [r[0] for r in conn.execute('select "id" from "scenarios" where "user" = ?', (user,))])
    conn.execute('delete from "persona" where "user" = ?', (user,))
    conn.execute('delete from "meta" where "key" = ?', (persona_rank_key(user),))


def persona_rank_key(user: str) -> str:
    """The meta row counting a large user's card updates down to its next full ranking
    (lifecycle/persona.py): it names the user, so it goes with them."""
    return f"persona_rank:{user}"
