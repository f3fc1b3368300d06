"""The rows of the file: turns, atoms, their sources and conflicts, written together with
their FTS rows and vectors, and read back as Atom and Hit.

Everything that keeps a row in step with its index rows is here, so the rest of memdb reads as
what it does (extract, merge, search) rather than how rows are kept in step.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import apsw
import numpy as np

from .. import codec, text
from ..checks import now
from ..vecmath import as_blob
from ..errors import InvalidInput
from . import connection

SOURCE_INDEX_CHARS = 4_000  # of an atom's source turns' text indexed with it (atoms_fts.source)

# Many values (ids, days) are bound as one JSON array that json_each reads back: one statement
# for any number of them (SQLite binds at most 32,766 values to one), and one statement text
# whatever the number, so SQLite prepares it once. `"id" in {EACH}` with json_array(ids) bound.
EACH = '(select "value" from json_each(?))'


def json_array(values: Iterable[int | str]) -> str:
    """values as the JSON array that EACH reads."""
    return json.dumps([v if isinstance(v, str) else int(v) for v in values], ensure_ascii=False)


# An atom's source turn ids as one SQL value ('3,7'); parse_ids reads it back.
SOURCE_IDS = '(select group_concat(s."turn_id") from "atom_sources" s where s."atom_id" = a."id")'


@dataclass
class Atom:
    """An L1 atom as read back from the file."""

    id: int
    user: str
    kind: str
    text: str
    record: dict[str, str]  # codec field names to values (kind and sentiment by name)
    confidence: float
    seen: int
    first_seen: str
    last_seen: str
    valid_from: str | None
    valid_to: str | None
    status: str
    superseded_by: int | None
    turn_ids: list[int]


@dataclass
class Hit:
    """One search result: an atom, a raw turn or a scenario, with the L0 turns it stands for."""

    id: int
    layer: str  # "atom" | "turn" | "scenario"
    text: str
    score: float
    turn_ids: list[int]
    ts: str  # an event's date, else when it was last said
    kind: str | None = None  # atoms only
    status: str | None = None  # atoms only
    speaker: str | None = None  # turns only
    role: str | None = None  # turns only: user, assistant, system or tool
    conflicts: list[int] = field(default_factory=list)  # atoms that disagree with this one
    shows: list[int] = field(default_factory=list)  # scenarios only: atoms whose text the line holds


def user_tag(user: str) -> str:
    """The FTS token that scopes a match to one user (see schema.sql)."""
    return "u" + hashlib.blake2b(user.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def parse_ids(value: object) -> list[int]:
    """Ids from a group_concat ('3,7' or one integer), ascending."""
    return sorted(int(t) for t in str(value).split(",")) if value is not None and value != "" else []


# ---------------------------------------------------------------- ids


def next_id(table: str) -> str:
    """SQL for the next id of table ("turns" | "atoms"): above every id it holds and every id it
    ever held. SQLite's own choice is max(id) + 1, so forgetting the newest rows handed their
    ids to the next user, and an id an app kept would open someone else's row."""
    return (f'(select max(coalesce((select max("id") from "{table}"), 0), coalesce((select cast("value" as integer) '
            f'from "meta" where "key" = \'{table}_high_id\'), 0)) + 1)')


def remember_high_ids(conn: apsw.Connection) -> None:
    """Record the highest turn and atom ids before rows are deleted (next_id stays above them)."""
    for table in ("turns", "atoms"):
        conn.execute(f'insert into "meta" ("key", "value") select \'{table}_high_id\', max("id") from "{table}" '
                     'where true on conflict ("key") do update set "value" = '
                     'max(cast("value" as integer), cast(excluded."value" as integer)) where excluded."value" is not null')


# ---------------------------------------------------------------- vectors stored later


def vectors_missing(conn: apsw.Connection) -> None:
    """Note that a row was stored without a vector: the next writer with an embedder looks for
    such rows (a flag, so that writers with nothing to fill never scan for them)."""
    if connection.get_meta(conn, "vectors_missing") != "1":
        connection.set_meta(conn, "vectors_missing", "1")


def missing_vectors(conn: apsw.Connection, table: str, limit: int) -> list[tuple[int, str, str]]:
    """(id, user, text) of up to limit rows of table ("turns" | "atoms") without a vector."""
    text_column = "content" if table == "turns" else "text"
    return conn.execute(
        f'select t."id", t."user", t."{text_column}" from "{table}" t where not exists '
        f'(select 1 from "{table}_vec_rowids" r where r."rowid" = t."id") order by t."id" limit ?', (limit,)).fetchall()


def count_missing_vectors(conn: apsw.Connection, user: str | None) -> dict[str, int]:
    """How many turns and atoms (of user, or of the file) have no vector yet."""
    has = connection.has_vectors(conn)
    out = {}
    for table in ("turns", "atoms"):
        missing = (f' and not exists (select 1 from "{table}_vec_rowids" r where r."rowid" = t."id")' if has else "")
        where = 'where t."user" = ?' if user is not None else "where true"
        out[table] = conn.execute(f'select count(*) from "{table}" t {where}{missing}',
                                  (user,) if user is not None else ()).fetchone()[0]
    return out


def add_vector(conn: apsw.Connection, table: str, row_id: int, user: str, vector: np.ndarray) -> None:
    """Store the vector of a turn or atom that had none. Call inside write()."""
    if table == "turns":
        conn.execute('insert into "turns_vec" ("turn_id", "user", "embedding") values (?, ?, ?)',
                     (row_id, user, as_blob(vector)))
    else:
        active = conn.execute('select "status" != ? from "atoms" where "id" = ?',
                              (codec.STATUSES["superseded"], row_id)).fetchone()[0]
        conn.execute('insert into "atoms_vec" ("atom_id", "user", "active", "embedding") values (?, ?, ?, ?)',
                     (row_id, user, active, as_blob(vector)))


# ---------------------------------------------------------------- L0 turns


def next_seq(conn: apsw.Connection, user: str, session: str) -> int:
    row = conn.execute(
        'select coalesce(max("seq"), 0) from "turns" where "user" = ? and "session" = ?',
        (user, session),
    ).fetchone()
    return row[0] + 1


def insert_turn(
    conn: apsw.Connection,
    *,
    user: str,
    session: str,
    seq: int,
    role: str,
    speaker: str | None,
    content: str,
    ts: str,
    vector: np.ndarray | None,
) -> int:
    """Write one turn with its FTS row and vector. Call inside write()."""
    conn.execute(
        'insert into "turns" ("id", "user", "session", "seq", "role", "speaker", "content", "ts", "created_at") '
        f"values ({next_id('turns')}, ?, ?, ?, ?, ?, ?, ?, ?)",
        (user, session, seq, codec.ROLES[role], speaker, content, ts, now()),
    )
    turn_id = conn.last_insert_rowid()
    if vector is None:
        vectors_missing(conn)
    conn.execute(
        'insert into "turns_fts" ("rowid", "u", "speaker", "content") values (?, ?, ?, ?)',
        (turn_id, user_tag(user), speaker or "", text.segment(content)),
    )
    if vector is not None:
        conn.execute(
            'insert into "turns_vec" ("turn_id", "user", "embedding") values (?, ?, ?)',
            (turn_id, user, as_blob(vector)),
        )
    return turn_id


def set_turn_state(conn: apsw.Connection, turn_id: int, state: str, reason: str | None) -> None:
    conn.execute(
        'update "turns" set "state" = ?, "reason" = ? where "id" = ?',
        (codec.STATES[state], reason, turn_id),
    )


# ---------------------------------------------------------------- L1 atoms


def insert_atom(
    conn: apsw.Connection,
    *,
    user: str,
    record: dict,
    confidence: float,
    turn_ids: Sequence[int],
    first_seen: str,
    last_seen: str,
    vector: np.ndarray | None,
) -> int:
    """Write one atom with its sources, FTS row and vector. Call inside write()."""
    line = codec.canonical_text(record)
    keywords = " ".join(text.terms(line))
    valid_from = record.get("date") or first_seen
    conn.execute(
        'insert into "atoms" ("id", "user", "kind", "record", "text", "keywords", "confidence", '
        f'"first_seen", "last_seen", "valid_from", "created_at") values ({next_id("atoms")}, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
        (user, codec.KINDS[record["kind"]], codec.pack(record), line, keywords,
         _clamp(confidence), first_seen, last_seen, valid_from, now()),
    )
    atom_id = conn.last_insert_rowid()
    if vector is None:
        vectors_missing(conn)
    _link_sources(conn, atom_id, turn_ids)
    subject = " ".join(filter(None, (record.get("subject"), record.get("predicate"))))
    value = " ".join(filter(None, (record.get("object"), record.get("domain"), record.get("outcome"))))
    kind = " ".join(filter(None, (record["kind"], record.get("sentiment"))))
    conn.execute(
        'insert into "atoms_fts" ("rowid", "u", "subject", "value", "body", "kind", "source") '
        "values (?, ?, ?, ?, ?, ?, ?)",
        (atom_id, user_tag(user), text.segment(subject), text.segment(value), text.segment(line), kind,
         _source_text(conn, atom_id)),
    )
    if vector is not None:
        conn.execute(
            'insert into "atoms_vec" ("atom_id", "user", "active", "embedding") values (?, ?, 1, ?)',
            (atom_id, user, as_blob(vector)),
        )
    return atom_id


def add_sources(conn: apsw.Connection, atom_id: int, turn_ids: Sequence[int]) -> None:
    """Link more source turns to an atom (a merge) and re-index its source words, if a turn
    was new to it: a repeat from a turn it already cites leaves the words as they are, and
    rewriting its FTS row anyway cost ~1.5 ms a merge at 100k atoms (bench/write_path.py)."""
    before = conn.total_changes()
    _link_sources(conn, atom_id, turn_ids)
    if conn.total_changes() != before:
        reindex_sources(conn, atom_id)


def _link_sources(conn: apsw.Connection, atom_id: int, turn_ids: Sequence[int]) -> None:
    conn.executemany(
        'insert or ignore into "atom_sources" ("atom_id", "turn_id") values (?, ?)',
        [(atom_id, t) for t in turn_ids],
    )


def _source_text(conn: apsw.Connection, atom_id: int) -> str:
    # The words of the atom's source turns, capped so a long turn cannot bloat the index.
    rows = conn.execute(
        'select t."content" from "atom_sources" s join "turns" t on t."id" = s."turn_id" '
        'where s."atom_id" = ? order by t."id"',
        (atom_id,),
    ).fetchall()
    return text.segment(" ".join(r[0] for r in rows)[:SOURCE_INDEX_CHARS])


def reindex_sources(conn: apsw.Connection, atom_id: int) -> None:
    """Rewrite the atom's FTS 'source' column from the source turns it has now."""
    conn.execute('update "atoms_fts" set "source" = ? where "rowid" = ?', (_source_text(conn, atom_id), atom_id))


def set_atom_status(conn: apsw.Connection, atom_id: int, status: str) -> None:
    """Change an atom's status and keep the vector's 'active' flag in step."""
    conn.execute('update "atoms" set "status" = ? where "id" = ?', (codec.STATUSES[status], atom_id))
    if connection.has_vectors(conn):
        conn.execute(
            'update "atoms_vec" set "active" = ? where "atom_id" = ?',
            (int(status != "superseded"), atom_id),
        )


def _clamp(confidence: float) -> float:
    if not isinstance(confidence, (int, float)) or math.isnan(confidence):
        raise InvalidInput(f"confidence must be a number between 0 and 1, not {confidence!r}")
    return min(1.0, max(0.0, float(confidence)))


def conflict_partners(conn: apsw.Connection, atom_id: int) -> list[int]:
    """The atoms recorded as disagreeing with atom_id."""
    return [r[0] for r in conn.execute(
        'select "other_id" from "atom_conflicts" where "atom_id" = ?1 '
        'union select "atom_id" from "atom_conflicts" where "other_id" = ?1', (atom_id,))]


# ---------------------------------------------------------------- reading back

_ATOM_COLUMNS = ('a."id", a."user", a."kind", a."text", a."record", a."confidence", a."seen", '
                 'a."first_seen", a."last_seen", a."valid_from", a."valid_to", a."status", a."superseded_by"')


def read_atoms(conn: apsw.Connection, where: str, args: tuple | dict, prefix: str = "") -> list[Atom]:
    """Atoms of `select ... from "atoms" a {where}` (prefix: a WITH clause the where uses)."""
    rows = conn.execute(f'{prefix} select {_ATOM_COLUMNS}, {SOURCE_IDS} from "atoms" a {where}', args).fetchall()
    return [
        Atom(id=r[0], user=r[1], kind=codec.name_of(codec.KIND_NAMES, r[2]), text=r[3], record=codec.unpack(r[4]),
             confidence=r[5], seen=r[6], first_seen=r[7], last_seen=r[8], valid_from=r[9],
             valid_to=r[10], status=codec.name_of(codec.STATUS_NAMES, r[11]), superseded_by=r[12],
             turn_ids=parse_ids(r[13]))
        for r in rows
    ]


TURN_KEYS = ("id", "user", "session", "seq", "role", "speaker", "content", "ts", "state", "reason")


def read_turns(conn: apsw.Connection, turn_ids: Sequence[int], user: str | None = None) -> list[dict]:
    """L0 rows by id as dicts (of user only, when given), in id order."""
    columns = ", ".join(f'"{k}"' for k in TURN_KEYS)
    mine = ' and "user" = ?' if user is not None else ""
    found = conn.execute(f'select {columns} from "turns" where "id" in {EACH}{mine} order by "id"',
                         (json_array(turn_ids), user) if user is not None else (json_array(turn_ids),)).fetchall()
    return _turn_dicts(found)


def _turn_dicts(found: list[tuple]) -> list[dict]:
    out = [dict(zip(TURN_KEYS, r)) for r in found]
    for row in out:
        row["role"] = codec.name_of(codec.ROLE_NAMES, row["role"])
        row["state"] = codec.name_of(codec.STATE_NAMES, row["state"])
    return out


# The columns a Hit is made from, for an atom (alias a) and a turn (alias t).
ATOM_HIT = (f'\'atom\', a."id", a."text", {{score}}, {SOURCE_IDS}, '
            f'case when a."kind" = {codec.KINDS["event"]} then a."valid_from" else a."last_seen" end, '
            'a."kind", a."status", null, null')
TURN_HIT = ('\'turn\', t."id", t."content", {score}, cast(t."id" as text), t."ts", null, null, '
            'coalesce(t."speaker", (select r."name" from "roles" r where r."code" = t."role")), '
            '(select r."name" from "roles" r where r."code" = t."role")')


def hit(row: tuple) -> Hit:
    """A Hit from a row of ATOM_HIT or TURN_HIT columns."""
    layer, id_, line, score, turn_ids, ts, kind, status, speaker, role = row
    return Hit(id=id_, layer=layer, text=line, score=float(score or 0.0), turn_ids=parse_ids(turn_ids), ts=ts,
               kind=codec.KIND_NAMES.get(kind), status=codec.STATUS_NAMES.get(status), speaker=speaker, role=role)


# Every atom linked to ? through superseded_by, in either direction: one version chain.
CHAIN_CTE = """
with recursive chain("id") as (
    select ?
    union
    select a."id" from "atoms" a join chain c on a."superseded_by" = c."id"
    union
    select a."superseded_by" from "atoms" a join chain c on a."id" = c."id"
    where a."superseded_by" is not null
)"""


def history(conn: apsw.Connection, atom_id: int, user: str) -> list[Atom]:
    """The chain of versions atom_id belongs to, oldest first (user's atoms only: merges and
    supersessions never cross users, and a read never does either)."""
    return read_atoms(conn, 'where a."id" in (select "id" from chain) and a."user" = ? '
                      'order by a."first_seen", a."id"', (atom_id, user), prefix=CHAIN_CTE)


def profile(conn: apsw.Connection, user: str) -> list[Atom]:
    """The user's held facts, preferences and constraints."""
    return read_atoms(conn, f'where a."user" = ? and a."status" in {codec.HELD} and a."kind" != ?',
                      (user, codec.KINDS["event"]))


def events(conn: apsw.Connection, user: str, since: str, until: str) -> list[Atom]:
    """The user's held events dated from since to until, in time order."""
    return read_atoms(conn, f'where a."user" = ? and a."kind" = ? and a."status" in {codec.HELD} '
                      'and a."valid_from" >= ? and a."valid_from" <= ? order by a."valid_from", a."id"',
                      (user, codec.KINDS["event"], since, until))


def user_atoms(conn: apsw.Connection, user: str) -> list[Atom]:
    """Every atom of user, any status, in id order."""
    return read_atoms(conn, 'where a."user" = ? order by a."id"', (user,))


def atoms_from_turn(conn: apsw.Connection, turn_id: int) -> list[Atom]:
    """Every atom (any status) that cites turn_id as a source, in id order."""
    return read_atoms(conn, 'where a."id" in (select "atom_id" from "atom_sources" where "turn_id" = ?) '
                      'order by a."id"', (turn_id,))


def session_turns(conn: apsw.Connection, user: str, session: str | None = None) -> list[dict]:
    """The user's turns as dicts (TURN_KEYS): of one session in its order, or all of them in
    time order (ts, then id for turns stored with the same time)."""
    columns = ", ".join(f'"{k}"' for k in TURN_KEYS)
    if session is not None:
        return _turn_dicts(conn.execute(f'select {columns} from "turns" where "user" = ? and "session" = ? '
                                        'order by "seq", "id"', (user, session)).fetchall())
    return _turn_dicts(conn.execute(f'select {columns} from "turns" where "user" = ? order by "ts", "id"',
                                    (user,)).fetchall())


def users(conn: apsw.Connection) -> list[dict]:
    """Every user of the file with their turn and atom counts and the time of their latest turn."""
    found = conn.execute(
        'select u."user", (select count(*) from "turns" t where t."user" = u."user"), '
        '(select count(*) from "atoms" a where a."user" = u."user"), '
        '(select max("ts") from "turns" t where t."user" = u."user") '
        'from (select "user" from "turns" union select "user" from "atoms") u order by u."user"').fetchall()
    return [{"user": u, "turns": t, "atoms": a, "last_ts": ts} for u, t, a, ts in found]


def user_turn_ids(conn: apsw.Connection, user: str) -> list[int]:
    return [r[0] for r in conn.execute('select "id" from "turns" where "user" = ? order by "id"', (user,))]


def exists(conn: apsw.Connection, table: str, row_id: int, user: str) -> bool:
    """Whether table ("atoms" | "turns") has row_id of user."""
    return conn.execute(f'select 1 from "{table}" where "id" = ? and "user" = ?', (row_id, user)).fetchone() is not None


def atom_users(conn: apsw.Connection) -> list[str]:
    """The users that hold atoms, by name."""
    return [r[0] for r in conn.execute('select distinct "user" from "atoms" order by 1')]


def counts(conn: apsw.Connection) -> tuple[int, int]:
    """How many turns and atoms the file holds."""
    return conn.execute('select (select count(*) from "turns"), (select count(*) from "atoms")').fetchone()


def recent_contents(conn: apsw.Connection, user: str, session: str, n: int) -> list[str]:
    """The text of the session's last n turns, newest first."""
    return [r[0] for r in conn.execute('select "content" from "turns" where "user" = ? and "session" = ? '
                                       'order by "seq" desc limit ?', (user, session, n))]


def stats(conn: apsw.Connection, user: str | None) -> dict:
    """Counts and sizes for one user, or the whole file."""
    where, args = ('where "user" = ?', (user,)) if user is not None else ("", ())
    held = f'"status" != {codec.STATUSES["superseded"]}'
    turns = dict(conn.execute(f'select "state", count(*) from "turns" {where} group by 1', args).fetchall())
    atoms = dict(conn.execute(f'select "status", count(*) from "atoms" {where} group by 1', args).fetchall())
    chars = conn.execute(
        f'select (select coalesce(sum(length("content")), 0) from "turns" {where}), '
        f'(select coalesce(sum(length("text")), 0) from "atoms" {"where " + held + (" and" + where[5:] if where else "")})',
        args * 2,
    ).fetchone()
    users = conn.execute('select count(distinct "user") from "turns"').fetchone()[0]
    page_count = conn.execute("pragma page_count").fetchone()[0]
    page_size = conn.execute("pragma page_size").fetchone()[0]
    return {
        "users": users if user is None else 1,
        "turns": sum(turns.values()),
        "turns_by_state": {codec.name_of(codec.STATE_NAMES, s): n for s, n in sorted(turns.items(), key=str)},
        "atoms": sum(atoms.values()),
        "atoms_by_status": {codec.name_of(codec.STATUS_NAMES, s): n for s, n in sorted(atoms.items(), key=str)},
        "turn_chars": chars[0],
        "active_atom_chars": chars[1],
        "file_bytes": page_count * page_size,
    }
