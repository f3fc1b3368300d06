"""What `memdb browse` tells Datasette about a memdb file: titles and descriptions, the facets,
the full-text tables behind each search box, the tables to hide and the canned queries.

Data only: plugin.py holds the hooks and __init__.py starts Datasette. The canned queries are
plain SQL over the file's tables; `memdb_record(blob)` (the atom's MessagePack record as JSON,
enums by name) and `memdb_user()` are SQL functions the plugin registers on every connection.
"""

from __future__ import annotations

import html
from typing import Any

from .. import codec
from ..db import rows

PLUGIN = "memdb"

# Tables a person never needs to open: the enum lookups (the views and Datasette's foreign-key
# labels already show the names) and the record-key table behind the decoding views. The FTS5
# and vec0 tables and their shadow tables are hidden too, found by name in the file, and
# SQLite's own (sqlite_sequence).
LOOKUP_TABLES = ("kinds", "sentiments", "statuses", "roles", "states", "polarities", "record_keys")
INDEX_TABLES = ("atoms_fts", "turns_fts", "atoms_vec", "turns_vec")

# (title, description, extra table metadata) of every table and view worth showing.
TABLES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "atoms_v": ("Atoms: what memory holds",
                "One row per atom: a fact, preference, constraint or event taken from the conversation. "
                "status says whether it holds (active), was replaced (superseded: superseded_by names the "
                "atom that replaced it) or is disputed (conflicting); turn_ids are the turns it came from. "
                "The search box finds atoms by their words and by the words of their source turns, "
                "in Chinese or English.",
                {"facets": ["user", "kind", "status"], "fts_table": "atoms_fts", "fts_pk": "id",
                 "sort_desc": "id"}),
    "turns_v": ("Turns: what was said",
                "The conversation as stored, verbatim and append-only: who said what, when, in which "
                "session; state says whether extraction has read the turn.",
                {"facets": ["user", "speaker", "role", "state"], "fts_table": "turns_fts", "fts_pk": "id",
                 "sort_desc": "id"}),
    "atom_sources_v": ("Atom sources: why memory holds each atom",
                       "Each atom beside the turns it was extracted from.",
                       {"facets": ["speaker"]}),
    "atom_records_v": ("Atom records, decoded",
                       "Each atom's structured record (stored as MessagePack) as columns: subject, "
                       "predicate, object, sentiment, date. The view decodes every atom of the file in "
                       "SQL for each page (seconds at 100,000 atoms); the atoms table shows each record "
                       "decoded too, and fast.",
                       {"fts_table": "atoms_fts", "fts_pk": "id"}),
    "atom_fields_v": ("Atom record fields", "One row per field of each atom's record.", {"facets": ["field"]}),
    "scenarios_v": ("Scenarios", "Clusters of one user's atoms about one project, situation or thread "
                    "of life: a title, what is true now (state) and the member atoms.", {"facets": ["user"]}),
    "scenario_atoms_v": ("Scenario members", "Each scenario beside its atoms.", {"facets": ["status"]}),
    "persona_v": ("Persona cards", "Who each user is: ranked lines, each one held fact, preference or "
                  "constraint citing its atom.", {"facets": ["user", "kind"], "sort": "rank"}),
    "atoms": ("atoms (stored rows)", "The atoms as stored: record is MessagePack (shown decoded), kind and "
              "status are codes (shown with their names). atoms_v reads easier.",
              {"facets": ["user", "kind", "status"], "fts_table": "atoms_fts", "label_column": "text"}),
    "turns": ("turns (stored rows)", "The turns as stored: role and state are codes (shown with their names).",
              {"facets": ["user", "speaker", "role", "state"], "fts_table": "turns_fts",
               "label_column": "content"}),
    "atom_sources": ("atom_sources (stored rows)", "Which turns each atom came from.", {}),
    "atom_conflicts": ("atom_conflicts (stored rows)", "Pairs of active atoms that disagree; both are kept.", {}),
    "scenarios": ("scenarios (stored rows)", "The scenarios as stored (centroid: a float32 vector).", {}),
    "scenario_atoms": ("scenario_atoms (stored rows)", "Which scenario each atom is in.", {}),
    "persona": ("persona (stored rows)", "The ranked lines of each user's persona card.", {}),
    "meta": ("meta", "The file's settings: schema version, embedder, extraction model.", {}),
}

HELD = codec.HELD
EVENT = codec.KINDS["event"]

# Canned queries: (title, description, SQL). {held} and {event} are codec's codes; {user} is
# `:user` (a form field), or `memdb_user()` when browse was started with --user; {scope_a} and
# {scope_t} limit atoms a and turns t to that user.
QUERIES: dict[str, tuple[str, str, str]] = {
    "atom_history": (
        "One atom's history",
        "Every version of the fact an atom belongs to, oldest first: what it was, what replaced it "
        "and when, and what was said that replaced it. Give any atom id of the chain.",
        rows.CHAIN_CTE.strip().replace("select ?", "select cast(:atom_id as integer)", 1) + """
select a."id", a."user", k."name" as "kind", a."text", st."name" as "status",
       a."first_seen", a."last_seen", a."seen",
       a."valid_to" as "replaced_at", a."superseded_by" as "replaced_by", n."text" as "replaced_by_text",
       coalesce(  -- the replacing atom's turn said when it replaced this one, else its first
           (select t."content" from "atom_sources" s join "turns" t on t."id" = s."turn_id"
            where s."atom_id" = a."superseded_by" and t."ts" = a."valid_to" order by t."id" limit 1),
           (select t."content" from "atom_sources" s join "turns" t on t."id" = s."turn_id"
            where s."atom_id" = a."superseded_by" order by t."ts", t."id" limit 1)) as "replaced_because",
       (select group_concat(s."turn_id", ',') from "atom_sources" s where s."atom_id" = a."id") as "turn_ids"
from chain c
join "atoms" a on a."id" = c."id"
join "kinds" k on k."code" = a."kind"
join "statuses" st on st."code" = a."status"
left join "atoms" n on n."id" = a."superseded_by"
where {scope_a}
order by a."first_seen", a."id"
""",
    ),
    "atom_sources": (
        "An atom's source turns",
        "The turns an atom was extracted from, in the order they were said.",
        """select t."id" as "turn_id", t."user", t."session", t."seq", r."name" as "role", t."speaker",
       t."content", t."ts"
from "atom_sources" s
join "turns" t on t."id" = s."turn_id"
join "roles" r on r."code" = t."role"
where s."atom_id" = cast(:atom_id as integer) and {scope_t}
order by t."ts", t."id"
""",
    ),
    "profile": (
        "A user's profile card",
        "The facts, preferences and constraints memory holds about a user now, by kind and subject "
        "(what `memdb profile` prints).",
        """select a."id", k."name" as "kind",
       json_extract(memdb_record(a."record"), '$.subject') as "subject",
       json_extract(memdb_record(a."record"), '$.predicate') as "predicate",
       json_extract(memdb_record(a."record"), '$.object') as "object",
       json_extract(memdb_record(a."record"), '$.sentiment') as "sentiment",
       a."text", st."name" as "status", a."seen", a."first_seen", a."last_seen"
from "atoms" a
join "kinds" k on k."code" = a."kind"
join "statuses" st on st."code" = a."status"
where a."user" = {user} and a."status" in {held} and a."kind" != {event}
order by a."kind", "subject", "predicate", a."first_seen", a."id"
""",
    ),
    "this_week": (
        "What changed this week",
        "New atoms and supersessions by day, newest first, for the seven days up to the newest change "
        "(or from the date given as since, e.g. 2026-03-01). Dates are when it was said.",
        """with "last" as (
    select max("at") as "at" from (
        select max(a."first_seen") as "at" from "atoms" a where {scope_a}
        union all
        select max(a."valid_to") from "atoms" a where {scope_a})
),
"since" as (select coalesce(nullif(:since, ''), date((select "at" from "last"), '-6 days')) as "day")
select date(a."first_seen") as "day", 'new' as "change", a."id" as "atom_id", a."user", k."name" as "kind",
       a."text", null as "replaced_by", null as "replaced_by_text"
from "atoms" a join "kinds" k on k."code" = a."kind"
where date(a."first_seen") >= (select "day" from "since") and {scope_a}
union all
select date(a."valid_to"), 'superseded', a."id", a."user", k."name", a."text", n."id", n."text"
from "atoms" a join "kinds" k on k."code" = a."kind" join "atoms" n on n."id" = a."superseded_by"
where date(a."valid_to") >= (select "day" from "since") and {scope_a}
order by "day" desc, "change", "atom_id"
""",
    ),
    "events": (
        "Events in time order",
        "A user's events that still hold, by the date they happened (undated ones last), with the "
        "time as it was said.",
        """select a."valid_from" as "date", json_extract(memdb_record(a."record"), '$.when') as "said_as",
       a."text", a."id", st."name" as "status",
       (select group_concat(s."turn_id", ',') from "atom_sources" s where s."atom_id" = a."id") as "turn_ids"
from "atoms" a
join "statuses" st on st."code" = a."status"
where a."user" = {user} and a."kind" = {event} and a."status" in {held}
order by a."valid_from" is null, a."valid_from", a."id"
""",
    ),
}


def queries(user: str | None) -> dict[str, dict[str, Any]]:
    """The canned queries as Datasette metadata; with a user, every query is limited to them."""
    scope_a = 'a."user" = memdb_user()' if user is not None else "1"
    scope_t = 't."user" = memdb_user()' if user is not None else "1"
    who = "memdb_user()" if user is not None else ":user"
    return {name: {"title": title, "description": description, "hide_sql": True,
                   "sql": sql.format(user=who, scope_a=scope_a, scope_t=scope_t, held=HELD, event=EVENT)}
            for name, (title, description, sql) in QUERIES.items()}


def metadata(database: str, url: str, path: str, tables: list[str], user: str | None) -> dict[str, Any]:
    """Datasette's metadata for one memdb file whose tables (and views) are `tables`; url is the
    database's page ("/" + its name as Datasette encodes it in URLs)."""
    shown = {name: {"title": title, "description": description, **extra}
             for name, (title, description, extra) in TABLES.items() if name in tables}
    hidden = {name: {"hidden": True} for name in tables
              if name in LOOKUP_TABLES or name.startswith("sqlite_")
              or any(name == t or name.startswith(t + "_") for t in INDEX_TABLES)}
    scope = f" Showing user {html.escape(user)!r} only." if user is not None else ""
    return {
        "title": f"memdb: {path}",
        "description": "Long-term memory in one SQLite file, opened read-only." + scope,
        "plugins": {PLUGIN: {"database": database, "user": user}},
        "databases": {database: {
            "title": f"memdb: {path}",
            "description_html": (
                f'Start with <a href="{url}/atoms_v">Atoms</a> (what memory holds) or '
                f'<a href="{url}/turns_v">Turns</a> (what was said); <a href="{url}/atom_sources_v">Atom '
                "sources</a> says why each atom is held. The queries below follow one atom's history and "
                "sources, a user's card, the week's changes and events." + scope),
            "tables": {**shown, **hidden},
            "queries": queries(user),
        }},
    }
