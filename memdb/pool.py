"""Many tenants, one file each: a bounded pool of open memdb files.

A deployment that gives each tenant (a customer, a shard of users) its own file keeps every
per-file cost a tenant's own (FTS5's statistics and postings, vec0's partitions, the write
lock) and lets a tenant be backed up, moved or deleted as a file. Each open file holds three
descriptors (the file, its WAL, its shared memory) and its in-memory copies (index/), so the
pool keeps at most `max_open` files open, closing the least recently used one that is not in
use, and gives each an equal share of one memory budget for copies: memory and open files stay
bounded however many tenants there are (bench/pool.py).

    with memdb.Pool("tenants/", max_open=64) as pool:
        with pool.tenant("acme") as mem:      # tenants/acme.db, opened or reused
            mem.search("what database do we use?", user="alice")
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .checks import check_name
from .db import connection
from .embedding import DEFAULT_EMBEDDER
from .errors import InvalidInput, MemdbError
from .memory import Memory, open as open_memory
from .settings import Settings

_TENANT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")  # a file name on every platform, never a path


class Pool:
    """Open memdb files of tenants in one directory, at most max_open at a time. Thread-safe:
    a file in use (inside tenant()) is never closed under its user.

    embedder "auto" (the default) opens each file with the embedder it records, as memdb.open
    does (a new file gets the default one); each embedder is loaded once and shared by every
    file that uses it. A named embedder or an object is used for every file (one recording
    another is refused, EmbedderMismatch). llm is shared too (give it as an object or a server
    URL: a GGUF path would load a model per open file). copies_mb is the memory for vector and
    keyword copies of all open files together."""

    def __init__(self, directory: str | os.PathLike, *, max_open: int = 64, copies_mb: float = 1024.0,
                 embedder: Any = DEFAULT_EMBEDDER, llm: Any = None, extract: str = "now",
                 threads: int | None = None, settings: Settings | None = None) -> None:
        if not isinstance(max_open, int) or isinstance(max_open, bool) or max_open < 1:
            raise InvalidInput(f"max_open must be a positive integer, not {max_open!r}")
        if not isinstance(copies_mb, (int, float)) or isinstance(copies_mb, bool) or copies_mb < 0:
            raise InvalidInput(f"copies_mb must be a non-negative number of megabytes, not {copies_mb!r}")
        if settings is not None and not isinstance(settings, Settings):
            raise InvalidInput(f"settings must be a memdb.Settings, not {type(settings).__name__}")
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise InvalidInput(f"{str(self.directory)!r} is a file, not a directory; a Pool keeps one file "
                               "per tenant in a directory of its own")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a parent that is a file, no permission, a read-only disk
            raise MemdbError(f"cannot create the pool directory {str(self.directory)!r}: "
                             f"{exc.strerror or exc}") from None
        self.max_open = max_open
        share = copies_mb / 2 / max_open  # half for vectors, half for keywords, per open file
        self.settings = dataclasses.replace(settings or Settings(), vector_copy_mb=share, keyword_copy_mb=share)
        self.embedder = embedder
        self.embedders: dict[str, Any] = {}  # "auto": the embedders loaded so far, by name, shared
        self.options = dict(llm=llm, extract=extract, threads=threads)
        self.open_files: collections.OrderedDict[str, Memory] = collections.OrderedDict()
        self.in_use: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def path(self, tenant: str) -> Path:
        """The tenant's file. Names are file names: letters, digits, '.', '_', '-'."""
        check_name(tenant, "tenant")
        if not _TENANT.fullmatch(tenant):
            raise InvalidInput(f"tenant {tenant!r} is not a file name: use letters, digits, '.', '_' and '-'")
        return self.directory / f"{tenant}.db"

    @contextlib.contextmanager
    def tenant(self, tenant: str) -> Iterator[Memory]:
        """The tenant's open Memory (created on first use), kept open while the block runs."""
        mem = self._acquire(tenant)
        try:
            yield mem
        finally:
            with self._lock:
                self.in_use[tenant] -= 1
                if not self.in_use[tenant]:
                    del self.in_use[tenant]
                self._close_over_limit()

    def _acquire(self, tenant: str) -> Memory:
        path = self.path(tenant)
        with self._lock:
            mem = self.open_files.get(tenant)
            if mem is None:
                mem = self._open(path)
                self.open_files[tenant] = mem
            self.open_files.move_to_end(tenant)
            self.in_use[tenant] += 1
            self._close_over_limit()
            return mem

    def _open(self, path: Path) -> Memory:
        if self.embedder != DEFAULT_EMBEDDER:
            mem = open_memory(path, settings=self.settings, embedder=self.embedder, **self.options)
            # The first file loaded the embedder: every later one shares that object (or None
            # when it could not load, keyword-only like the first).
            self.embedder = mem.embedder
            return mem
        # The file's own embedder, loaded once per name: opened without one, the file says
        # which it records, and gets the shared object (or loads it, as open() would).
        from .models import embedders

        mem = open_memory(path, settings=self.settings, embedder=None, **self.options)
        try:
            name = connection.get_meta(mem.conn, "embedder_name") or embedders.DEFAULT
            mem.embedding.embedder, mem.embedding.error = mem.embedding.load(self.embedders.get(name, DEFAULT_EMBEDDER))
            if mem.embedder is not None:
                self.embedders.setdefault(mem.embedder.name, mem.embedder)
        except BaseException:
            mem.close()
            raise
        return mem

    def _close_over_limit(self) -> None:
        idle = [t for t in self.open_files if t not in self.in_use]  # least recently used first
        for tenant in idle[: max(0, len(self.open_files) - self.max_open)]:
            self.open_files.pop(tenant).close()

    def close(self) -> None:
        with self._lock:
            while self.open_files:
                self.open_files.popitem()[1].close()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
