"""`memdb browse FILE`: one memdb file in Datasette, on 127.0.0.1, read-only.

Datasette (`pip install 'memdb-sqlite[browse]'`, imported only here) shows the file with what memdb
knows of it (config.py): titles and descriptions, facets, the FTS5 table behind each search box,
the shadow and lookup tables hidden, canned queries for an atom's history and sources, a user's
card, the week's changes and events. plugin.py adds SQL functions, decoded cells, the search
box's handling of Chinese and the --user filter.

The file is never written: Datasette opens it immutable (no lock, no -wal or -shm file made), or
read-only (mode=ro) while a writer's WAL holds changes not yet in the file, so they show.
"""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import sys
from pathlib import Path
from typing import Any

import apsw
import sqlite_vec

from ..db.connection import APPLICATION_ID, SCHEMA_VERSION
from ..errors import InvalidInput, MemdbError, SchemaError
from . import config

# FTS5 secure-delete (schema.sql) marks the full-text tables with a format that SQLite before
# 3.42 refuses ("invalid fts5 file format"): an older sqlite3 module cannot search the file.
MIN_SQLITE = (3, 42, 0)
INSTALL = "pip install 'memdb-sqlite[browse]'"
DEFAULT_PORT = 8001


def datasette(path: str | Path, *, user: str | None = None) -> Any:
    """A Datasette instance serving the memdb file at path read-only (not started: serve() runs it,
    tests call it through `instance.client`). user: show only that user's rows."""
    path = Path(path)
    # A WAL holding changes the main file does not have yet (a writer is running, or was killed)
    # is read through mode=ro; immutable would not see them.
    wal = Path(f"{path}-wal")
    live = wal.exists() and wal.stat().st_size > 0
    tables = _check_file(path, "mode=ro" if live else "immutable=1")
    if user is not None and not user:
        raise InvalidInput("--user is empty; name a user or leave it out")
    Datasette = _import_datasette()
    from datasette.utils import tilde_encode

    database = path.stem
    return Datasette(
        files=[str(path)] if live else [],
        immutables=[] if live else [str(path)],
        metadata=config.metadata(database, "/" + tilde_encode(database), path.name, tables, user),
        sqlite_extensions=[sqlite_vec.loadable_path()],  # the vec0 tables (Datasette lists every table)
        # No facet suggestions: each is a query over the whole view per column, and the views
        # join and decode (bench/browse_screenshots.py); the facets that matter are set in config.
        settings={"sql_time_limit_ms": 5000, "facet_time_limit_ms": 1000, "suggest_facets": False,
                  "allow_download": user is None},
    )


def serve(path: str | Path, *, user: str | None = None, port: int = DEFAULT_PORT) -> None:
    """Serve the file on http://127.0.0.1:port until interrupted."""
    import uvicorn  # Datasette's server, installed with it

    instance = datasette(path, user=user)
    from datasette.utils import tilde_encode

    _check_port(port)
    asyncio.run(instance.invoke_startup())
    print(f"memdb browse: http://127.0.0.1:{port}/{tilde_encode(Path(path).stem)} (read-only; Ctrl-C stops)",
          flush=True)
    uvicorn.run(instance.app(), host="127.0.0.1", port=port, log_level="warning")


def _check_file(path: Path, mode: str) -> list[str]:
    """The names of the file's tables and views, once it is known to be a current memdb file;
    mode: how to open it, "immutable=1" (no lock, no file made) or "mode=ro"."""
    if not path.exists():
        raise InvalidInput(f"{path} does not exist; check the path")
    if path.is_dir():
        raise InvalidInput(f"{path} is a directory; give a memdb file")
    try:
        conn = apsw.Connection(f"{path.resolve().as_uri()}?{mode}",
                               flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    except apsw.Error as exc:
        raise SchemaError(f"cannot open {path}: {exc}") from None
    try:
        app_id, version = conn.execute("select (select application_id from pragma_application_id), "
                                       "(select user_version from pragma_user_version)").fetchone()
        names = [r[0] for r in conn.execute("select name from sqlite_schema where type in ('table', 'view')")]
    except apsw.Error as exc:
        raise SchemaError(f"{path} is not a readable SQLite file ({exc})") from None
    finally:
        conn.close()
    if app_id != APPLICATION_ID:
        raise SchemaError(f"{path} is not a memdb file (application_id {app_id})")
    if version != SCHEMA_VERSION:
        raise SchemaError(
            f"{path} has memdb schema version {version}, and this memdb reads {SCHEMA_VERSION}: "
            + ("open it once with memdb (e.g. `memdb stats FILE`) to bring it up to date; browse never writes"
               if version < SCHEMA_VERSION else "upgrade memdb to browse it"))
    return names


def _import_datasette() -> Any:
    """Datasette's class, its sqlite3 module made one that reads the file's FTS5 tables.

    Datasette reads with pysqlite3 when it is importable, else with the standard sqlite3. Where
    the standard one is older than MIN_SQLITE (Debian 12's Python: 3.40), sqlean.py (a drop-in
    sqlite3 with a current SQLite, part of the browse extra) takes pysqlite3's place."""
    if "datasette.utils.sqlite" not in sys.modules and sqlite3.sqlite_version_info < MIN_SQLITE:
        try:
            import pysqlite3  # noqa: F401 - Datasette picks it up itself
        except ImportError:
            try:
                import sqlean
            except ImportError:
                sqlean = None
            if sqlean is not None:
                sys.modules["pysqlite3"] = sqlean
    try:
        from datasette.app import Datasette
        from datasette.plugins import pm
        from datasette.utils.sqlite import sqlite3 as datasette_sqlite3
    except ImportError as exc:
        raise MemdbError(f"memdb browse needs Datasette: {INSTALL} ({exc})") from None
    if datasette_sqlite3.sqlite_version_info < MIN_SQLITE:
        raise MemdbError(f"memdb browse needs SQLite {'.'.join(map(str, MIN_SQLITE))} or newer to read the "
                         f"full-text tables; Python's is {datasette_sqlite3.sqlite_version}: {INSTALL} "
                         "brings sqlean.py, which has one")
    from . import plugin

    if pm.get_plugin(config.PLUGIN) is None:
        pm.register(plugin, name=config.PLUGIN)
    return Datasette


def _check_port(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise InvalidInput(f"port {port} on 127.0.0.1 is taken ({exc.strerror}); pick another with --port") from None
