"""SQLite failures as the caller's MemdbError: what is wrong with the file, and what to do.

No apsw error leaves the public API: a damaged, locked-out or unreadable file raises MemdbError
(the one family an agent loop catches) naming the file, the failure and the remedy.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import apsw

from .errors import MemdbError

Method = TypeVar("Method", bound=Callable[..., Any])

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


def file_error(path: str, exc: apsw.Error) -> MemdbError:
    """The MemdbError for an SQLite failure: what is wrong with the file, and what to do."""
    advice = next((words for kinds, words in _ADVICE if isinstance(exc, kinds)), "could not be read or written")
    return MemdbError(f"{path!r} {advice} ({type(exc).__name__}: {exc}); nothing of this call was written")


def translated(method: Method) -> Method:
    """A Memory method that checks the Memory is open and raises file_error for any apsw error
    (a generator's, such as export()'s, while it is iterated)."""
    if inspect.isgeneratorfunction(method):
        @functools.wraps(method)
        def generator(self: Any, *args: Any, **kwargs: Any) -> Iterator:
            self._check_open()
            try:
                yield from method(self, *args, **kwargs)
            except apsw.Error as exc:
                raise file_error(self.path, exc) from exc
        return cast(Method, generator)

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._check_open()
        try:
            return method(self, *args, **kwargs)
        except apsw.Error as exc:
            raise file_error(self.path, exc) from exc
    return cast(Method, wrapper)


def on_read_only_disk(path: str) -> bool:
    """Whether path is an existing file on a file system mounted read-only."""
    if path == ":memory:" or path.startswith("file:") or not os.path.isfile(path):
        return False
    try:
        return bool(os.statvfs(os.path.dirname(os.path.abspath(path))).f_flag & os.ST_RDONLY)
    except (AttributeError, OSError):  # no statvfs (Windows)
        return False
