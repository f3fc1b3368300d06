"""The Memory facade: one open memdb file. It checks arguments, holds the locks and turns every
SQLite error into MemdbError (fileerrors.py). The work is done behind it: a turn's way in by
flow.py, a query's by recall.py, the models by embedding.py and extractor.py, forget by
forgetting.py, export and stats by export.py, the other reads by db/ and layers/."""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date
from typing import Any, Literal

import apsw

from . import export as exporting, flow, forgetting, privacy, recall
from .checks import MAX_ID, check_count, check_id, check_ids, check_name, check_open, now, parse_bound, parse_ts
from .db import connection, rows
from .db.rows import Atom, Hit
from .embedding import DEFAULT_EMBEDDER, Embedding, EmbedderSpec
from .extractor import Extractor, LLMSpec
from .errors import InvalidInput, MemdbError, NotFound
from .fileerrors import file_error, on_read_only_disk, translated as _file_errors
from .index import copyfiles
from .index.copies import VectorCopies
from .index.fts import TermCounts
from .index.keywords import KeywordCopies
from .layers.index import ScenarioIndex
from .ingest import check_messages
from .layers import persona as personas, store as layers
from .layers.store import Scenario
from .models.protocols import LLM
from .search.fusion import user_now
from .settings import Settings
from .vecmath import blas_threads

log = logging.getLogger("memdb")

# The public API's argument types (checked again at run time: callers need not type-check).
Message = Mapping[str, Any]  # {"role", "content", "name"?, "ts"?}
TimeLike = str | date  # ISO 8601 text, a date or a datetime (aware times are stored in UTC)
Layer = Literal["atoms", "turns", "both", "scenarios"]
Fusion = Literal["weighted", "rrf"]


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
    check_open(path, user=user, extract=extract, threads=threads, settings=settings, llm=llm, read_only=read_only)
    if not read_only and on_read_only_disk(os.fspath(path)):  # it could not be opened any other way
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
        self.extractor = Extractor(llm, threads=threads, settings=settings)
        self.lock = threading.RLock()  # the connection and the in-memory copies; never held over a model call
        self.model_lock = threading.Lock()  # one model call at a time per Memory
        self._warned: set[str] = set()
        self.embedding = Embedding(conn, embedder, threads=threads, read_only=read_only, warn=self.warn_once)
        self.copies = VectorCopies(
            vector_copy_min=settings.vector_copy_min, vector_copy_mb=settings.vector_copy_mb,
            blas_limit=functools.partial(blas_threads, threads),
            files=self.copy_files if settings.vector_copy_files and not read_only else None,
            file_min=settings.vector_copy_file_min,
            background_rows=settings.vector_copy_background,  # a second connection needs a file on disk
            opener=functools.partial(connection.connect, path, read_only=True) if self.copy_files else None,
        )
        self.term_counts = TermCounts(growth=settings.term_counts_growth)
        self.scenario_index = ScenarioIndex()  # the users' scenarios, for placing atoms
        self.keywords = KeywordCopies(
            keyword_copy_min=settings.keyword_copy_min, keyword_copy_mb=settings.keyword_copy_mb,
            shared=settings.keyword_copy_shared, atom_columns=settings.atom_columns, turn_columns=settings.turn_columns,
            background_rows=settings.keyword_copy_background,  # a second connection needs a file on disk
            opener=functools.partial(connection.connect, path, read_only=True) if self.copy_files else None)

    # ------------------------------------------------------------ models

    @property
    def embedder(self) -> Any:  # None: keyword-only search
        return self.embedding.embedder

    @property
    def embedder_error(self) -> str | None:  # why there is no embedder, if there is none
        return self.embedding.error

    def llm(self) -> LLM:
        """The extraction model, loaded on first use (raises ModelError if it cannot load).
        Started outside the Memory's lock: reads never wait for a model to start or load."""
        return self.extractor.get(self.conn, self.lock, read_only=self.read_only)

    def count_tokens(self, line: str) -> int:
        """Tokens of line with the extraction model's tokenizer (an estimate if unavailable)."""
        return self.extractor.count_tokens(line)

    def warn_once(self, message: str) -> None:
        """Log a warning once per Memory (a failing embedder would log it at every call)."""
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
        turns = check_messages(messages, parse_ts(ts, "ts") if ts is not None else now())
        return flow.add(self, turns, user=user, session=session)

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
        return flow.extract(self, user=user, turn_ids=turn_ids, limit=limit, progress=progress)

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
        with self.lock:
            if atom_id is not None:
                self._require("atoms", atom_id, user)
            elif turn_id is not None:
                self._require("turns", turn_id, user)
            return forgetting.forget(self.conn, self.copy_files, self.settings, user=user, atom_id=atom_id,
                                     turn_id=turn_id)

    @_file_errors
    def reembed(self, embedder: EmbedderSpec = "default") -> int:
        """Rebuild every vector of the file with another embedder, in one transaction.

        L0 and atom text are untouched. Returns the number of vectors written.
        """
        self._check_writable()
        with self.lock:
            _, written = self.embedding.reembed(embedder, self.settings)
            copyfiles.remove_all(self.copy_files)  # the old embedder's vectors
        return written

    @_file_errors
    def build_layers(self, user: str | None = None) -> dict[str, int]:
        """Place the atoms that are in no scenario yet (a file made before scenarios existed)
        and rank the persona card, for one user or every user of the file. Returns counts."""
        self._check_writable()
        return flow.build_layers(self, self._who(user) if user is not None or self.user is not None else None)

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
        return recall.search(self, query, user=self._who(user), k=k, layer=layer, session=session, fusion=fusion,
                             alpha=alpha, include_superseded=include_superseded, strict=strict)

    @_file_errors
    def context(self, query: str, *, user: str | None = None, budget: int = 400, k: int = 20,
                session: str | None = None, layer: Layer = "both", scenarios: bool = False,
                persona: bool = False) -> str:
        """A prompt-ready block: the best hits as dated lines under budget tokens.

        scenarios=True shows a scenario the hits fall in as one block (its title, then its
        relevant and newest members) instead of scattered atoms; persona=True puts the user's
        persona card first (within the same budget), for greeting-time and open questions."""
        lines = recall.context_lines(self, query, user=self._who(user), budget=budget, k=k, session=session,
                                     layer=layer, scenarios=scenarios, persona=persona)
        return "\n".join(line for line, _ in lines)

    @_file_errors
    def get(self, atom_id: int, *, user: str | None = None) -> Atom:
        """One of the user's atoms (any status); NotFound if the user has none with that id."""
        user = self._who(user)
        self._require("atoms", atom_id, user)
        with self.lock:
            return rows.read_atoms(self.conn, 'where a."id" = ?', (atom_id,))[0]

    @_file_errors
    def history(self, atom_id: int, *, user: str | None = None) -> list[Atom]:
        """The chain of versions an atom belongs to, oldest first: what it was, what replaced it."""
        user = self._who(user)
        self._require("atoms", atom_id, user)
        with self.lock:
            return rows.history(self.conn, atom_id, user)

    @_file_errors
    def profile(self, user: str | None = None) -> list[Atom]:
        """The attribute card: active facts, preferences and constraints, grouped by subject and key."""
        user = self._who(user)
        with self.lock:
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
        with self.lock:
            latest = functools.partial(user_now, self.conn, user)
            since = parse_bound(since, "since", latest)[:10] if since is not None else "0000"
            until = parse_bound(until, "until", latest) if until is not None else "9999"
            return rows.events(self.conn, user, since, until)

    @_file_errors
    def persona(self, user: str | None = None, *, budget: int | None = None) -> str:
        """The user's persona card: held facts, preferences and constraints about the user, one
        a line, each citing its atom ("... (#12)"), best confirmed first, within budget tokens
        (default settings.persona_tokens, 200). Kept current as atoms are absorbed."""
        user = self._who(user)
        budget = self.settings.persona_tokens if budget is None else check_count(budget, "budget")
        with self.lock:
            lines = personas.render(layers.card(self.conn, user), budget, self.count_tokens)
        # Prompt-ready as context() is: an atom stored before privacy.py existed may name a credential.
        return "\n".join(privacy.redact(line) for line in lines)

    @_file_errors
    def scenarios(self, user: str | None = None, *, limit: int = 20) -> list[Scenario]:
        """The user's scenarios (L2) with at least settings.scenario_min_members held atoms,
        hottest first: title, state line, member atom ids, heat (as of heat_at), first/last seen."""
        user = self._who(user)
        check_count(limit, "limit")
        with self.lock:
            return layers.shown(self.conn, user, self.settings.scenario_min_members)[:limit]

    @_file_errors
    def turns(self, turn_ids: Sequence[int], *, user: str | None = None) -> list[dict[str, Any]]:
        """The user's L0 rows by id (the evidence behind a hit), in id order; ids of other
        users' turns (or of none) are left out."""
        turn_ids = check_ids(turn_ids, "turn_ids")
        user = self._who(user)
        with self.lock:
            return rows.read_turns(self.conn, turn_ids, user)

    @_file_errors
    def export(self, user: str | None = None) -> Iterator[dict[str, Any]]:
        """Everything held for user as JSON-ready dicts: turns first, then atoms."""
        yield from exporting.export(self.conn, self.lock, self._who(user))

    @_file_errors
    def pairs(self, user: str | None = None) -> Iterator[dict[str, Any]]:
        """Training pairs for a future extractor (the seeds' path B): each extracted turn with the
        turns before it in its session and the atoms extraction kept from it (any status since).
        Pending and failed turns are left out: they have no validated answer yet."""
        yield from exporting.pairs(self.conn, self.lock, self._who(user), self.settings.extract_history)

    @_file_errors
    def session_turns(self, session: str, *, user: str | None = None) -> list[dict[str, Any]]:
        """One session's turns of the user, in the order they were said (what a chat history
        shows), read by session rather than through the whole export."""
        user = self._who(user)
        check_name(session, "session")
        with self.lock:
            return rows.session_turns(self.conn, user, session)

    @_file_errors
    def users(self) -> list[dict[str, Any]]:
        """Every user the file holds, by name: turns, atoms and the time of the latest turn.
        Names only the users; reading any of their rows still takes user=."""
        with self.lock:
            return rows.users(self.conn)

    @_file_errors
    def stats(self, user: str | None = None) -> dict[str, Any]:
        """What the file holds (for one user, or the whole file when neither user= nor a bound
        user is given): counts by state, sizes, the embedder and the model the file records.
        keyword_only and embedder_error are about this Memory: whether it searches without
        vectors, and why."""
        user = self._who(user) if user is not None or self.user is not None else None
        with self.lock:
            held = exporting.stats(self.conn, user)
        return {"path": self.path, **held, "keyword_only": self.embedder is None, "embedder_error": self.embedder_error}

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        self.keywords.close()  # stops a keyword copy being built in the background
        self.copies.close()  # and a vector copy being read
        with self.lock:
            self.closed = True
            self.conn.close()

    def _check_writable(self) -> None:
        if self.read_only:
            raise MemdbError(f"this Memory ({self.path!r}) is read-only (opened with read_only=True, or its file is "
                             "on a read-only disk); nothing was written")

    def _check_open(self) -> None:
        # A closed Memory's search() logged an error and returned [], read as "nothing remembered".
        if self.closed:
            raise MemdbError(f"this Memory ({self.path!r}) is closed; open the file again with memdb.open()")

    def _who(self, user: Any) -> str:
        """The user a call is for: the one given, else the one the Memory is bound to."""
        user = self.user if user is None else user
        if user is None:
            raise InvalidInput("user= is required: name the user whose rows these are "
                               "(or bind the Memory to one with memdb.open(path, user=...))")
        return check_name(user, "user")

    def _require(self, table: str, row_id: Any, user: str) -> None:
        check_id(row_id, f"{table[:-1]} id")
        if not rows.exists(self.conn, table, row_id, user):
            raise NotFound(f"no {table[:-1]} with id {row_id} for user {user!r}")

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<memdb.Memory {self.path!r}" + (f" user={self.user!r}>" if self.user is not None else ">")

