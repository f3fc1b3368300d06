"""Forgetting: rows deleted with everything derived from them, and their words scrubbed
from the FTS index so they leave the file's bytes, not only the index's answers.

What a deleted atom decided about others is undone too: a conflict partner left alone is
plain active again, and an atom it superseded holds again (or is superseded by its successor).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import apsw

from .. import codec
from . import connection, rows

# Above this many rows, deleting with tombstones and then rewriting the FTS index once
# ('optimize') is faster than removing each row's terms in place, several times so at
# thousands of rows; for a few rows both cost about the same.
BULK_DELETE_ROWS = 200


@contextlib.contextmanager
def scrubbed_fts(conn: apsw.Connection, table: str, rowids: Sequence[int]) -> Iterator[None]:
    """Delete FTS rows so that their terms leave the file, not only the index's answers.

    The tables keep FTS5 'secure-delete' on (schema.sql), which removes a deleted or updated
    row's terms in place. Bulk deletes turn it off for the delete, then 'rebuild' the index
    from its content: faster than many in-place deletes, and a rebuilt index holds no trace of
    the deleted rows, neither in its segments nor as a term prefix in the %_idx b-tree (whose
    interior pages keep copies of keys deleted from the leaves; 'optimize' leaves those).
    Freed pages are zeroed by `pragma secure_delete`. An in-place delete leaves a key in %_idx
    too when a deleted term was the first on a leaf page (the key is its shortest distinguishing
    prefix, "ccj" for "ccjjxfnsi"): such a key that no remaining term starts with makes the
    index rebuilt as well. rowids: the rows deleted or rewritten. Call inside write().
    """
    bulk = len(rowids) > BULK_DELETE_ROWS
    terms = set() if bulk else _terms(conn, table, rowids)
    if bulk:
        conn.execute(f'insert into "{table}" ("{table}", rank) values (\'secure-delete\', 0)')
    try:
        yield
    finally:
        if bulk:
            conn.execute(f'insert into "{table}" ("{table}", rank) values (\'secure-delete\', 1)')
    if bulk or _prefix_left(conn, table, terms):
        conn.execute(f'insert into "{table}" ("{table}") values (\'rebuild\')')


# The tokenizer of every FTS table (schema.sql), to know which terms a row put in the index.
_TOKENIZER = ("porter", ["unicode61", "remove_diacritics", "2"])


def _terms(conn: apsw.Connection, table: str, rowids: Sequence[int]) -> set[str]:
    """The index terms of the rows, as FTS5 tokenized them."""
    tokenize = conn.fts5_tokenizer(*_TOKENIZER)
    terms: set[str] = set()
    for rowid in rowids:
        for value in conn.execute(f'select * from "{table}" where "rowid" = ?', (rowid,)).fetchone() or ():
            if isinstance(value, str) and value:
                terms.update(tokenize(value.encode("utf-8", "surrogatepass"), apsw.FTS5_TOKENIZE_DOCUMENT, None,
                                      include_offsets=False, include_colocated=False))
    return terms


def _prefix_left(conn: apsw.Connection, table: str, terms: set[str]) -> bool:
    """Whether %_idx keeps a key that is a prefix of a gone term and of no term still indexed."""
    if not terms:
        return False
    conn.execute(f'create virtual table if not exists temp."{table}_terms" using fts5vocab(main, "{table}", row)')
    segments = [r[0] for r in conn.execute(f'select distinct "segid" from "{table}_idx"')]
    for term in sorted(terms):
        key = b"0" + term.encode("utf-8", "surrogatepass")  # main-index keys start with "0"
        for segment in segments:  # the key of the leaf page the term was on, in each segment
            found = conn.execute(f'select "term" from "{table}_idx" where "segid" = ? and "term" <= ? '
                                 'order by "term" desc limit 1', (segment, key)).fetchone()
            prefix = bytes(found[0]) if found else b""
            if len(prefix) < 2 or not key.startswith(prefix):
                continue
            wanted = bytes(prefix)[1:]  # may end inside a character: compare bytes
            for (found,) in conn.execute(f'select "term" from temp."{table}_terms" where "term" >= ?',
                                         (wanted.decode("utf-8", "ignore"),)):
                found = found.encode("utf-8", "surrogatepass")
                if found >= wanted:  # the first term at or after the key: it starts with it, or none does
                    if not found.startswith(wanted):
                        return True
                    break
            else:
                return True
    return False


def _deleting(conn: apsw.Connection) -> bool:
    """What every delete does first: the high ids are remembered (a deleted id is never handed
    out again) and, when the file has vector tables, the vectors are marked changed, so that
    in-memory copies (index/copies.py) reload instead of appending. Whether it has them."""
    rows.remember_high_ids(conn)
    vectors = connection.has_vectors(conn)
    if vectors:
        connection.vectors_changed(conn)
    return vectors


def delete_atoms(conn: apsw.Connection, atom_ids: Sequence[int]) -> None:
    """Delete atoms with their FTS rows and vectors (sources and conflicts cascade). What they
    decided about other atoms goes too: an atom left with no conflict partner is plain active
    again, and an atom they had superseded holds again, or is superseded by their successor."""
    vectors = _deleting(conn)
    partners: set[int] = set()
    relinks = _relinks(conn, set(atom_ids))
    with scrubbed_fts(conn, "atoms_fts", atom_ids):
        for atom_id in atom_ids:
            partners.update(rows.conflict_partners(conn, atom_id))
            conn.execute('delete from "atoms_fts" where "rowid" = ?', (atom_id,))
            if vectors:
                conn.execute('delete from "atoms_vec" where "atom_id" = ?', (atom_id,))
            conn.execute('delete from "atoms" where "id" = ?', (atom_id,))
    for atom_id in sorted(partners - set(atom_ids)):
        alone = conn.execute(
            'select 1 from "atoms" a where a."id" = ?1 and a."status" = ?2 and not exists '
            '(select 1 from "atom_conflicts" c where ?1 in (c."atom_id", c."other_id"))',
            (atom_id, codec.STATUSES["conflicting"])).fetchone()
        if alone:
            rows.set_atom_status(conn, atom_id, "active")
    for older, successor, valid_to in relinks:
        conn.execute('update "atoms" set "superseded_by" = ?, "valid_to" = ? where "id" = ?',
                     (successor, valid_to, older))
        if successor is None:
            rows.set_atom_status(conn, older, "active")


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
    vectors = _deleting(conn)
    orphans: set[int] = set()
    with scrubbed_fts(conn, "turns_fts", turn_ids):
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
    with scrubbed_fts(conn, "atoms_fts", sorted(still_sourced)):
        for atom_id in still_sourced:
            rows.reindex_sources(conn, atom_id)
    delete_atoms(conn, sorted(orphans - still_sourced))


def forget_user(conn: apsw.Connection, user: str) -> None:
    """Delete everything held for user. Call inside write()."""
    delete_atoms(conn, [r[0] for r in conn.execute('select "id" from "atoms" where "user" = ?', (user,))])
    delete_turns(conn, [r[0] for r in conn.execute('select "id" from "turns" where "user" = ?', (user,))])
