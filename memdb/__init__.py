"""memdb: an embedded long-term memory for AI agents, in one SQLite file.

    import memdb
    with memdb.open("agent.db") as mem:
        mem.add([{"role": "user", "content": "We use PostgreSQL, no ORM."}], user="alice")
        print(mem.context("what database do we use?", user="alice", budget=400))

This module holds open() and the Memory object that wires the modules together: store (the
file), embed (vectors), extract (the local model), lifecycle (merge, supersede), search.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from . import codec, lifecycle, search as _search, store, text
from .errors import (
    EmbedderMismatch,
    EmbedderUnavailable,
    InvalidInput,
    MemdbError,
    ModelError,
    NotFound,
    SchemaError,
    SearchError,
)
from .cache import SearchCache
from .search import Hit
from .settings import Settings

__all__ = [
    "open", "Memory", "Hit", "Atom", "Settings", "MemdbError", "InvalidInput", "SchemaError",
    "EmbedderMismatch", "EmbedderUnavailable", "ModelError", "NotFound", "SearchError",
]
__version__ = "0.1.0"

log = logging.getLogger("memdb")
EXTRACT_MODES = ("now", "defer")


@dataclass
class Atom:
    """An L1 atom as read back from the file."""

    id: int
    user: str
    kind: str
    text: str
    record: dict
    confidence: float
    seen: int
    first_seen: str
    last_seen: str
    valid_from: str | None
    valid_to: str | None
    status: str
    superseded_by: int | None
    turn_ids: list[int]


def open(  # noqa: A001 - memdb.open mirrors sqlite3.connect / builtins.open on purpose
    path: str | os.PathLike = ":memory:",
    *,
    embedder: Any = "minilm",
    llm: str | None = None,
    extract: str = "now",
    threads: int | None = None,
    settings: Settings | None = None,
) -> "Memory":
    """Open (or create) a memdb file.

    embedder: "minilm" (default, bundled), a path to a GGUF embedding model, an object with
      name/dim/embed, or None for keyword-only search. If it cannot load, memdb logs it once
      and runs keyword-only; stats() reports it.
    llm: a path to an instruct GGUF for extraction (default: $MEMDB_LLM, else the bundled model).
    extract: "now" (add() extracts right away) or "defer" (add() only stores; call extract()).
    threads: CPU threads for the model and the embedder.
    """
    if extract not in EXTRACT_MODES:
        raise InvalidInput(f"extract must be one of {', '.join(EXTRACT_MODES)}, not {extract!r}")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise InvalidInput(f"threads must be a positive integer, not {threads!r}")
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidInput(f"path must be a str or os.PathLike, not {type(path).__name__}")
    try:
        conn = store.connect(os.fspath(path))
        try:
            return Memory(conn, os.fspath(path), embedder=embedder, llm=llm, extract=extract,
                          threads=threads, settings=settings or Settings())
        except BaseException:
            conn.close()
            raise
    except apsw.Error as exc:  # locked past the busy timeout, disk full, unreadable, ...
        raise MemdbError(f"cannot open {os.fspath(path)!r}: {exc}") from exc


def _file_errors(method: Callable) -> Callable:
    """Let no apsw error out of the public API: a damaged, locked-out or unreadable file raises
    MemdbError (the one family an agent loop catches), with SQLite's words and what to do."""

    def translate(mem: Memory, exc: apsw.Error) -> MemdbError:
        return MemdbError(f"{mem.path!r} could not be read or written ({type(exc).__name__}: {exc}); if this "
                          "persists, check the file with `pragma integrity_check` and restore it from a backup")

    if inspect.isgeneratorfunction(method):  # export(): errors surface while iterating
        @functools.wraps(method)
        def generator(self: Memory, *args: Any, **kwargs: Any) -> Iterator:
            try:
                yield from method(self, *args, **kwargs)
            except apsw.Error as exc:
                raise translate(self, exc) from exc
        return generator

    @functools.wraps(method)
    def wrapper(self: Memory, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except apsw.Error as exc:
            raise translate(self, exc) from exc
    return wrapper


class Memory:
    """One open memdb file. Safe to share between threads; one model call at a time."""

    def __init__(self, conn: apsw.Connection, path: str, *, embedder: Any, llm: str | None,
                 extract: str, threads: int | None, settings: Settings) -> None:
        self.conn = conn
        self.path = path
        self.settings = settings
        self.extract_mode = extract
        self.threads = threads
        self._llm_spec = llm or os.environ.get("MEMDB_LLM") or None
        self._llm: Any = None
        self._lock = threading.RLock()
        self._warned: set[str] = set()
        self.embedder, self.embedder_error = self._load_embedder(embedder)
        self.cache = SearchCache(
            vector_copy_min=settings.vector_copy_min, vector_copy_mb=settings.vector_copy_mb,
            blas_limit=functools.partial(_blas_threads, threads),
        )

    # ------------------------------------------------------------ setup

    def _load_embedder(self, spec: Any) -> tuple[Any, str | None]:
        if spec is None:
            return None, "no embedder (keyword-only by request)"
        try:
            if hasattr(spec, "embed"):  # an embedder object: use it as it is
                embedder = spec
            else:
                from . import embed

                embedder = embed.load(spec, threads=self.threads)
        except EmbedderUnavailable as exc:
            self._warn_once(f"memdb: embedder unavailable, running keyword-only: {exc}")
            return None, str(exc)
        store.ensure_vectors(self.conn, embedder.name, embedder.dim)
        return embedder, None

    def llm(self) -> Any:
        """The extraction model, loaded on first use (raises ModelError if it cannot load)."""
        with self._lock:
            if self._llm is None:
                from . import extract

                self._llm = extract.load_llm(self._llm_spec, threads=self.threads)
                with store.write(self.conn):
                    store.set_meta(self.conn, "llm_name", self._llm.name)
                    store.set_meta(self.conn, "llm_sha256", self._llm.sha256)
            return self._llm

    def _embed(self, texts: list[str]) -> np.ndarray | None:
        if self.embedder is None or not texts:
            return None
        try:
            return self.embedder.embed(texts)
        except Exception as exc:  # a broken embedder must not lose the user's words
            self._warn_once(f"memdb: embedding failed, storing without vectors: {exc}")
            return None

    # ------------------------------------------------------------ writing

    @_file_errors
    def add(self, messages: Any, *, user: str, session: str = "default",
            ts: Any = None) -> list[int]:
        """Store turns verbatim (one transaction) and, in extract="now" mode, extract atoms.

        Returns the L0 ids in order. Bad input raises InvalidInput and writes nothing;
        extraction problems never raise here (the turns stay pending or are marked failed).
        """
        store.check_name(user, "user")
        store.check_name(session, "session")
        default_ts = store.parse_ts(ts, "ts") if ts is not None else store.now()
        rows = store.check_messages(messages, default_ts)
        vectors = self._embed([store.turn_embedding_text(r["speaker"], r["content"]) for r in rows])
        with self._lock, store.write(self.conn):
            seq = store.next_seq(self.conn, user, session)
            ids = [
                store.insert_turn(self.conn, user=user, session=session, seq=seq + i, **row,
                                  vector=None if vectors is None else vectors[i])
                for i, row in enumerate(rows)
            ]
        if self.extract_mode == "now":
            try:
                self.extract(turn_ids=ids)
            except Exception as exc:  # the agent loop never crashes because of memdb
                self._warn_once(f"memdb: turns stay pending, extraction failed: {exc}")
        return ids

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.warning(message)

    @_file_errors
    def extract(self, *, user: str | None = None, turn_ids: list[int] | None = None,
                limit: int | None = None,
                progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
        """Extract atoms from pending turns (all, one user's, or the given ids), resumable.

        Returns counts: turns done/skipped/failed and atoms new/merged/superseded/conflicting.
        Raises ModelError if the model cannot load; bad model output never raises.
        """
        from . import pipeline

        if turn_ids is not None:
            turn_ids = _check_ids(turn_ids, "turn_ids")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            raise InvalidInput(f"limit must be a positive integer, not {limit!r}")
        return pipeline.run(self, user=user, turn_ids=turn_ids, limit=limit, progress=progress)

    @_file_errors
    def forget(self, *, user: str | None = None, atom_id: int | None = None,
               turn_id: int | None = None) -> dict[str, int]:
        """Delete a user's everything, one atom, or one turn with what derives only from it."""
        given = [x for x in (user, atom_id, turn_id) if x is not None]
        if len(given) != 1:
            raise InvalidInput("forget takes exactly one of user=, atom_id=, turn_id=")
        with self._lock, store.write(self.conn):
            before = self._counts()
            if user is not None:
                store.check_name(user, "user")
                turns = [r[0] for r in self.conn.execute('select "id" from "turns" where "user" = ?', (user,))]
                atoms = [r[0] for r in self.conn.execute('select "id" from "atoms" where "user" = ?', (user,))]
                store.delete_atoms(self.conn, atoms)
                store.delete_turns(self.conn, turns)
            elif atom_id is not None:
                self._require("atoms", atom_id)
                store.delete_atoms(self.conn, [atom_id])
            else:
                self._require("turns", turn_id)
                store.delete_turns(self.conn, [turn_id])
            after = self._counts()
        return {"turns": before[0] - after[0], "atoms": before[1] - after[1]}

    def _counts(self) -> tuple[int, int]:
        return self.conn.execute('select (select count(*) from "turns"), (select count(*) from "atoms")').fetchone()

    def _require(self, table: str, row_id: Any, user: str | None = None) -> None:
        if not isinstance(row_id, int) or isinstance(row_id, bool):
            raise InvalidInput(f"an id must be an integer, not {type(row_id).__name__}")
        sql = f'select 1 from "{table}" where "id" = ?' + (' and "user" = ?' if user is not None else "")
        args = (row_id, user) if user is not None else (row_id,)
        if self.conn.execute(sql, args).fetchone() is None:
            raise NotFound(f"no {table[:-1]} with id {row_id}" + (f" for user {user!r}" if user else ""))

    @_file_errors
    def reembed(self, embedder: Any = "minilm") -> int:
        """Rebuild every vector of the file with another embedder, in one transaction.

        L0 and atom text are untouched. Returns the number of vectors written.
        """
        from . import embed

        new = embed.load(embedder, threads=self.threads)
        turns = self.conn.execute(
            'select "id", "user", "speaker", "content" from "turns" order by "id"').fetchall()
        atoms = self.conn.execute('select "id", "user", "text", "status" from "atoms" order by "id"').fetchall()
        turn_vecs = new.embed([store.turn_embedding_text(r[2], r[3]) for r in turns])
        atom_vecs = new.embed([r[2] for r in atoms])
        with self._lock, store.write(self.conn):
            store.create_vectors(self.conn, new.name, new.dim)
            self.conn.executemany(
                'insert into "turns_vec" ("turn_id", "user", "embedding") values (?, ?, ?)',
                [(r[0], r[1], store.as_blob(v)) for r, v in zip(turns, turn_vecs)],
            )
            self.conn.executemany(
                'insert into "atoms_vec" ("atom_id", "user", "active", "embedding") values (?, ?, ?, ?)',
                [(r[0], r[1], int(r[3] != codec.STATUSES["superseded"]), store.as_blob(v))
                 for r, v in zip(atoms, atom_vecs)],
            )
        self.embedder, self.embedder_error = new, None
        return len(turns) + len(atoms)

    # ------------------------------------------------------------ reading

    @_file_errors
    def search(self, query: str, *, user: str, k: int = 10, layer: str = "both",
               session: str | None = None, fusion: str | None = None, alpha: float | None = None,
               include_superseded: bool = False, strict: bool = False) -> list[Hit]:
        """The k hits that matter for query, fused from keywords and vectors.

        Never raises for a failing index unless strict=True: without vectors it searches by
        keyword (one warning), and if both sides fail it returns [] and logs an error.
        """
        self._check_search_args(query, user, k, layer, fusion, alpha)
        if session is not None:  # bound into SQL below: a lone surrogate would raise there
            store.check_name(session, "session")
        qvec = self._query_vector(query, user, session)
        args = dict(user=user, k=k, layer=layer, settings=self.settings, fusion=fusion,
                    alpha=alpha, include_superseded=include_superseded, cache=self.cache)
        with self._lock:
            try:
                return _search.search(self.conn, query, query_vector=qvec, **args)
            except apsw.Error as exc:
                if strict:
                    raise SearchError(f"search failed: {exc}") from exc
                if qvec is None:
                    log.error("memdb: search failed, returning nothing: %s", exc)
                    return []
                log.warning("memdb: vector search failed, using keywords only: %s", exc)
            try:
                return _search.search(self.conn, query, query_vector=None, **args)
            except apsw.Error as exc:
                log.error("memdb: keyword search failed too, returning nothing: %s", exc)
                return []

    def _check_search_args(self, query: Any, user: Any, k: Any, layer: Any, fusion: Any, alpha: Any) -> None:
        if not isinstance(query, str):
            raise InvalidInput(f"query must be a string, not {type(query).__name__}")
        store.check_name(user, "user")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 1000:
            raise InvalidInput(f"k must be an integer from 1 to 1000, not {k!r}")
        if layer not in _search.LAYERS:
            raise InvalidInput(f"layer must be one of {', '.join(_search.LAYERS)}, not {layer!r}")
        if fusion is not None and fusion not in _search.FUSIONS:
            raise InvalidInput(f"fusion must be one of {', '.join(_search.FUSIONS)}, not {fusion!r}")
        if alpha is not None and not (isinstance(alpha, (int, float)) and 0 <= alpha <= 1):
            raise InvalidInput(f"alpha must be a number from 0 to 1, not {alpha!r}")

    def _query_vector(self, query: str, user: str, session: str | None) -> np.ndarray | None:
        # Working memory: the session's last turns nudge the query vector toward the topic.
        texts = [query[:2000]]
        if session is not None:
            texts += [r[0] for r in self.conn.execute(
                'select "content" from "turns" where "user" = ? and "session" = ? '
                'order by "seq" desc limit 3', (user, session))]
        vectors = self._embed(texts)
        if vectors is None:
            return None
        vector = vectors[0] + 0.25 * vectors[1:].sum(axis=0) / max(1, len(texts) - 1)
        return (vector / (np.linalg.norm(vector) or 1.0)).astype(np.float32)

    @_file_errors
    def context(self, query: str, *, user: str, budget: int = 400, k: int = 20,
                session: str | None = None, layer: str = "both") -> str:
        """A prompt-ready block: the best hits as dated lines under budget tokens."""
        if not isinstance(budget, int) or budget < 1:
            raise InvalidInput(f"budget must be a positive integer, not {budget!r}")
        hits = self.search(query, user=user, k=k, layer=layer, session=session)
        with self._lock:
            return _search.context(
                hits, lambda h: _search.related_atoms(self.conn, h),
                budget=budget, count_tokens=self.count_tokens,
            )

    def count_tokens(self, line: str) -> int:
        """Tokens of line with the extraction model's tokenizer (an estimate if unavailable)."""
        try:
            from . import extract

            return extract.count_tokens(self._llm_spec, line)
        except Exception:  # no model: an estimate still keeps the budget roughly right
            return text.approx_tokens(line)

    @_file_errors
    def get(self, atom_id: int, *, user: str | None = None) -> Atom:
        """One atom (any status); with user=, only if it belongs to that user."""
        self._require("atoms", atom_id, user)
        return self._atoms('where a."id" = ?', (atom_id,))[0]

    @_file_errors
    def history(self, atom_id: int, *, user: str | None = None) -> list[Atom]:
        """The chain of versions an atom belongs to, oldest first: what it was, what replaced it."""
        self._require("atoms", atom_id, user)
        return self._atoms(
            'where a."id" in (select "id" from chain) order by a."first_seen", a."id"', (atom_id,),
            prefix=lifecycle.CHAIN_CTE,
        )

    @_file_errors
    def profile(self, user: str) -> list[Atom]:
        """The attribute card: active facts, preferences and constraints, grouped by subject and key."""
        store.check_name(user, "user")
        atoms = self._atoms('where a."user" = ? and a."status" in (0, 2) and a."kind" != 3', (user,))
        return sorted(atoms, key=lambda a: (a.kind, a.record.get("subject", ""),
                                            a.record.get("predicate", ""), a.first_seen))

    @_file_errors
    def events(self, user: str, *, since: Any = None, until: Any = None) -> list[Atom]:
        """The event index: active events in time order, with resolved dates."""
        store.check_name(user, "user")
        since = store.parse_ts(since, "since")[:10] if since is not None else "0000"
        until = store.parse_ts(until, "until") if until is not None else "9999"
        return self._atoms(
            'where a."user" = ? and a."kind" = 3 and a."status" in (0, 2) '
            'and a."valid_from" >= ? and a."valid_from" <= ? order by a."valid_from", a."id"',
            (user, since, until),
        )

    def _atoms(self, where: str, args: tuple, prefix: str = "") -> list[Atom]:
        sql = (
            f'{prefix} select a."id", a."user", a."kind", a."text", a."record", a."confidence", '
            'a."seen", a."first_seen", a."last_seen", a."valid_from", a."valid_to", a."status", '
            'a."superseded_by", (select group_concat(s."turn_id") from "atom_sources" s '
            f'where s."atom_id" = a."id") from "atoms" a {where}'
        )
        with self._lock:
            rows = self.conn.execute(sql, args).fetchall()
        return [
            Atom(id=r[0], user=r[1], kind=codec.KIND_NAMES[r[2]], text=r[3], record=codec.unpack(r[4]),
                 confidence=r[5], seen=r[6], first_seen=r[7], last_seen=r[8], valid_from=r[9],
                 valid_to=r[10], status=codec.STATUS_NAMES[r[11]], superseded_by=r[12],
                 turn_ids=sorted(int(t) for t in r[13].split(",")) if r[13] else [])
            for r in rows
        ]

    @_file_errors
    def turns(self, turn_ids: list[int], *, user: str | None = None) -> list[dict]:
        """L0 rows by id (the evidence behind a hit), in id order."""
        turn_ids = _check_ids(turn_ids, "turn_ids")
        if user is not None:  # user="" must not mean "every user"
            store.check_name(user, "user")
        marks = ",".join("?" * len(turn_ids))
        sql = ('select "id", "user", "session", "seq", "role", "speaker", "content", "ts", "state", "reason" '
               f'from "turns" where "id" in ({marks})' + (' and "user" = ?' if user is not None else "") + ' order by "id"')
        args = (*turn_ids, user) if user is not None else tuple(turn_ids)
        with self._lock:
            rows = self.conn.execute(sql, args).fetchall()
        keys = ("id", "user", "session", "seq", "role", "speaker", "content", "ts", "state", "reason")
        out = [dict(zip(keys, r)) for r in rows]
        for row in out:
            row["role"], row["state"] = codec.ROLE_NAMES[row["role"]], codec.STATE_NAMES[row["state"]]
        return out

    @_file_errors
    def export(self, user: str) -> Iterator[dict]:
        """Everything held for user as JSON-ready dicts: turns first, then atoms."""
        store.check_name(user, "user")
        ids = [r[0] for r in self.conn.execute('select "id" from "turns" where "user" = ? order by "id"', (user,))]
        for i in range(0, len(ids), 500):
            for row in self.turns(ids[i:i + 500], user=user):
                yield {"type": "turn", **row}
        for atom in self._atoms('where a."user" = ? order by a."id"', (user,)):
            yield {"type": "atom", **atom.__dict__}

    @_file_errors
    def stats(self, user: str | None = None) -> dict[str, Any]:
        """Counts, sizes and token figures (for one user, or the whole file)."""
        if user is not None:
            store.check_name(user, "user")
        where, args = ('where "user" = ?', (user,)) if user is not None else ("", ())
        with self._lock:
            turns = dict(self.conn.execute(f'select "state", count(*) from "turns" {where} group by 1', args).fetchall())
            atoms = dict(self.conn.execute(f'select "status", count(*) from "atoms" {where} group by 1', args).fetchall())
            chars = self.conn.execute(
                f'select (select coalesce(sum(length("content")), 0) from "turns" {where}), '
                f'(select coalesce(sum(length("text")), 0) from "atoms" {where.replace("where", "where status != 1 and")})',
                args * 2,
            ).fetchone()
            users = self.conn.execute('select count(distinct "user") from "turns"').fetchone()[0]
            pages = self.conn.execute("pragma page_count").fetchone()[0] * self.conn.execute("pragma page_size").fetchone()[0]
        return {
            "path": self.path,
            "users": users if user is None else 1,
            "turns": sum(turns.values()),
            "turns_by_state": {codec.STATE_NAMES[s]: n for s, n in sorted(turns.items())},
            "atoms": sum(atoms.values()),
            "atoms_by_status": {codec.STATUS_NAMES[s]: n for s, n in sorted(atoms.items())},
            "turn_chars": chars[0],
            "active_atom_chars": chars[1],
            "file_bytes": pages,
            "embedder": self.embedder.name if self.embedder else None,
            "keyword_only": self.embedder is None,
            "embedder_error": self.embedder_error,
            "llm": store.get_meta(self.conn, "llm_name"),
            "extract_mode": self.extract_mode,
        }

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<memdb.Memory {self.path!r}>"


def _check_ids(ids: Any, field: str) -> list[int]:
    # A str is iterable and would be read as one id per character; a None or a dict would
    # reach SQLite as a binding it cannot take.
    if not isinstance(ids, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InvalidInput(f"{field} must be a list of integer ids, not {str(ids)[:60]!r}")
    return list(ids)



def _blas_threads(threads: int | None) -> Any:
    # The embedder's module holds the BLAS thread limiter; it is imported only when a limit is set.
    if threads is None:
        return contextlib.nullcontext()
    from .embed import blas_threads

    return blas_threads(threads)
