"""The connection to a memdb file: pragmas, the file check, schema creation and migrations,
write transactions, the meta table and the vec0 tables an embedder needs.

A file is checked before anything is written to it, and a file already at this schema version
is only read on open. Double-quoted string literals are off (SQLite's DQS misfeature), so a
misspelt "name" fails instead of silently becoming a string.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import logging
import os
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import apsw
import sqlite_vec

from ..checks import now
from ..errors import EmbedderMismatch, SchemaError

log = logging.getLogger("memdb")
APPLICATION_ID = 0x6D656D64  # "memd"
SCHEMA_VERSION = 5
BUSY_TIMEOUT_MS = 30_000


class NeedsUpgrade(SchemaError):
    """A read-only open of a file from an older memdb: only a writable open migrates it."""


def schema_sql() -> str:
    """The text of schema.sql as shipped in the package."""
    return importlib.resources.files("memdb").joinpath("schema.sql").read_text(encoding="utf-8")


def _schema_parts() -> tuple[str, str]:
    core, _, vectors = schema_sql().partition("-- [vectors]")
    return core, vectors


def _section(start: str, end: str) -> str:
    # The section of schema.sql that a version added: read from the file, so the layout stays
    # in one place.
    return schema_sql().partition(start)[2].partition(end)[0]


# Migrations: MIGRATIONS[v] takes a file from user_version v to v + 1.
MIGRATIONS: dict[int, str] = {
    # the atom's fields readable from stock sqlite3 (atom_fields_v, atom_records_v)
    1: _section("-- [record views]", "-- [slots]") + _section("-- [record view definitions]", "-- [vectors]"),
    # 2 → 3: FTS5 secure-delete on, and one optimize that drops the terms earlier updates and
    # deletes left behind in old segments (a merged atom's rewritten row, a forgotten turn).
    2: """
    insert into "atoms_fts" ("atoms_fts", "rank") values ('secure-delete', 1);
    insert into "turns_fts" ("turns_fts", "rank") values ('secure-delete', 1);
    insert into "atoms_fts" ("atoms_fts") values ('optimize');
    insert into "turns_fts" ("turns_fts") values ('optimize');
    """,
    # 3 → 4: L2 scenarios and the L3 persona card, empty: Memory.build_layers() (or
    # `memdb scenarios FILE --build`) places the atoms a file already holds.
    3: _section("-- [layers]", "-- [record views]"),
    # 4 → 5: a note's slots (attribute, value, polarity) in its record, and the views that show them.
    4: 'drop view if exists "atom_records_v"; drop view if exists "atom_fields_v";'
       + _section("-- [slots]", "-- [vectors]"),
}


def connect(path: str | Path, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS, read_only: bool = False) -> apsw.Connection:
    """Open (or create) a memdb file and bring it to the current schema.

    The file is checked before anything is written to it: a foreign SQLite file, a newer
    memdb file or a corrupt file raises SchemaError and stays untouched (also its -wal, which
    closing would otherwise checkpoint into it).

    read_only: open an existing file without writing anything, not even its -wal or -shm:
    `mode=ro`, or, where those cannot be made (a read-only mount), `immutable=1`.
    """
    path = str(path)
    if read_only:
        return _connect_read_only(path, busy_timeout_ms)
    try:
        conn = apsw.Connection(path)
    except apsw.Error as exc:
        raise SchemaError(f"cannot open {path!r}: {exc}") from exc
    try:
        _configure(conn, busy_timeout_ms)
        _check_file(conn, path)
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0)  # a memdb file: close checkpoints as usual
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


def _configure(conn: apsw.Connection, busy_timeout_ms: int) -> None:
    conn.set_busy_timeout(busy_timeout_ms)
    # Until the file is accepted: closing a refused file must not checkpoint a -wal it came
    # with into it (its bytes would change).
    conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.enable_load_extension(False)
    conn.config(apsw.SQLITE_DBCONFIG_DQS_DML, 0)
    conn.config(apsw.SQLITE_DBCONFIG_DQS_DDL, 0)


def _connect_read_only(path: str, busy_timeout_ms: int) -> apsw.Connection:
    """An existing memdb file opened for reading only; nothing is created or written."""
    if path == ":memory:" or not Path(path).is_file():
        raise SchemaError(f"{path!r} is not an existing file; a read-only open reads one")
    uri = "file:" + urllib.parse.quote(os.path.abspath(path))
    flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    for options in ("?mode=ro", "?immutable=1"):
        try:
            conn = apsw.Connection(uri + options, flags=flags)
        except apsw.Error as exc:
            raise SchemaError(f"cannot open {path!r}: {exc}") from exc
        try:
            _configure(conn, busy_timeout_ms)
            _check_file(conn, path)
            break
        except apsw.CantOpenError:  # WAL without a -shm that this process may create: a read-only mount
            conn.close()
            if options == "?immutable=1":
                raise
        except BaseException:
            conn.close()
            raise
    wal = path + "-wal"
    if options == "?immutable=1" and os.path.exists(wal) and os.path.getsize(wal):
        log.warning("memdb: %s is read as it is on a read-only disk: transactions in its -wal that were never "
                    "checkpointed are not seen", path)
    if conn.execute("pragma user_version").fetchone()[0] != SCHEMA_VERSION:
        conn.close()
        raise NeedsUpgrade(f"{path!r} has an older memdb schema; open it once for writing to upgrade it")
    conn.execute("pragma foreign_keys = on")
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
    # Another application's file may hold no table yet and still say whose it is.
    if (tables or app_id) and app_id != APPLICATION_ID:
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
        for step in range(version or SCHEMA_VERSION, SCHEMA_VERSION):  # schema.sql is already the newest
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
        if not conn.getautocommit():  # SQLite already rolled back after a full disk or I/O error
            conn.execute("rollback")
        raise
    conn.execute("commit")


def get_meta(conn: apsw.Connection, key: str) -> str | None:
    row = conn.execute('select "value" from "meta" where "key" = ?', (key,)).fetchone()
    return row[0] if row else None


def meta_int(conn: apsw.Connection, key: str) -> int:
    """A counter kept in meta; 0 when missing or not a number (a hand edit), so it restarts."""
    try:
        return int(get_meta(conn, key) or 0)
    except ValueError:
        log.warning("memdb: meta.%s is not a number; counted from 0", key)
        return 0


def set_meta(conn: apsw.Connection, key: str, value: str | None) -> None:
    conn.execute(
        'insert into "meta" ("key", "value") values (?, ?) '
        'on conflict ("key") do update set "value" = excluded."value"',
        (key, value),
    )


def has_vectors(conn: apsw.Connection) -> bool:
    return conn.execute("select 1 from sqlite_schema where name = 'atoms_vec'").fetchone() is not None


def ensure_vectors(conn: apsw.Connection, name: str, dim: int) -> None:
    """Create the vec0 tables for an embedder, or refuse one other than the file records."""
    if _vectors_held(conn, name, dim):
        return
    with write(conn):
        # Look again under the write lock: several processes opening a new file at once all
        # see no vectors, and a second create_vectors would drop the first one's vectors.
        if not _vectors_held(conn, name, dim):
            create_vectors(conn, name, dim)


def vectors_held(conn: apsw.Connection, name: str, dim: int) -> bool:
    """Whether the file holds vec0 tables of this embedder (EmbedderMismatch if of another)."""
    return _vectors_held(conn, name, dim)


def _vectors_held(conn: apsw.Connection, name: str, dim: int) -> bool:
    held, held_name = embedder_dim(conn), get_meta(conn, "embedder_name")
    # Two embedders of one dimension still place texts differently: their vectors never mix.
    if held is not None and (held != dim or held_name != name):
        raise EmbedderMismatch(
            f"this file holds {held}-dimensional vectors from {held_name!r}, but the embedder "
            f"{name!r} makes {dim}-dimensional ones of its own; open it with embedder={held_name!r} "
            f"(or the default, which uses the file's), or move it with `memdb reembed FILE --to {name}`"
        )
    return held is not None and has_vectors(conn)


def embedder_dim(conn: apsw.Connection) -> int | None:
    """The dimension of the file's vectors, as its meta records it (None: no vectors yet)."""
    held = get_meta(conn, "embedder_dim")
    if held is None:
        return None
    try:
        dim = int(held)
    except (TypeError, ValueError):
        dim = 0
    if not 0 < dim <= 65536:  # a hand edit; vec0 stores at most 8192 anyway
        raise SchemaError(f"the file's meta says its vectors have {held!r} dimensions, which is not a "
                          "dimension: set meta.embedder_dim back to its vec0 tables' (sqlite3: `select sql from "
                          "sqlite_schema where name = 'atoms_vec'`), or open it with embedder=None to search "
                          "by keywords")
    return dim


def create_vectors(conn: apsw.Connection, name: str, dim: int) -> None:
    """(Re)create empty vec0 tables for dim and record the embedder. Call inside write()."""
    conn.execute('drop table if exists "atoms_vec"')
    conn.execute('drop table if exists "turns_vec"')
    conn.execute(_schema_parts()[1].replace("{dim}", str(int(dim))))
    set_meta(conn, "embedder_name", name)
    set_meta(conn, "embedder_dim", str(int(dim)))
    set_meta(conn, "vectors_missing", "1")  # rows written before there were vector tables
    vectors_changed(conn)


def vectors_changed(conn: apsw.Connection) -> None:
    """Record that vectors were deleted or rebuilt, not only added: in-process copies of
    them (index/copies.py) reload instead of appending. Call inside write()."""
    epoch = meta_int(conn, "vectors_epoch")
    set_meta(conn, "vectors_epoch", str(epoch + 1))
