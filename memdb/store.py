"""The SQLite file: connection, schema, migrations, transactions and the rows' writes.

Everything that touches the layout of the file goes through here, so the rest of memdb
reads as what it does (extract, merge, search) rather than how rows are kept in step:
a turn or an atom is always written together with its FTS row and its vector.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import importlib.resources
import math
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import apsw
import numpy as np
import sqlite_vec

from . import codec, text
from .errors import EmbedderMismatch, InvalidInput, SchemaError

APPLICATION_ID = 0x6D656D64  # "memd"
SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 30_000
MAX_CONTENT_CHARS = 1_000_000
SOURCE_INDEX_CHARS = 4_000  # of an atom's source turns' text indexed with it (atoms_fts.source)

# Migrations: MIGRATIONS[v] takes a file from user_version v to v + 1. Empty at version 1.
MIGRATIONS: dict[int, str] = {}


def schema_sql() -> str:
    """The text of schema.sql as shipped in the package."""
    return importlib.resources.files("memdb").joinpath("schema.sql").read_text(encoding="utf-8")


def _schema_parts() -> tuple[str, str]:
    core, _, vectors = schema_sql().partition("-- [vectors]")
    return core, vectors


def connect(path: str | Path, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> apsw.Connection:
    """Open (or create) a memdb file and bring it to the current schema.

    The file is checked before anything is written to it: a foreign SQLite file, a newer
    memdb file or a corrupt file raises SchemaError and stays untouched.
    """
    path = str(path)
    try:
        conn = apsw.Connection(path)
    except apsw.Error as exc:
        raise SchemaError(f"cannot open {path!r}: {exc}") from exc
    try:
        conn.set_busy_timeout(busy_timeout_ms)
        conn.enable_load_extension(True)
        conn.load_extension(sqlite_vec.loadable_path())
        conn.enable_load_extension(False)
        _check_file(conn, path)
        conn.execute("pragma foreign_keys = on")
        conn.execute("pragma secure_delete = on")
        if path != ":memory:" and not path.startswith("file::memory:"):
            _use_wal(conn, busy_timeout_ms)
        conn.execute("pragma synchronous = full")
        _create_or_migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _use_wal(conn: apsw.Connection, busy_timeout_ms: int) -> None:
    """Switch the file to WAL. SQLite does not call the busy handler for this switch, so
    while another process holds a new file (creating it), retry until the busy timeout."""
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            conn.execute("pragma journal_mode = wal")
            return
        except apsw.BusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _check_file(conn: apsw.Connection, path: str) -> None:
    try:
        # One statement, so one snapshot: read one by one, a file another process is creating
        # right now could show its tables but not yet its application_id, and look foreign.
        app_id, version, tables = conn.execute(
            "select (select application_id from pragma_application_id), "
            "(select user_version from pragma_user_version), (select count(*) from sqlite_schema)"
        ).fetchone()
    except (apsw.NotADBError, apsw.CorruptError) as exc:
        raise SchemaError(f"{path!r} is not a readable SQLite file ({exc}); it was left untouched") from exc
    if tables and app_id != APPLICATION_ID:
        raise SchemaError(
            f"{path!r} is an SQLite file but not a memdb file (application_id {app_id}); "
            "open a memdb file or a new path"
        )
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"{path!r} has memdb schema version {version}, newer than this memdb "
            f"({SCHEMA_VERSION}); upgrade memdb to open it"
        )


def _create_or_migrate(conn: apsw.Connection) -> None:
    # A file already at this version is only read: opening it writes nothing, so a file that
    # turns out to be damaged later is left exactly as it was found.
    if conn.execute("pragma user_version").fetchone()[0] == SCHEMA_VERSION:
        return
    with write(conn):
        version = conn.execute("pragma user_version").fetchone()[0]
        if version == 0:
            conn.execute(_schema_parts()[0])
            set_meta(conn, "schema_version", str(SCHEMA_VERSION))
            set_meta(conn, "created_at", now())
        for step in range(max(version, 1), SCHEMA_VERSION):
            conn.execute(MIGRATIONS[step])
        conn.execute(f"pragma user_version = {SCHEMA_VERSION}")
        if version not in (0, SCHEMA_VERSION):
            set_meta(conn, "schema_version", str(SCHEMA_VERSION))


@contextlib.contextmanager
def write(conn: apsw.Connection) -> Iterator[None]:
    """One write transaction, taken with BEGIN IMMEDIATE so concurrent writers wait on the
    busy timeout instead of failing on a lock upgrade. Nested use joins the outer one."""
    if not conn.getautocommit():
        with conn:  # a savepoint inside the outer transaction
            yield
        return
    conn.execute("begin immediate")
    try:
        yield
    except BaseException:
        conn.execute("rollback")
        raise
    conn.execute("commit")


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def get_meta(conn: apsw.Connection, key: str) -> str | None:
    row = conn.execute('select "value" from "meta" where "key" = ?', (key,)).fetchone()
    return row[0] if row else None


def set_meta(conn: apsw.Connection, key: str, value: str | None) -> None:
    conn.execute(
        'insert into "meta" ("key", "value") values (?, ?) '
        'on conflict ("key") do update set "value" = excluded."value"',
        (key, value),
    )


# ---------------------------------------------------------------- vectors


def has_vectors(conn: apsw.Connection) -> bool:
    return conn.execute("select 1 from sqlite_schema where name = 'atoms_vec'").fetchone() is not None


def ensure_vectors(conn: apsw.Connection, name: str, dim: int) -> None:
    """Create the vec0 tables for an embedder, or refuse one whose dimension differs."""
    if _vectors_held(conn, name, dim):
        return
    with write(conn):
        # Look again under the write lock: several processes opening a new file at once all
        # see no vectors, and a second create_vectors would drop the first one's vectors.
        if not _vectors_held(conn, name, dim):
            create_vectors(conn, name, dim)


def _vectors_held(conn: apsw.Connection, name: str, dim: int) -> bool:
    held = get_meta(conn, "embedder_dim")
    if held is not None and int(held) != dim:
        raise EmbedderMismatch(
            f"this file holds {held}-dimensional vectors from {get_meta(conn, 'embedder_name')!r}, "
            f"but the embedder {name!r} makes {dim}-dimensional ones; open it with the same "
            "embedder, or rebuild the vectors with `memdb reembed`"
        )
    return held is not None and has_vectors(conn)


def create_vectors(conn: apsw.Connection, name: str, dim: int) -> None:
    """(Re)create empty vec0 tables for dim and record the embedder. Call inside write()."""
    conn.execute('drop table if exists "atoms_vec"')
    conn.execute('drop table if exists "turns_vec"')
    conn.execute(_schema_parts()[1].replace("{dim}", str(int(dim))))
    set_meta(conn, "embedder_name", name)
    set_meta(conn, "embedder_dim", str(int(dim)))
    vectors_changed(conn)


def vectors_changed(conn: apsw.Connection) -> None:
    """Record that vectors were deleted or rebuilt, not only added: in-process copies of
    them (cache.py) reload instead of appending. Call inside write()."""
    epoch = int(get_meta(conn, "vectors_epoch") or 0)
    set_meta(conn, "vectors_epoch", str(epoch + 1))


def as_blob(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype=np.float32).tobytes()


# ---------------------------------------------------------------- L0 turns


def user_tag(user: str) -> str:
    """The FTS token that scopes a match to one user (see schema.sql)."""
    return "u" + hashlib.blake2b(user.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


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
        'insert into "turns" ("user", "session", "seq", "role", "speaker", "content", "ts", "created_at") '
        "values (?, ?, ?, ?, ?, ?, ?, ?)",
        (user, session, seq, codec.ROLES[role], speaker, content, ts, now()),
    )
    turn_id = conn.last_insert_rowid()
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


def turn_embedding_text(speaker: str | None, content: str) -> str:
    """What a turn's vector is made from. The speaker's name goes first: questions name people
    ("when did Caroline …") while turns say "I" (on LoCoMo dev this doubled vector MRR)."""
    return f"{speaker}: {content}" if speaker else content


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
        'insert into "atoms" ("user", "kind", "record", "text", "keywords", "confidence", '
        '"first_seen", "last_seen", "valid_from", "created_at") values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
        (user, codec.KINDS[record["kind"]], codec.pack(record), line, keywords,
         _clamp(confidence), first_seen, last_seen, valid_from, now()),
    )
    atom_id = conn.last_insert_rowid()
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
    """Link more source turns to an atom (a merge) and re-index its source words."""
    _link_sources(conn, atom_id, turn_ids)
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
    if has_vectors(conn):
        conn.execute(
            'update "atoms_vec" set "active" = ? where "atom_id" = ?',
            (int(status != "superseded"), atom_id),
        )


# Above this many rows, deleting with tombstones and then rewriting the FTS index once
# ('optimize') is faster than removing each row's terms in place (measured: forgetting 2,000 of
# 10,000 turns took 3.4 s in place, 0.4 s with one optimize; single rows cost ~5 ms either way).
BULK_DELETE_ROWS = 200


@contextlib.contextmanager
def scrubbed_fts(conn: apsw.Connection, table: str, rows: int) -> Iterator[None]:
    """Delete FTS rows so that their terms leave the file, not only the index's answers.

    By default FTS5 deletes by adding a tombstone and keeps the old terms in its segments
    (readable in the file's bytes) until a merge. Small deletes use FTS5 'secure-delete'
    (SQLite >= 3.42), which removes the terms in place; bulk deletes use tombstones and then
    one 'optimize', which rewrites the index without them. Freed pages are zeroed by
    `pragma secure_delete`. Call inside write().
    """
    bulk = rows > BULK_DELETE_ROWS
    conn.execute(f'insert into "{table}" ("{table}", rank) values (\'secure-delete\', ?)', (0 if bulk else 1,))
    yield
    if bulk:
        conn.execute(f'insert into "{table}" ("{table}") values (\'optimize\')')


def delete_atoms(conn: apsw.Connection, atom_ids: Sequence[int]) -> None:
    """Delete atoms with their FTS rows and vectors (sources and conflicts cascade). What they
    decided about other atoms goes too: an atom left with no conflict partner is plain active
    again, and an atom they had superseded holds again, or is superseded by their successor."""
    vectors = has_vectors(conn)
    if vectors:
        vectors_changed(conn)
    partners: set[int] = set()
    relinks = _relinks(conn, set(atom_ids))
    with scrubbed_fts(conn, "atoms_fts", len(atom_ids)):
        for atom_id in atom_ids:
            partners.update(r[0] for r in conn.execute(
                'select "other_id" from "atom_conflicts" where "atom_id" = ?1 '
                'union select "atom_id" from "atom_conflicts" where "other_id" = ?1', (atom_id,)))
            conn.execute('delete from "atoms_fts" where "rowid" = ?', (atom_id,))
            if vectors:
                conn.execute('delete from "atoms_vec" where "atom_id" = ?', (atom_id,))
            conn.execute('delete from "atoms" where "id" = ?', (atom_id,))
    for atom_id in sorted(partners - set(atom_ids)):
        alone = conn.execute(
            'select 1 from "atoms" a where a."id" = ?1 and a."status" = 2 and not exists '
            '(select 1 from "atom_conflicts" c where ?1 in (c."atom_id", c."other_id"))', (atom_id,)).fetchone()
        if alone:
            set_atom_status(conn, atom_id, "active")
    for older, successor, valid_to in relinks:
        conn.execute('update "atoms" set "superseded_by" = ?, "valid_to" = ? where "id" = ?',
                     (successor, valid_to, older))
        if successor is None:
            set_atom_status(conn, older, "active")


def _relinks(conn: apsw.Connection, deleted: set[int]) -> list[tuple[int, int | None, str | None]]:
    """(older atom, its new successor or None, its new valid_to) for every surviving atom that a
    deleted one superseded: the chain skips the deleted versions; the newest survivor holds."""
    out = []
    for atom_id in sorted(deleted):
        for (older,) in conn.execute('select "id" from "atoms" where "superseded_by" = ?', (atom_id,)).fetchall():
            if older in deleted:
                continue
            current, successor, valid_to, walked = atom_id, None, None, set()
            while current in deleted and current not in walked:  # walk past deleted versions
                walked.add(current)
                successor, valid_to = conn.execute(
                    'select "superseded_by", "valid_to" from "atoms" where "id" = ?', (current,)).fetchone()
                current = successor
            out.append((older, successor, valid_to if successor is not None else None))
    return out


def delete_turns(conn: apsw.Connection, turn_ids: Sequence[int]) -> None:
    """Delete turns with their FTS rows and vectors, and the atoms left with no source."""
    vectors = has_vectors(conn)
    if vectors:
        vectors_changed(conn)
    orphans: set[int] = set()
    with scrubbed_fts(conn, "turns_fts", len(turn_ids)):
        for turn_id in turn_ids:
            for (atom_id,) in conn.execute(
                'select "atom_id" from "atom_sources" where "turn_id" = ?', (turn_id,)
            ).fetchall():
                orphans.add(atom_id)
            conn.execute('delete from "turns_fts" where "rowid" = ?', (turn_id,))
            if vectors:
                conn.execute('delete from "turns_vec" where "turn_id" = ?', (turn_id,))
            conn.execute('delete from "turns" where "id" = ?', (turn_id,))
    still_sourced = {
        atom_id
        for atom_id in orphans
        if conn.execute('select 1 from "atom_sources" where "atom_id" = ?', (atom_id,)).fetchone()
    }
    # An atom that keeps other sources must lose the forgotten turn's words from its index.
    with scrubbed_fts(conn, "atoms_fts", len(still_sourced)):
        for atom_id in still_sourced:
            reindex_sources(conn, atom_id)
    delete_atoms(conn, sorted(orphans - still_sourced))


def _clamp(confidence: float) -> float:
    if not isinstance(confidence, (int, float)) or math.isnan(confidence):
        raise InvalidInput(f"confidence must be a number between 0 and 1, not {confidence!r}")
    return min(1.0, max(0.0, float(confidence)))


# ---------------------------------------------------------------- input checks


# What str.splitlines() breaks on, and tab: none of it belongs in a one-line name.
_LINE_BREAKS = frozenset("\t\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")


def check_name(value: object, field: str) -> str:
    """A user or session id: a non-empty printable string."""
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be a string, not {type(value).__name__}")
    if not value or len(value) > 256:
        raise InvalidInput(f"{field} must be 1 to 256 characters long")
    _check_text(value, field)
    breaks = [ch for ch in value if ch in _LINE_BREAKS]
    if breaks:  # a speaker name is printed into the extraction prompt: one line, or it forges lines
        raise InvalidInput(f"{field} holds {breaks[0]!r}; names are one line of printable text")
    return value


def _check_text(value: str, field: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{field} holds a lone surrogate at position {exc.start}; send valid Unicode") from None
    for i, ch in enumerate(value):
        if ch < " " and ch not in "\t\n\r" or ch == "\x7f":
            raise InvalidInput(f"{field} holds control character {ch!r} at position {i}; strip it first")


def parse_ts(value: object, field: str) -> str:
    """ISO 8601 text for a datetime, a date or an ISO string; aware times are kept in UTC."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise InvalidInput(f"{field} {value[:40]!r} is not an ISO 8601 time such as 2026-10-05T10:00:00") from None
    elif isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, dt.datetime):
        raise InvalidInput(f"{field} must be an ISO 8601 string or a datetime, not {type(value).__name__}")
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value.strftime("%Y-%m-%dT%H:%M:%S")


def check_messages(messages: object, default_ts: str) -> list[dict]:
    """Validate what add() was given; return clean dicts or raise InvalidInput naming the field."""
    if isinstance(messages, dict):
        messages = [messages]
    if not isinstance(messages, (list, tuple)):
        raise InvalidInput(f"messages must be a list of dicts, not {type(messages).__name__}")
    if not messages:
        raise InvalidInput("messages is empty; pass at least one {'role': ..., 'content': ...}")
    return [_check_message(m, f"messages[{i}]", default_ts) for i, m in enumerate(messages)]


def _check_message(message: object, where: str, default_ts: str) -> dict:
    if not isinstance(message, dict):
        raise InvalidInput(f"{where} must be a dict with 'role' and 'content', not {type(message).__name__}")
    unknown = set(message) - {"role", "content", "name", "ts"}
    if unknown:
        raise InvalidInput(f"{where} has unknown key(s) {sorted(map(str, unknown))}; allowed: role, content, name, ts")
    content = message.get("content")
    if not isinstance(content, str):
        raise InvalidInput(f"{where}.content must be a string, not {type(content).__name__}")
    if not content.strip():
        raise InvalidInput(f"{where}.content is empty")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidInput(f"{where}.content has {len(content)} characters; the limit is {MAX_CONTENT_CHARS}")
    _check_text(content, f"{where}.content")
    role = message.get("role", "user")
    if not isinstance(role, str) or role not in codec.ROLES:  # a list or dict role is unhashable
        raise InvalidInput(f"{where}.role {str(role)[:40]!r} is not one of {', '.join(codec.ROLES)}")
    name = message.get("name")
    if name is not None:
        name = check_name(name, f"{where}.name")
    ts = parse_ts(message["ts"], f"{where}.ts") if message.get("ts") is not None else default_ts
    return {"role": role, "content": content, "speaker": name, "ts": ts}
