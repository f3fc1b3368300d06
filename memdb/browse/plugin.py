"""Datasette hooks for `memdb browse`: SQL functions on every connection, decoded cells, a search
box that segments Chinese as memdb indexed it, and the --user filter on every table page.

Imported only once Datasette is known to be installed (memdb/browse/__init__.py). Each hook does
nothing for a Datasette that memdb did not start (its metadata has no "memdb" plugin section),
since Datasette's plugin manager is one per process.
"""

from __future__ import annotations

import json
from typing import Any

import msgpack
from datasette import hookimpl
from datasette.filters import FilterArguments
from markupsafe import Markup

from .. import codec, text
from ..db.rows import user_tag
from .config import PLUGIN, TABLES

TABLE_NAMES = {name for name in TABLES if not name.endswith("_v")}


def _config(datasette: Any, database: str | None = None) -> dict[str, Any] | None:
    config = datasette.plugin_config(PLUGIN)
    if not config or (database is not None and database != config["database"]):
        return None
    return config


def search_expression(query: str) -> str:
    """What the search box's words become in an FTS5 MATCH: every word required, each one a
    quoted phrase (no operator takes effect), and Chinese segmented the way memdb indexed it
    (text.segment: a run's characters and bigrams), so "咖啡" finds "我喜欢喝咖啡"."""
    phrases = [text.quote(word) for word in text.segment(query).split()]
    return " ".join(p for p in phrases if p) or '""'


def record_json(blob: bytes | None) -> str | None:
    """An atom's MessagePack record as JSON (field names and enum names), or None if it is not one."""
    if not isinstance(blob, bytes):
        return None
    try:
        return json.dumps(codec.unpack(blob), ensure_ascii=False)
    except (ValueError, KeyError, TypeError, msgpack.UnpackException):
        return None


@hookimpl(trylast=True)  # after Datasette's own prepare_connection, so this escape_fts is the one used
def prepare_connection(conn: Any, database: str, datasette: Any) -> None:
    config = _config(datasette, database)
    if config is None:
        return
    conn.create_function("escape_fts", 1, search_expression, deterministic=True)
    conn.create_function("memdb_record", 1, record_json, deterministic=True)
    conn.create_function("memdb_user", 0, lambda: config["user"], deterministic=True)


# Columns of the views and canned queries that name atoms or turns, shown as links: an atom to its
# history (what it was, what replaced it), a turn to its row. The stored tables link through
# their foreign keys already.
HISTORY_LINKS = {"superseded_by", "replaced_by", "atom_id"}
TURN_LINKS = {"turn_id", "turn_ids"}


@hookimpl
def render_cell(value: Any, column: str, table: str | None, database: str, datasette: Any) -> Any:
    if _config(datasette, database) is None:
        return None
    if isinstance(value, bytes):
        if column == "record":
            return record_json(value)
        if column in ("centroid", "embedding"):
            return f"float32 vector, {len(value) // 4} dimensions"
        return None
    if table in TABLE_NAMES:  # a stored table: Datasette links its keys itself
        return None
    base = datasette.urls.database(database)
    if column in HISTORY_LINKS or (column == "id" and table in ("atoms_v", "atom_records_v")):
        return _links([value], f"{base}/atom_history?atom_id=", "its history")
    if column in TURN_LINKS:
        return _links(str(value).split(","), f"{base}/turns/", "the turn")
    return None


def _links(values: list[Any], prefix: str, title: str) -> Markup | None:
    """ids as links to prefix + id; None (the plain cell) if any is not an id."""
    ids = [str(v).strip() for v in values if v is not None and str(v).strip()]
    if not ids or not all(i.isdigit() for i in ids):
        return None
    return Markup(", ").join(Markup('<a href="{}{}" title="{}">{}</a>').format(prefix, i, title, i) for i in ids)


@hookimpl
def filters_from_request(request: Any, database: str, table: str, datasette: Any) -> Any:
    config = _config(datasette, database)
    if config is None or config["user"] is None:
        return None

    async def inner() -> FilterArguments | None:
        columns = await datasette.get_database(database).table_columns(table)
        clause = _user_clause(columns)
        if clause is None:
            return None
        return FilterArguments([clause], {"memdb_user": config["user"], "memdb_user_tag": user_tag(config["user"])},
                               [f"user is {config['user']}"])

    return inner


def _user_clause(columns: list[str]) -> str | None:
    """The WHERE clause that keeps a table's rows to the --user's, by the columns it has."""
    if "user" in columns:
        return '"user" = :memdb_user'
    if "u" in columns:  # an FTS table: its user tag column
        return '"u" = :memdb_user_tag'
    if "atom_id" in columns:
        return '"atom_id" in (select "id" from "atoms" where "user" = :memdb_user)'
    if "turn_id" in columns:
        return '"turn_id" in (select "id" from "turns" where "user" = :memdb_user)'
    if "scenario_id" in columns:
        return '"scenario_id" in (select "id" from "scenarios" where "user" = :memdb_user)'
    return None
