"""The Memory facade: one open memdb file. It checks arguments, holds the lock, loads the models
lazily, and turns every SQLite error into MemdbError; the work itself is done by the modules
behind it, in the order data flows (ingest → extraction → lifecycle → search)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date, datetime
from typing import Any, Literal, TypeVar, cast

import apsw
import numpy as np

from . import privacy, text
from .checks import MAX_ID, check_count, check_id, check_ids, check_name, now, parse_ts
from .db import connection, forget as forgetting, layers, rows
from .db.layers import Scenario
from .db.rows import Atom, Hit
from .errors import EmbedderUnavailable, InvalidInput, MemdbError, NotFound, SearchError
from .index import copyfiles, vectors
from .index.copies import VectorCopies
from .index.keywords import KeywordCopies
from .index.fts import TermCounts
from .ingest import check_messages, embed_turns, insert_turns
from .lifecycle import persona as personas, scenarios as placing
from .models.protocols import LLM, Embedder
from .search import context as contexts, relevance, scenarios as scenario_search
from .search.fusion import LAYERS, Engine, Query, search as fused_search
from .settings import FUSIONS, Settings
from .vecmath import unit

log = logging.getLogger("memdb")
EXTRACT_MODES = ("now", "defer")
DEFAULT_EMBEDDER = "auto"  # the file's own embedder, else the bundled default
# A query is searched by at most its first this many characters: the cost of the keyword side
# grows with the query's terms (a 10 MB query took ~50 s), and the embedder reads 2,000 anyway.
MAX_QUERY_CHARS = 4_000

# The public API's argument types (checked again at run time: callers need not type-check).
Message = Mapping[str, Any]  # {"role", "content", "name"?, "ts"?}
TimeLike = str | date  # ISO 8601 text, a date or a datetime (aware times are stored in UTC)
EmbedderSpec = str | os.PathLike[str] | Embedder | None
LLMSpec = str | os.PathLike[str] | LLM | None
Layer = Literal["atoms", "turns", "both", "scenarios"]
Fusion = Literal["weighted", "rrf"]
Method = TypeVar("Method", bound=Callable[..., Any])


def open(  # noqa: A001 - memdb.open mirrors sqlite3.connect / builtins.open on purpose
    path: str | os.PathLike[str] = ":memory:",
    *,
    user: str | None = None,
    embedder: EmbedderSpec = DEFAULT_EMBEDDER,
    llm: LLMSpec = None,
    extract: Literal["now", "defer"] = "now",
    threads: int | None = None,
    settings: Settings | None = None,
    read_only: bool = False,
) -> Memory:
    """Open (or create) a memdb file.

    user: bind the Memory to one user: every call reads and writes that user's rows unless it
      names another with user=. Without it, calls that address rows by id (get, history, turns,
      forget(atom_id=/turn_id=)) and per-user calls need user=.
    embedder: "auto" (the embedder the file records, else the default multilingual-e5-small),
      "default", "minilm" (English only), a path to a GGUF embedding model, an object with
      name/dim/embed, or None for keyword-only search. If it cannot load, memdb logs it once
      and runs keyword-only; stats() reports it. One other than the file records is refused
      (EmbedderMismatch): reembed() moves a file to another embedder.
    llm: the extraction model: a path to an instruct GGUF, the URL of an OpenAI-compatible
      server (llama-server, Ollama's /v1, LM Studio), an object with the LLM protocol
      (memdb.models.protocols.LLM), or None for $MEMDB_LLM, else the bundled model.
    extract: "now" (add() extracts right away) or "defer" (add() only stores; call extract()).
    threads: CPU threads for the model and the embedder.
    read_only: open an existing file without writing to it, nor creating its -wal or -shm (a
      file on a read-only disk is read as it is, immutable): searched with the embedder it
      records, or by keywords if it records none; calls that write raise MemdbError.
    """
    if extract not in EXTRACT_MODES:
        raise InvalidInput(f"extract must be one of {', '.join(EXTRACT_MODES)}, not {extract!r}")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise InvalidInput(f"threads must be a positive integer, not {threads!r}")
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidInput(f"path must be a str or os.PathLike, not {type(path).__name__}")
    if not os.fspath(path):  # SQLite reads "" as a temporary file, deleted with every turn at close
        raise InvalidInput('path is empty; give a file path, or ":memory:" for a memory that ends at close')
    if user is not None:
        check_name(user, "user")
    if settings is not None and not isinstance(settings, Settings):  # "fast", a dict: no presets exist
        raise InvalidInput(f"settings must be a memdb.Settings, not {type(settings).__name__} "
                           "(e.g. memdb.Settings(extract_batch=8))")
    if llm is not None and not isinstance(llm, (str, os.PathLike)) and not hasattr(llm, "complete"):
        raise InvalidInput(f"llm must be a GGUF path or an object with complete(), not {type(llm).__name__}")
    if not isinstance(read_only, bool):
        raise InvalidInput(f"read_only must be True or False, not {read_only!r}")
    if not read_only and _on_read_only_disk(os.fspath(path)):  # it could not be opened any other way
        log.warning("memdb: %s is on a read-only file system: opened read-only", os.fspath(path))
        read_only = True
    try:
        conn = connection.connect(os.fspath(path), read_only=read_only)
        try:
            return Memory(conn, os.fspath(path), user=user, embedder=embedder, llm=llm, extract=extract,
                          threads=threads, settings=settings or Settings(), read_only=read_only)
        except BaseException:
            conn.close()
            raise
    except apsw.Error as exc:  # locked past the busy timeout, disk full, unreadable, ...
        raise file_error(os.fspath(path), exc) from exc


# What each SQLite failure means for the caller, and what to do about it.
_ADVICE: list[tuple[tuple[type[apsw.Error], ...], str]] = [
    ((apsw.BusyError, apsw.LockedError),
     "is locked by another connection or process for longer than the busy timeout (30 s); retry later, "
     "or find the program holding it"),
    ((apsw.FullError,), "cannot grow: the disk (or the file size limit) is full; free space and retry"),
    ((apsw.ReadOnlyError,), "is read-only; give this process write permission on the file, its directory "
                            "and its -wal and -shm files, or open a copy"),
    ((apsw.CantOpenError, apsw.PermissionsError, apsw.AuthError), "cannot be opened; check the path and its permissions"),
    ((apsw.IOError,), "could not be read or written by the operating system (a disk or filesystem error); "
                      "check the disk, then retry"),
    ((apsw.CorruptError, apsw.NotADBError), "is damaged; check it with `pragma integrity_check` and restore it "
                                            "from a backup"),
    ((apsw.TooBigError,), "was asked for more than SQLite takes in one statement; pass fewer ids or shorter text"),
]


def _on_read_only_disk(path: str) -> bool:
    """Whether path is an existing file on a file system mounted read-only."""
    if path == ":memory:" or path.startswith("file:") or not os.path.isfile(path):
        return False
    try:
        return bool(os.statvfs(os.path.dirname(os.path.abspath(path))).f_flag & os.ST_RDONLY)
    except (AttributeError, OSError):  # no statvfs (Windows)
        return False


def file_error(path: str, exc: apsw.Error) -> MemdbError:
    """The MemdbError for an SQLite failure: what is wrong with the file, and what to do."""
    advice = next((words for kinds, words in _ADVICE if isinstance(exc, kinds)), "could not be read or written")
    return MemdbError(f"{path!r} {advice} ({type(exc).__name__}: {exc}); nothing of this call was written")


def _file_errors(method: Method) -> Method:
    """Let no apsw error out of the public API: a damaged, locked-out or unreadable file raises
    MemdbError (the one family an agent loop catches), with what is wrong and what to do."""

    def translate(mem: Memory, exc: apsw.Error) -> MemdbError:
        return file_error(mem.path, exc)

    if inspect.isgeneratorfunction(method):  # export(): errors surface while iterating
        @functools.wraps(method)
        def generator(self: Memory, *args: Any, **kwargs: Any) -> Iterator:
            self._check_open()
            try:
                yield from method(self, *args, **kwargs)
            except apsw.Error as exc:
                raise translate(self, exc) from exc
        return cast(Method, generator)

    @functools.wraps(method)
    def wrapper(self: Memory, *args: Any, **kwargs: Any) -> Any:
        self._check_open()
        try:
            return method(self, *args, **kwargs)
        except apsw.Error as exc:
            raise translate(self, exc) from exc
    return cast(Method, wrapper)


class Memory:
    """One open memdb file. Safe to share between threads; one model call at a time, and reads
    never wait for it (the model runs outside the connection's lock)."""

    def __init__(self, conn: apsw.Connection, path: str, *, embedder: EmbedderSpec, llm: LLMSpec,
                 extract: str, threads: int | None, settings: Settings, user: str | None = None,
                 read_only: bool = False) -> None:
        self.conn = conn
        self.path = path
        self.read_only = read_only
        self.copy_files = copyfiles.directory(path)  # where copy files live, if any were written
        self.user = user
        self.closed = False
        self.settings = settings
        self.extract_mode = extract
        self.threads = threads
        given = llm if hasattr(llm, "complete") else None
        self._llm_spec = None if given else (os.fspath(llm) if llm else os.environ.get("MEMDB_LLM") or None)
        self._llm: Any = given
        self._llm_recorded = False
        self._lock = threading.RLock()  # the connection and the in-memory copies; never held over a model call
        self._llm_lock = threading.Lock()  # making the model
        self._model_lock = threading.Lock()  # one model call at a time per Memory
        self._warned: set[str] = set()
        self.embedder, self.embedder_error = self._load_embedder(embedder)
        self.copies = VectorCopies(
            vector_copy_min=settings.vector_copy_min, vector_copy_mb=settings.vector_copy_mb,
            blas_limit=functools.partial(_blas_threads, threads),
            files=self.copy_files if settings.vector_copy_files and not read_only else None,
            file_min=settings.vector_copy_file_min,
        )
        self.term_counts = TermCounts(growth=settings.term_counts_growth)
        self.keywords = KeywordCopies(
            keyword_copy_min=settings.keyword_copy_min, keyword_copy_mb=settings.keyword_copy_mb,
            shared=settings.keyword_copy_shared,
            atom_columns=settings.atom_columns, turn_columns=settings.turn_columns,
            background_rows=settings.keyword_copy_background,
            # A second connection needs a file on disk (copy_files is None for :memory: and URIs).
            opener=functools.partial(connection.connect, path, read_only=True) if self.copy_files else None,
        )

    # ------------------------------------------------------------ setup

    def _load_embedder(self, spec: Any) -> tuple[Any, str | None]:
        if spec is None:
            return None, "no embedder (keyword-only by request)"
        try:
            if hasattr(spec, "embed"):  # an embedder object: use it as it is
                embedder = spec
            else:
                from .models import embedders

                name = spec
                if spec == DEFAULT_EMBEDDER:  # the file's own embedder keeps its vectors meaningful
                    name = connection.get_meta(self.conn, "embedder_name")
                    if name is None and self.read_only:  # no vectors to search, none to be written
                        return None, "keyword-only: the file holds no vectors (opened read-only)"
                    name = name or embedders.DEFAULT
                embedder = embedders.load(name, threads=self.threads)
        except EmbedderUnavailable as exc:
            if spec != DEFAULT_EMBEDDER:  # asked for by name: running without it would be a surprise
                raise
            self._warn_once(f"memdb: embedder unavailable, running keyword-only: {exc}")
            return None, str(exc)
        if self.read_only:
            if not connection.vectors_held(self.conn, embedder.name, embedder.dim):
                return None, f"keyword-only: the file holds no vectors of {embedder.name!r} (opened read-only)"
            return embedder, None
        connection.ensure_vectors(self.conn, embedder.name, embedder.dim)
        return embedder, None

    def llm(self) -> LLM:
        """The extraction model, loaded on first use (raises ModelError if it cannot load).
        Started outside the Memory's lock: reads never wait for a model to start or load."""
        with self._llm_lock:
            if self._llm is None:
                self._llm = self._make_llm()
            # A read-only open writes nothing: the model is recorded by the next writer.
            if not self._llm_recorded and not self.read_only:  # a model given as an object is recorded too (memdb stats: llm)
                name, digest = self._llm.name, self._llm.sha256  # a worker starts here and verifies the file
                with self._lock, connection.write(self.conn):
                    connection.set_meta(self.conn, "llm_name", name)
                    connection.set_meta(self.conn, "llm_sha256", digest)
                self._llm_recorded = True
            return self._llm

    def _make_llm(self) -> LLM:
        """The model open() named: an endpoint for a URL, else a GGUF (the bundled one by
        default) in a worker process of its own (Settings.model_worker)."""
        from .models import endpoint, llama, worker

        spec = self._llm_spec
        if spec and spec.startswith(("http://", "https://")):  # an OpenAI-compatible server
            return endpoint.EndpointLLM(spec, model=os.environ.get("MEMDB_LLM_MODEL") or None)
        extra = self.settings.model_extra_buffers
        local = llama.load_llm(spec, threads=self.threads, extra_bufts=extra)  # cheap: checks the file is there
        if not self.settings.model_worker:
            return local
        return worker.shared(("llama", spec, local.threads, extra),
                             functools.partial(llama.load_llm, spec, threads=local.threads, extra_bufts=extra),
                             timeout=self.settings.model_timeout, label=local.name)

    def _embed(self, texts: list[str], *, query: bool = False) -> np.ndarray | None:
        if self.embedder is None or not texts:
            return None
        try:
            if query:
                from .models import embedders

                return embedders.query_vectors(self.embedder, texts)
            return self.embedder.embed(texts)
        except Exception as exc:  # a broken embedder must not lose the user's words
            self._warn_once(f"memdb: embedding failed, storing without vectors: {exc}")
            return None

    def _embed_atoms(self, lines: list[str]) -> np.ndarray | None:
        """An extraction batch's atom lines, embedded. Their vectors are handed to the copies
        (expect), which rank them all against a large user's vectors in one pass when dedup
        asks for their neighbours one by one; a vector not expected is ranked alone."""
        found = self._embed(lines)
        if found is not None:
            with self._lock:
                self.copies.expect(found)
        return found

    def _embedder_moved(self) -> bool:
        """Whether the file now records another embedder than this Memory's: another connection
        reembedded it. Vectors made with ours would sit beside the new model's, meaning nothing."""
        return self.embedder is not None and connection.get_meta(self.conn, "embedder_name") != self.embedder.name

    def _follow_embedder(self) -> None:
        """After a reembed by another connection, use the embedder the file records now (or none,
        if it cannot load: keyword-only, and its writers fill the vectors in)."""
        with self._lock:
            if not self._embedder_moved():
                return
            moved_to = connection.get_meta(self.conn, "embedder_name")
            self._warn_once(f"memdb: {self.path} was moved to the embedder {moved_to!r} by another connection; "
                            f"following it")
            self.embedder, self.embedder_error = None, f"the file moved to {moved_to!r}"
            if moved_to is not None:
                try:
                    self.embedder, self.embedder_error = self._load_embedder(DEFAULT_EMBEDDER)
                except MemdbError as exc:
                    self.embedder_error = str(exc)

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.warning(message)

    # ------------------------------------------------------------ writing

    @_file_errors
    def add(self, messages: Sequence[Message], *, user: str | None = None, session: str = "default",
            ts: TimeLike | None = None) -> list[int]:
        """Store turns verbatim (one transaction) and, in extract="now" mode, extract atoms.

        Returns the L0 ids in order, one per stored message (OpenAI-style messages are accepted;
        ingest.check_messages says which are skipped). Bad input raises InvalidInput and writes nothing;
        extraction problems never raise here (the turns stay pending or are marked failed).
        """
        self._check_writable()
        user = self._who(user)
        check_name(session, "session")
        default_ts = parse_ts(ts, "ts") if ts is not None else now()
        turns = check_messages(messages, default_ts)
        if not turns:  # every message was skipped (an image alone): nothing to store
            return []
        self._follow_embedder()
        vectors_ = embed_turns(turns, self._embed)
        with self._lock, connection.write(self.conn):
            if self._embedder_moved():  # reembedded by another connection while these were embedded
                vectors_ = None
            ids = insert_turns(self.conn, user=user, session=session, turns=turns, vectors=vectors_)
        self._backfill()
        if self.extract_mode == "now":
            try:
                self.extract(user=user, turn_ids=ids)
            except Exception as exc:  # the agent loop never crashes because of memdb
                self._warn_once(f"memdb: turns stay pending, extraction failed: {exc}")
        return ids

    @_file_errors
    def extract(self, *, user: str | None = None, turn_ids: list[int] | None = None,
                limit: int | None = None,
                progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
        """Extract atoms from pending turns (all, one user's, or the given ids), resumable.

        Returns counts: turns done/skipped/failed and atoms new/merged/superseded/conflicting
        (and withheld: candidates privacy.py kept out, a credential or a forged instruction).
        Raises ModelError if the model cannot load; bad model output never raises.
        """
        self._check_writable()
        user = self._who(user) if user is not None or self.user is not None else None
        if turn_ids is not None:
            turn_ids = check_ids(turn_ids, "turn_ids")
        if limit is not None:
            check_count(limit, "limit", most=MAX_ID)  # bound into SQL: a larger one overflows 64 bits
        self._follow_embedder()
        # Imported here: a process that only searches (the CLI) never needs extraction, and
        # its modules compile a hundred patterns at import (bench/cli_latency.py).
        from .extraction import pipeline

        needs = pipeline.Needs(conn=self.conn, lock=self._lock, settings=self.settings, llm=self.llm,
                               embed=self._embed_atoms, absorb=self._absorb,
                               before_batch=lambda u: self.copies.sync(self.conn, "atoms", u),
                               model_lock=self._model_lock)
        counts = pipeline.run(needs, user=user, turn_ids=turn_ids, limit=limit, progress=progress)
        self._backfill()
        return counts

    def _backfill(self) -> None:
        """Embed up to settings.vector_backfill turns and atoms that were stored without a vector
        (by a keyword-only writer, or while the embedder failed), so search finds them by meaning."""
        budget = self.settings.vector_backfill
        if self.embedder is None or not budget or self.read_only:
            return
        with self._lock:
            if connection.get_meta(self.conn, "vectors_missing") != "1" or not connection.has_vectors(self.conn):
                return
        filled_all = True
        for table in ("turns", "atoms"):
            with self._lock:
                todo = rows.missing_vectors(self.conn, table, budget)
            filled_all = filled_all and len(todo) < budget
            if not todo:
                continue
            found = self._embed([line for _, _, line in todo])
            if found is None:
                return
            with self._lock, connection.write(self.conn):
                if self._embedder_moved():
                    return
                # Look again under the write lock: another writer may have filled or forgotten some.
                still = {row[0] for row in rows.missing_vectors(self.conn, table, budget)}
                for (row_id, user, _), vector in zip(todo, found):
                    if row_id in still:
                        rows.add_vector(self.conn, table, row_id, user, vector)
        if filled_all:
            with self._lock, connection.write(self.conn):
                if not any(rows.missing_vectors(self.conn, t, 1) for t in ("turns", "atoms")):
                    connection.set_meta(self.conn, "vectors_missing", "0")

    def _absorb(self, candidate: Any, user: str, ts: str, vector: np.ndarray | None) -> str:
        """Absorb one extracted candidate (extraction.records.Candidate) into the user's atoms."""
        from .lifecycle.absorb import absorb

        if self._withheld(candidate):
            return "withheld"
        if vector is not None and self._embedder_moved():
            vector = None  # the file moved to another embedder since it was made: the next writer fills it
        action, _ = absorb(self.conn, user=user, record=candidate.record, confidence=candidate.confidence,
                           turn_ids=candidate.turn_ids, ts=ts, vector=vector, settings=self.settings,
                           copies=self.copies, term_counts=self.term_counts,
                           multilingual=getattr(self.embedder, "multilingual", True),
                           cosine_baseline=self._baseline())
        return action

    def _withheld(self, candidate: Any) -> bool:
        """Whether a candidate must not become an atom, whatever extraction made of it: it names a
        credential, or a source turn forges a role marker or tells the memory what to store (an
        instruction inside a turn is its speaker's claim at most). The boundary filter of
        privacy.py; called inside the batch's transaction."""
        said = " ".join(str(candidate.record.get(k) or "") for k in ("subject", "predicate", "object", "outcome", "domain"))
        if privacy.names_secret(said):
            return True
        sources = self.conn.execute('select "content" from "turns" where "id" in (select "value" from json_each(?))',
                                    (json.dumps(list(candidate.turn_ids)),)).fetchall()
        return any(privacy.forges_role(content) for content, in sources)

    def _baseline(self) -> float:
        return getattr(self.embedder, "cosine_baseline", 0.0) if self.embedder is not None else 0.0

    @_file_errors
    def forget(self, *, user: str | None = None, atom_id: int | None = None,
               turn_id: int | None = None) -> dict[str, int]:
        """Delete a user's everything (user=), or one of the user's atoms or turns with what
        derives only from it (atom_id= or turn_id=, scoped to user= or the bound user)."""
        self._check_writable()
        if (atom_id is not None) + (turn_id is not None) > 1 or (atom_id is None and turn_id is None and user is None):
            raise InvalidInput("forget takes user= alone (everything of that user), or atom_id= or turn_id= "
                               "with the user they belong to")
        user = self._who(user)
        with self._lock, connection.write(self.conn):
            before = rows.counts(self.conn)
            if atom_id is not None:
                self._require("atoms", atom_id, user)
                forgetting.delete_atoms(self.conn, [atom_id])
            elif turn_id is not None:
                self._require("turns", turn_id, user)
                forgetting.delete_turns(self.conn, [turn_id])
            else:
                forgetting.forget_user(self.conn, user)
                layers.forget_user(self.conn, user)
            self._rewrite_layers(user)
            after = rows.counts(self.conn)
        # After the commit, and whatever the settings: a copy file another process wrote
        # holds the user's vectors too (index/copyfiles.py).
        copyfiles.remove_user(self.copy_files, user)
        return {"turns": before[0] - after[0], "atoms": before[1] - after[1]}

    def _rewrite_layers(self, user: str) -> None:
        """After a forget: scenarios that lost members are rewritten from the members left (or
        deleted), and the persona card re-ranked, so no forgotten word stays in either."""
        for scenario_id in layers.stale(self.conn, user):
            layers.refresh(self.conn, scenario_id, self.settings)
        personas.update(self.conn, user, self.settings)

    def _who(self, user: Any) -> str:
        """The user a call is for: the one given, else the one the Memory is bound to."""
        if user is None:
            user = self.user
        if user is None:
            raise InvalidInput("user= is required: name the user whose rows these are "
                               "(or bind the Memory to one with memdb.open(path, user=...))")
        return check_name(user, "user")

    def _require(self, table: str, row_id: Any, user: str) -> None:
        check_id(row_id, f"{table[:-1]} id")
        if not rows.exists(self.conn, table, row_id, user):
            raise NotFound(f"no {table[:-1]} with id {row_id} for user {user!r}")

    @_file_errors
    def reembed(self, embedder: EmbedderSpec = "default") -> int:
        """Rebuild every vector of the file with another embedder, in one transaction.

        L0 and atom text are untouched. Returns the number of vectors written.
        """
        self._check_writable()
        from .models import embedders

        new = embedders.load(embedder, threads=self.threads)
        with self._lock:
            written = vectors.rebuild(self.conn, new.name, new.dim, new.embed)
            with connection.write(self.conn):  # centroids are means of the old vectors
                for (scenario_id,) in self.conn.execute('select "id" from "scenarios"').fetchall():
                    layers.refresh(self.conn, scenario_id, self.settings)
            copyfiles.remove_all(self.copy_files)  # the old embedder's vectors
        self.embedder, self.embedder_error = new, None
        return written

    # ------------------------------------------------------------ reading

    @_file_errors
    def search(self, query: str, *, user: str | None = None, k: int = 10, layer: Layer = "both",
               session: str | None = None, fusion: Fusion | None = None, alpha: float | None = None,
               include_superseded: bool = False, strict: bool = False) -> list[Hit]:
        """The k hits that matter for query, fused from keywords and vectors. layer="scenarios"
        returns the user's scenarios the query hits (their members' atom hits summed), each as
        a hit whose text is its title and state line.

        Never raises for a failing index unless strict=True: without vectors it searches by
        keyword (one warning), and if both sides fail it returns [] and logs an error.
        """
        user = self._who(user)
        self._check_search_args(query, user, k, layer, fusion, alpha)
        if len(query) > MAX_QUERY_CHARS:  # a pasted document: its opening says what it is about
            self._warn_once(f"memdb: a query of more than {MAX_QUERY_CHARS} characters is searched by its first "
                            f"{MAX_QUERY_CHARS}")
            query = query[:MAX_QUERY_CHARS]
        if session is not None:  # bound into SQL below: a lone surrogate would raise there
            check_name(session, "session")
        if layer == "scenarios":
            atom_hits = self.search(query, user=user, k=min(1000, max(30, 3 * k)), layer="atoms", session=session,
                                    fusion=fusion, alpha=alpha, strict=strict)
            with self._lock:
                return scenario_search.search(self.conn, atom_hits, self.settings, k)
        qvec = self._query_vector(query, user, session)
        asked = Query(query, user=user, k=k, layer=layer, vector=qvec, fusion=fusion, alpha=alpha,
                      include_superseded=include_superseded, cosine_baseline=self._query_baseline(qvec))
        engine = Engine(self.settings, copies=self.copies, term_counts=self.term_counts, keywords=self.keywords)
        try:
            return self._fused_search(asked, engine, strict)
        finally:
            with self._lock:  # keyword copies this search asked for, built in the background from now
                self.keywords.start_builds()

    def _fused_search(self, asked: Query, engine: Engine, strict: bool) -> list[Hit]:
        """The search, else by keywords alone if the vector side fails, else [] (strict: raise)."""
        with self._lock:
            try:
                return fused_search(self.conn, asked, engine)
            except apsw.Error as exc:
                if strict:
                    raise SearchError(f"search failed: {exc}") from exc
                if asked.vector is None:
                    log.error("memdb: search failed, returning nothing: %s", exc)
                    return []
                log.warning("memdb: vector search failed, using keywords only: %s", exc)
            try:
                return fused_search(self.conn, dataclasses.replace(asked, vector=None), engine)
            except apsw.Error as exc:
                log.error("memdb: keyword search failed too, returning nothing: %s", exc)
                return []

    def _check_search_args(self, query: Any, user: Any, k: Any, layer: Any, fusion: Any, alpha: Any) -> None:
        if not isinstance(query, str):
            raise InvalidInput(f"query must be a string, not {type(query).__name__}")
        check_name(user, "user")
        check_count(k, "k", most=1000)
        if layer not in (*LAYERS, "scenarios"):
            raise InvalidInput(f"layer must be one of {', '.join(LAYERS)} or scenarios, not {layer!r}")
        if fusion is not None and fusion not in FUSIONS:
            raise InvalidInput(f"fusion must be one of {', '.join(FUSIONS)}, not {fusion!r}")
        if alpha is not None and not (isinstance(alpha, (int, float)) and 0 <= alpha <= 1):
            raise InvalidInput(f"alpha must be a number from 0 to 1, not {alpha!r}")

    def _query_baseline(self, qvec: np.ndarray | None) -> float:
        """The cosine of unrelated texts for this query vector (search/relevance.py), never
        below the embedder's constant: a query close to everything (nonsense) is measured from
        higher up, a plain question from the constant (bench/context_floor.py)."""
        fixed = getattr(self.embedder, "cosine_baseline", 0.0)
        if qvec is None or not self.settings.query_baseline:
            return fixed
        try:
            return max(fixed, relevance.baseline(self.embedder, qvec))
        except Exception as exc:  # an embedder that fails here: the constant still works
            self._warn_once(f"memdb: per-query relevance baseline unavailable, using {fixed}: {exc}")
            return fixed

    def _query_vector(self, query: str, user: str, session: str | None) -> np.ndarray | None:
        from .models import embedders

        self._follow_embedder()
        # Fusion is never worse than its better half: vectors of a language the embedder
        # cannot read (MiniLM on Chinese) are noise, so that side gets no weight at all.
        if self.embedder is None or not embedders.reads(self.embedder, query):
            return None
        # Working memory: the session's last turns nudge the query vector toward the topic.
        texts = [query[:2000]]
        if session is not None:
            with self._lock:
                texts += rows.recent_contents(self.conn, user, session, 3)
        found = self._embed(texts, query=True)
        if found is None:
            return None
        vector = found[0] + self.settings.session_weight * found[1:].sum(axis=0) / max(1, len(texts) - 1)
        return unit(vector)

    @_file_errors
    def context(self, query: str, *, user: str | None = None, budget: int = 400, k: int = 20,
                session: str | None = None, layer: Layer = "both", scenarios: bool = False,
                persona: bool = False) -> str:
        """A prompt-ready block: the best hits as dated lines under budget tokens.

        scenarios=True shows a scenario the hits fall in as one block (its title, then its
        relevant and newest members) instead of scattered atoms; persona=True puts the user's
        persona card first (within the same budget), for greeting-time and open questions."""
        return "\n".join(line for line, _ in self._context_lines(query, user=user, budget=budget, k=k, session=session,
                                                                 layer=layer, scenarios=scenarios, persona=persona))

    def _context_lines(self, query: str, *, user: str | None, budget: int, k: int, session: str | None,
                       layer: Layer, scenarios: bool, persona: bool) -> list[tuple[str, Hit | None]]:
        if not isinstance(budget, int) or budget < 1:
            raise InvalidInput(f"budget must be a positive integer, not {budget!r}")
        if layer == "scenarios":
            raise InvalidInput('context takes layer "atoms", "turns" or "both"; for scenario blocks pass scenarios=True')
        user = self._who(user)
        hits = self.search(query, user=user, k=k, layer=layer, session=session)
        top = max((h.score for h in hits), default=0.0)
        hits = [h for h in hits if h.score >= self.settings.context_min_share * top]
        header = self.settings.context_header
        header_cost = self.count_tokens(header + "\n") if header else 0
        with self._lock:
            card = [(f"persona · {line}", None) for line in personas.render(
                layers.card(self.conn, user), min(budget - header_cost, self.settings.persona_tokens),
                lambda line: self.count_tokens("persona · " + line))] if persona and budget > header_cost else []
            left = budget - header_cost - sum(self.count_tokens(line + "\n") for line, _ in card)
            if scenarios:
                hits = scenario_search.blocks(self.conn, hits, self.settings)
            found = contexts.lines(hits, lambda h: contexts.related_atoms(self.conn, h),
                                   budget=left, count_tokens=self.count_tokens,
                                   evidence=lambda h: self._evidence(h),
                                   evidence_for=self.settings.context_evidence if layer == "both" else 0,
                                   replaced=lambda h: contexts.replaced_by(self.conn, h)) if left > 0 else []
        # Raw turns are verbatim: a sentence of one that names a credential is withheld here, so
        # that it never reaches a prompt (the turn itself stays in L0 until forgotten).
        lines = [(privacy.redact(line), hit) for line, hit in [*card, *found]]
        return [(header, None), *lines] if lines and header else lines

    def _evidence(self, hit: Hit) -> list[Hit]:
        # The assistant's pleasantries never come in as evidence either.
        return [h for h in contexts.source_turns(self.conn, hit) if not relevance.pleasantry(h.role, h.text)]

    def count_tokens(self, line: str) -> int:
        """Tokens of line with the extraction model's tokenizer (an estimate if unavailable)."""
        try:
            from .models import llama

            counter = self._llm if hasattr(self._llm, "count_tokens") else self._llm_spec
            return llama.count_tokens(counter, line)
        except Exception:  # no model: an estimate still keeps the budget roughly right
            return text.approx_tokens(line)

    @_file_errors
    def get(self, atom_id: int, *, user: str | None = None) -> Atom:
        """One of the user's atoms (any status); NotFound if the user has none with that id."""
        user = self._who(user)
        self._require("atoms", atom_id, user)
        with self._lock:
            return rows.read_atoms(self.conn, 'where a."id" = ?', (atom_id,))[0]

    @_file_errors
    def history(self, atom_id: int, *, user: str | None = None) -> list[Atom]:
        """The chain of versions an atom belongs to, oldest first: what it was, what replaced it."""
        user = self._who(user)
        self._require("atoms", atom_id, user)
        with self._lock:
            return rows.history(self.conn, atom_id, user)

    @_file_errors
    def profile(self, user: str | None = None) -> list[Atom]:
        """The attribute card: active facts, preferences and constraints, grouped by subject and key."""
        user = self._who(user)
        with self._lock:
            atoms = rows.profile(self.conn, user)
        return sorted(atoms, key=lambda a: (a.kind, a.record.get("subject", ""),
                                            a.record.get("predicate", ""), a.first_seen))

    @_file_errors
    def events(self, user: str | None = None, *, since: TimeLike | None = None,
               until: TimeLike | None = None) -> list[Atom]:
        """The event index: active events in time order, with resolved dates. since and until:
        ISO 8601, a date, or a relative date ("yesterday", "3 days ago", "上周三") resolved from
        the user's latest turn, as a query's are."""
        user = self._who(user)
        with self._lock:
            since = self._when(since, "since", user)[:10] if since is not None else "0000"
            until = self._when(until, "until", user) if until is not None else "9999"
            return rows.events(self.conn, user, since, until)

    def _when(self, value: TimeLike, field: str, user: str) -> str:
        """An ISO time, or a relative date ("yesterday", "last week", "上周三") resolved as
        search resolves one: from the user's latest turn. A relative "until" covers its whole
        day, month or year."""
        if not isinstance(value, str) or _iso(value):
            return parse_ts(value, field)  # its own errors: out of range, and the like
        from . import timeparse
        from .search.fusion import user_now

        resolved = timeparse.resolve(value.strip(), user_now(self.conn, user)) if value.strip() else None
        if resolved is None:
            raise InvalidInput(f"{field} {value[:40]!r} is neither an ISO 8601 time such as 2026-10-05 nor a "
                               "date such as yesterday, last week or 3 days ago")
        return resolved if field == "since" else resolved + "~"  # "~" sorts after any time of that day

    @_file_errors
    def persona(self, user: str | None = None, *, budget: int | None = None) -> str:
        """The user's persona card: held facts, preferences and constraints about the user, one
        a line, each citing its atom ("... (#12)"), best confirmed first, within budget tokens
        (default settings.persona_tokens, 200). Kept current as atoms are absorbed."""
        user = self._who(user)
        budget = self.settings.persona_tokens if budget is None else check_count(budget, "budget")
        with self._lock:
            lines = personas.render(layers.card(self.conn, user), budget, self.count_tokens)
        # Prompt-ready as context() is: an atom stored before privacy.py existed may name a credential.
        return "\n".join(privacy.redact(line) for line in lines)

    @_file_errors
    def scenarios(self, user: str | None = None, *, limit: int = 20) -> list[Scenario]:
        """The user's scenarios (L2) with at least settings.scenario_min_members held atoms,
        hottest first: title, state line, member atom ids, heat (as of heat_at), first/last seen."""
        user = self._who(user)
        check_count(limit, "limit")
        with self._lock:
            return layers.shown(self.conn, user, self.settings.scenario_min_members)[:limit]

    @_file_errors
    def build_layers(self, user: str | None = None) -> dict[str, int]:
        """Place the atoms that are in no scenario yet (a file made before scenarios existed)
        and rank the persona card, for one user or every user of the file. Returns counts."""
        self._check_writable()
        users = [self._who(user)] if user is not None or self.user is not None else \
            [r[0] for r in self.conn.execute('select distinct "user" from "atoms" order by 1')]
        placed = 0
        for name in users:
            with self._lock, connection.write(self.conn):
                placed += placing.rebuild(self.conn, name, self.settings, self._baseline())
                personas.update(self.conn, name, self.settings)
        return {"users": len(users), "atoms_placed": placed}

    @_file_errors
    def turns(self, turn_ids: Sequence[int], *, user: str | None = None) -> list[dict[str, Any]]:
        """The user's L0 rows by id (the evidence behind a hit), in id order; ids of other
        users' turns (or of none) are left out."""
        turn_ids = check_ids(turn_ids, "turn_ids")
        user = self._who(user)
        with self._lock:
            return rows.read_turns(self.conn, turn_ids, user)

    @_file_errors
    def export(self, user: str | None = None) -> Iterator[dict[str, Any]]:
        """Everything held for user as JSON-ready dicts: turns first, then atoms."""
        user = self._who(user)
        with self._lock:
            ids = rows.user_turn_ids(self.conn, user)
        for i in range(0, len(ids), 500):
            for row in self.turns(ids[i:i + 500], user=user):
                yield {"type": "turn", **row}
        with self._lock:
            atoms = rows.user_atoms(self.conn, user)
        for atom in atoms:
            yield {"type": "atom", **atom.__dict__}

    @_file_errors
    def pairs(self, user: str | None = None) -> Iterator[dict[str, Any]]:
        """Training pairs for a future extractor (the seeds' path B): each extracted turn with the
        turns before it in its session and the atoms extraction kept from it (any status since).
        Pending and failed turns are left out: they have no validated answer yet."""
        user = self._who(user)
        with self._lock:
            turns = rows.session_turns(self.conn, user)  # in time order: a dataset reads as it was said
        shown = self.settings.extract_history
        said: dict[str, list[dict]] = {}  # each session's turns so far
        for turn in turns:
            earlier = said.setdefault(turn["session"], [])
            before = earlier[-shown:] if shown else []
            earlier.append(turn)
            if turn["state"] not in ("done", "skipped"):
                continue
            with self._lock:
                atoms = rows.atoms_from_turn(self.conn, turn["id"])
            yield {"type": "pair", "turn": turn,
                   "context": [{k: t[k] for k in ("id", "role", "speaker", "content", "ts")} for t in before],
                   "atoms": [{k: a.__dict__[k] for k in ("id", "kind", "text", "record", "confidence", "status")}
                             for a in atoms]}

    @_file_errors
    def session_turns(self, session: str, *, user: str | None = None) -> list[dict[str, Any]]:
        """One session's turns of the user, in the order they were said (what a chat history
        shows), read by session rather than through the whole export."""
        user = self._who(user)
        check_name(session, "session")
        with self._lock:
            return rows.session_turns(self.conn, user, session)

    @_file_errors
    def users(self) -> list[dict[str, Any]]:
        """Every user the file holds, by name: turns, atoms and the time of the latest turn.
        Names only the users; reading any of their rows still takes user=."""
        with self._lock:
            return rows.users(self.conn)

    @_file_errors
    def stats(self, user: str | None = None) -> dict[str, Any]:
        """What the file holds (for one user, or the whole file when neither user= nor a bound
        user is given): counts by state, sizes, the embedder and the model the file records.
        keyword_only and embedder_error are about this Memory: whether it searches without
        vectors, and why."""
        user = self._who(user) if user is not None or self.user is not None else None
        with self._lock:
            counted = rows.stats(self.conn, user)
            counted["vectors_missing"] = rows.count_missing_vectors(self.conn, user)
            llm_name = connection.get_meta(self.conn, "llm_name")
            embedder_name = connection.get_meta(self.conn, "embedder_name")
        return {
            "path": self.path, **counted,
            "embedder": embedder_name,
            "llm": llm_name,
            "keyword_only": self.embedder is None,
            "embedder_error": self.embedder_error,
        }

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        self.keywords.close()
        with self._lock:
            self.closed = True
            self.conn.close()

    def _check_writable(self) -> None:
        if self.read_only:
            raise MemdbError(f"this Memory ({self.path!r}) is read-only (opened with read_only=True, or its file is "
                             "on a read-only disk); nothing was written")

    def _check_open(self) -> None:
        # Without this a closed Memory's search() logged "connection has been closed" and
        # returned [], which an agent reads as "nothing remembered".
        if self.closed:
            raise MemdbError(f"this Memory ({self.path!r}) is closed; open the file again with memdb.open()")

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<memdb.Memory {self.path!r}" + (f" user={self.user!r}>" if self.user is not None else ">")


def _iso(value: str) -> bool:
    """Whether value reads as ISO 8601 at all (a relative date does not)."""
    try:
        datetime.fromisoformat(value.strip())
    except ValueError:
        return False
    return True


def _blas_threads(threads: int | None) -> Any:
    # The embedder's module holds the BLAS thread limiter; it is imported only when a limit is set.
    if threads is None:
        return contextlib.nullcontext()
    from .models.minilm import blas_threads

    return blas_threads(threads)
