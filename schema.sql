-- memdb file layout, version 4. This file is the one source of the database layout:
-- memdb/db/connection.py runs it on a new file and steps `user_version` forward with migrations.
-- Everything a reader needs is readable from a stock sqlite3 shell: coded enums have lookup
-- tables and the *_v views show names instead of codes. Only the vec0 tables (vectors) need
-- the sqlite-vec extension.

pragma application_id = 1835363684;  -- 0x6d656d64, "memd"

-- ---------------------------------------------------------------- lookup tables
-- Codes match memdb/codec.py.
create table "kinds" ("code" integer primary key, "name" text not null unique);
insert into "kinds" values (0, 'fact'), (1, 'preference'), (2, 'constraint'), (3, 'event');

create table "sentiments" ("code" integer primary key, "name" text not null unique);
insert into "sentiments" values (0, 'neutral'), (1, 'like'), (2, 'dislike');

create table "statuses" ("code" integer primary key, "name" text not null unique);
insert into "statuses" values (0, 'active'), (1, 'superseded'), (2, 'conflicting');

create table "roles" ("code" integer primary key, "name" text not null unique);
insert into "roles" values (0, 'user'), (1, 'assistant'), (2, 'system'), (3, 'tool');

create table "states" ("code" integer primary key, "name" text not null unique);
insert into "states" values (0, 'pending'), (1, 'done'), (2, 'skipped'), (3, 'failed');

-- ---------------------------------------------------------------- meta
-- schema_version, embedder_name, embedder_dim, llm_name, llm_sha256, created_at.
create table "meta" ("key" text primary key, "value" text) without rowid;

-- ---------------------------------------------------------------- L0: raw turns
-- Append-only ground truth. Content is never updated; only forget() deletes rows.
create table "turns" (
    "id" integer primary key,
    "user" text not null,
    "session" text not null,
    "seq" integer not null,                       -- position in the session, from 1
    "role" integer not null references "roles" ("code"),
    "speaker" text,                               -- the speaker's name, when known
    "content" text not null,                      -- verbatim
    "ts" text not null,                           -- when it was said (ISO 8601, UTC when known)
    "created_at" text not null,                   -- when it was stored
    "state" integer not null default 0 references "states" ("code"),  -- extraction state
    "reason" text,                                -- why extraction skipped or failed it
    unique ("user", "session", "seq")
);
create index "turns_by_user_ts" on "turns" ("user", "ts");
create index "turns_pending" on "turns" ("user", "session", "seq") where "state" = 0;

create trigger "turns_append_only"
before update of "id", "user", "session", "seq", "role", "speaker", "content", "ts", "created_at"
on "turns"
begin
    select raise(abort, 'memdb: L0 turns are append-only; only the extraction state changes');
end;

-- ---------------------------------------------------------------- L1: atoms
create table "atoms" (
    "id" integer primary key,
    "user" text not null,
    "kind" integer not null references "kinds" ("code"),
    "record" blob not null,                       -- MessagePack: short keys, integer enums (codec.py)
    "text" text not null,                         -- the canonical one-line text made from record
    "keywords" text not null default '',          -- space-separated content terms
    "confidence" real not null check ("confidence" between 0 and 1),
    "seen" integer not null default 1,            -- times stated (merges add one)
    "first_seen" text not null,                   -- ts of the first source turn
    "last_seen" text not null,                    -- ts of the latest source turn
    "valid_from" text,                            -- when it holds in the world (an event's date)
    "valid_to" text,                              -- set when superseded
    "status" integer not null default 0 references "statuses" ("code"),
    "superseded_by" integer references "atoms" ("id") on delete set null,
    "created_at" text not null
);
create index "atoms_by_user" on "atoms" ("user", "status", "kind");
create index "atoms_superseded_by" on "atoms" ("superseded_by") where "superseded_by" is not null;

-- Every atom points to the L0 turns it came from.
create table "atom_sources" (
    "atom_id" integer not null references "atoms" ("id") on delete cascade,
    "turn_id" integer not null references "turns" ("id") on delete cascade,
    primary key ("atom_id", "turn_id")
) without rowid;
create index "atom_sources_by_turn" on "atom_sources" ("turn_id");

-- Active atoms that disagree on comparable evidence: both stay, shown together.
create table "atom_conflicts" (
    "atom_id" integer not null references "atoms" ("id") on delete cascade,
    "other_id" integer not null references "atoms" ("id") on delete cascade,
    "detected_at" text not null,
    primary key ("atom_id", "other_id")
) without rowid;

-- ---------------------------------------------------------------- full-text indexes
-- Each holds a segmented copy of the text (memdb/text.py: CJK runs as unigrams + bigrams),
-- written in the same transaction as the row, with rowid = the row's id. "u" is a token
-- derived from the user ("u" + 16 hex digits) so a match can be scoped to one user inside
-- FTS5; its bm25 weight is 0. To search by hand: segment the query the same way.
create virtual table "atoms_fts" using fts5(
    "u", "subject", "value", "body", "kind",
    "source",  -- the words of the atom's source turns: finds the atom by what was said
               -- (document expansion); only the atom's own line is ever returned
    tokenize = 'porter unicode61 remove_diacritics 2'
);
create virtual table "turns_fts" using fts5(
    "u", "speaker", "content",
    tokenize = 'porter unicode61 remove_diacritics 2'
);
-- Every delete and update removes the old row's terms from the index pages in place, instead of
-- leaving them in older segments until a merge: an atom's row is rewritten when it merges
-- another turn, and what a forgotten turn said must not survive in a superseded copy of it.
insert into "atoms_fts" ("atoms_fts", "rank") values ('secure-delete', 1);
insert into "turns_fts" ("turns_fts", "rank") values ('secure-delete', 1);

-- ---------------------------------------------------------------- readable views
create view "turns_v" as
select t."id", t."user", t."session", t."seq", r."name" as "role", t."speaker", t."content",
       t."ts", t."created_at", s."name" as "state", t."reason"
from "turns" t
join "roles" r on r."code" = t."role"
join "states" s on s."code" = t."state";

create view "atoms_v" as
select a."id", a."user", k."name" as "kind", a."text", st."name" as "status",
       a."superseded_by", a."confidence", a."seen", a."first_seen", a."last_seen",
       a."valid_from", a."valid_to", a."keywords",
       (select group_concat(s."turn_id", ',') from "atom_sources" s where s."atom_id" = a."id")
           as "turn_ids",
       a."created_at"
from "atoms" a
join "kinds" k on k."code" = a."kind"
join "statuses" st on st."code" = a."status";

create view "atom_sources_v" as
select s."atom_id", a."text" as "atom", s."turn_id", t."session", t."speaker",
       t."content" as "turn", t."ts"
from "atom_sources" s
join "atoms" a on a."id" = s."atom_id"
join "turns" t on t."id" = s."turn_id";

-- [layers]
-- ---------------------------------------------------------------- L2: scenarios
-- A scenario is a named cluster of one user's atoms about one project, situation or thread of
-- life. Atoms join one as they are absorbed (layers/scenarios.py); everything else in the row
-- is derived from its members (layers/store.py) and rewritten whenever they change or are
-- forgotten, so a scenario never holds words its members no longer say.
create table "scenarios" (
    "id" integer primary key,
    "user" text not null,
    "title" text not null default '',             -- the text of its most central held member
    "state" text not null default '',             -- "what is true now": its newest held members
    "title_atom" integer,                         -- the atom the title is, for citing
    "state_atoms" text not null default '',       -- the atoms the state line is, comma-separated
    "members" integer not null default 0,         -- member rows, any status
    "held" integer not null default 0,            -- members still active or conflicting
    "keywords" text not null default '',          -- the members' most frequent content terms
    "centroid" blob,                              -- float32 unit mean of the members' vectors (2+ of them)
    "heat" real not null default 0,               -- mentions, each fading with a half-life...
    "heat_at" text not null,                      -- ...as of this time
    "first_seen" text not null,
    "last_seen" text not null,
    "created_at" text not null
);
create index "scenarios_by_user" on "scenarios" ("user", "last_seen");

create table "scenario_atoms" (
    "scenario_id" integer not null references "scenarios" ("id") on delete cascade,
    "atom_id" integer not null unique references "atoms" ("id") on delete cascade,  -- one scenario each
    "joined_at" text not null,
    primary key ("scenario_id", "atom_id")
) without rowid;

-- ---------------------------------------------------------------- L3: persona
-- The persona card of a user: ranked lines, each one held fact, preference or constraint
-- about the user, citing its atom; re-ranked when the user's atoms change (layers/persona.py).
create table "persona" (
    "user" text not null,
    "rank" integer not null,
    "atom_id" integer not null references "atoms" ("id") on delete cascade,
    "line" text not null,
    "score" real not null,
    primary key ("user", "rank")
) without rowid;
create index "persona_by_atom" on "persona" ("atom_id");

create view "scenarios_v" as
select s."id", s."user", s."title", s."state", s."held", s."members", round(s."heat", 3) as "heat",
       s."heat_at", s."first_seen", s."last_seen",
       (select group_concat(m."atom_id", ',') from "scenario_atoms" m where m."scenario_id" = s."id")
           as "atom_ids"
from "scenarios" s;

create view "scenario_atoms_v" as
select m."scenario_id", s."title", m."atom_id", a."text" as "atom", st."name" as "status", m."joined_at"
from "scenario_atoms" m
join "scenarios" s on s."id" = m."scenario_id"
join "atoms" a on a."id" = m."atom_id"
join "statuses" st on st."code" = a."status";

create view "persona_v" as
select p."user", p."rank", p."line", p."atom_id", k."name" as "kind", round(p."score", 3) as "score",
       a."seen", a."last_seen"
from "persona" p
join "atoms" a on a."id" = p."atom_id"
join "kinds" k on k."code" = a."kind";

-- [record views]
-- An atom's record, readable with stock sqlite3 (no MessagePack decoder). The record is a map of
-- one-letter keys (codec.py's SHORT_KEYS, spelled out in "record_keys") to strings or small
-- integers, so plain SQL can walk it on the hex of the blob: byte p is two hex digits, and a
-- value's first byte says how long it is. "atom_fields_v" has one row per field (enums by name),
-- "atom_records_v" one row per atom with the fields as columns. Both decode every atom of the
-- file on each query: they are for people; code reads the record with codec.unpack.
create table "record_keys" ("key" text primary key, "field" text not null unique) without rowid;
insert into "record_keys" values ('k', 'kind'), ('s', 'subject'), ('p', 'predicate'), ('o', 'object'),
    ('e', 'sentiment'), ('d', 'domain'), ('t', 'date'), ('w', 'when'), ('x', 'outcome'), ('l', 'lang');

-- [slots]
-- A note's slots (extraction/slots.py): the attribute it fills, its value, and whether it holds,
-- no longer holds or never did (polarity, coded; left out of the record when it holds).
create table "polarities" ("code" integer primary key, "name" text not null unique);
insert into "polarities" values (0, 'holds'), (1, 'ended'), (2, 'never');
insert into "record_keys" values ('a', 'attribute'), ('v', 'value'), ('n', 'polarity');

-- [record view definitions]

create view "atom_fields_v" as
with recursive "entry" ("atom_id", "record", "hex", "at", "left", "next") as (
    -- "at": where an entry's key starts; "left": entries after it; "next": where the next starts.
    select "id", "record", hex("record"), null, (instr('0123456789ABCDEF', substr(hex("record"), 2 * (1) - 1, 1)) * 16 + instr('0123456789ABCDEF', substr(hex("record"), 2 * (1), 1)) - 17) - 128, 2 from "atoms"
    union all
    select "atom_id", "record", "hex", "next", "left" - 1, "next" + 2 + (
        -- the value's tag byte says how long it is: 0x00-0x7f a small integer (the byte itself),
        -- 0xa0-0xbf a string of up to 31 bytes, 0xd9 / 0xda a string with a 1- / 2-byte length
        select case when t < 128 then 1 when t < 192 then t - 159
                    when t = 217 then 2 + (instr('0123456789ABCDEF', substr("hex", 2 * ("next" + 3) - 1, 1)) * 16 + instr('0123456789ABCDEF', substr("hex", 2 * ("next" + 3), 1)) - 17)
                    else 3 + (instr('0123456789ABCDEF', substr("hex", 2 * ("next" + 3) - 1, 1)) * 16 + instr('0123456789ABCDEF', substr("hex", 2 * ("next" + 3), 1)) - 17) * 256 + (instr('0123456789ABCDEF', substr("hex", 2 * ("next" + 4) - 1, 1)) * 16 + instr('0123456789ABCDEF', substr("hex", 2 * ("next" + 4), 1)) - 17) end
        from (select (instr('0123456789ABCDEF', substr("hex", 2 * ("next" + 2) - 1, 1)) * 16 + instr('0123456789ABCDEF', substr("hex", 2 * ("next" + 2), 1)) - 17) as t))
    from "entry" where "left" > 0
)
select e."atom_id", k."field",
       case when (instr('0123456789ABCDEF', substr("hex", 2 * ("at" + 2) - 1, 1)) * 16 + instr('0123456789ABCDEF', substr("hex", 2 * ("at" + 2), 1)) - 17) < 128 then coalesce(
                (select "name" from "kinds" where k."field" = 'kind' and "code" = (instr('0123456789ABCDEF', substr("hex", 2 * ("at" + 2) - 1, 1)) * 16 + instr('0123456789ABCDEF', substr("hex", 2 * ("at" + 2), 1)) - 17)),
                (select "name" from "sentiments" where k."field" = 'sentiment' and "code" = (instr('0123456789ABCDEF', substr("hex", 2 * ("at" + 2) - 1, 1)) * 16 + instr('0123456789ABCDEF', substr("hex", 2 * ("at" + 2), 1)) - 17)),
                (select "name" from "polarities" where k."field" = 'polarity' and "code" = (instr('0123456789ABCDEF', substr("hex", 2 * ("at" + 2) - 1, 1)) * 16 + instr('0123456789ABCDEF', substr("hex", 2 * ("at" + 2), 1)) - 17)))
            else cast(substr(e."record", e."at" + 2 + case (instr('0123456789ABCDEF', substr("hex", 2 * ("at" + 2) - 1, 1)) * 16 + instr('0123456789ABCDEF', substr("hex", 2 * ("at" + 2), 1)) - 17) when 217 then 2 when 218 then 3 else 1 end,
                             e."next" - e."at" - 2 - case (instr('0123456789ABCDEF', substr("hex", 2 * ("at" + 2) - 1, 1)) * 16 + instr('0123456789ABCDEF', substr("hex", 2 * ("at" + 2), 1)) - 17) when 217 then 2 when 218 then 3 else 1 end) as text)
       end as "value"
from "entry" e join "record_keys" k on k."key" = cast(substr(e."record", e."at" + 1, 1) as text)
where e."at" is not null;

create view "atom_records_v" as
select a."id", a."user", st."name" as "status",
       max(case when f."field" = 'kind' then f."value" end) as "kind",
       max(case when f."field" = 'subject' then f."value" end) as "subject",
       max(case when f."field" = 'predicate' then f."value" end) as "predicate",
       max(case when f."field" = 'object' then f."value" end) as "object",
       max(case when f."field" = 'sentiment' then f."value" end) as "sentiment",
       max(case when f."field" = 'date' then f."value" end) as "date",
       max(case when f."field" = 'when' then f."value" end) as "when",
       max(case when f."field" = 'domain' then f."value" end) as "domain",
       max(case when f."field" = 'outcome' then f."value" end) as "outcome",
       max(case when f."field" = 'lang' then f."value" end) as "lang",
       max(case when f."field" = 'attribute' then f."value" end) as "attribute",
       max(case when f."field" = 'value' then f."value" end) as "value",
       coalesce(max(case when f."field" = 'polarity' then f."value" end), 'holds') as "polarity",
       a."text", a."confidence", a."first_seen", a."last_seen"
from "atoms" a
join "statuses" st on st."code" = a."status"
join "atom_fields_v" f on f."atom_id" = a."id"
group by a."id";

-- ---------------------------------------------------------------- vectors
-- Created once the embedder's dimension is known (db/connection.py substitutes {dim}); rebuilt by
-- reembed. Cosine distance; the user is the partition key so a KNN scans one user's vectors.
-- vec0 allocates a whole chunk of chunk_size vectors for each user's first vector in each table:
-- at 256 a user with one turn cost ~0.8 MB, at 8 it costs ~25 kB (bench/storage.py). A KNN
-- over a small user reads more, smaller chunks; users with vector_copy_min (500) or more
-- vectors are ranked from an in-process copy (index/copies.py) instead. Files made with
-- another chunk size keep it until `memdb reembed`. (vec0 does not accept quoted column names.)
-- [vectors]
create virtual table "atoms_vec" using vec0(
    atom_id integer primary key,
    user text partition key,
    active integer,
    embedding float[{dim}] distance_metric=cosine,
    chunk_size=8
);
create virtual table "turns_vec" using vec0(
    turn_id integer primary key,
    user text partition key,
    embedding float[{dim}] distance_metric=cosine,
    chunk_size=8
);
