"""Vector copies kept on disk beside the file, memory-mapped by later opens (Settings.vector_copy_files).

Reading a large user's vectors out of vec0 is one point lookup a vector, tens of seconds for a
user of 1M atoms, paid by the first search of every process (bench/results/first_search.json).
A copy written once to
a file of its own and mapped by numpy costs nothing to open; the first search reads its pages
once (from the page cache, or the disk).

Where: `<file>-memdb-copies/<layer>-<sha256 of the user>.vec`, beside `<file>-wal`; the
directory is 0700 and the files 0600 (they hold the user's vectors). A file is a 4 kB header
(magic, then JSON), the ids (int64), then the unit vectors (float32, 64-byte aligned).

A file is used only while it is still a prefix of the user's rows in the SQLite file:
- the file's `vectors_epoch` (bumped whenever vectors are deleted or rebuilt, by any process)
  and its embedder are the ones recorded;
- the user still has exactly as many rows up to the highest id recorded as they had then, which
  also catches a deletion that did not bump the epoch and a file restored from a backup.
Rows added since are read from SQLite, as for an in-memory copy (copies.py), and the file is
written again once they pass a quarter of it. A file that fails a check is deleted and written
again; rows superseded since are read from SQLite each time.

Crash safety: a file is written under a temporary name, flushed and fsynced, then renamed into
place, so a reader sees the old file or the new one, never half of one. Privacy: forget()
deletes the user's files after its commit, and a writer checks the epoch again after its rename
and deletes what it wrote if a forget committed meanwhile: whichever comes last removes it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path

import numpy as np

log = logging.getLogger("memdb")

MAGIC = b"memdbvc1"
HEADER_BYTES = 4096  # fixed, so the arrays can be written before the header that counts them
SUFFIX = ".vec"


def directory(db_path: str) -> Path | None:
    """Where the copies of the file at db_path live; None for an in-memory or URI database."""
    if not db_path or db_path == ":memory:" or db_path.startswith("file:"):
        return None
    return Path(os.path.abspath(db_path) + "-memdb-copies")


def path_for(folder: Path, layer: str, user: str) -> Path:
    return folder / f"{layer}-{hashlib.sha256(user.encode()).hexdigest()[:32]}{SUFFIX}"


def _matrix_offset(capacity: int) -> int:
    return HEADER_BYTES + -(-capacity * 8 // 64) * 64


def read(path: Path) -> tuple[np.ndarray, np.ndarray, dict] | None:
    """The file's ids and vectors (memory-mapped, read-only) and its header; None when it is
    missing, cannot be read or is not a whole copy file."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_BYTES)
            size = os.fstat(f.fileno()).st_size
        length = int.from_bytes(head[8:16], "little")
        header = json.loads(head[16 : 16 + length]) if head[:8] == MAGIC else None
        n, capacity, dim = int(header["n"]), int(header["capacity"]), int(header["dim"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    at = _matrix_offset(capacity)
    if not 0 < n <= capacity or size != at + capacity * dim * 4:
        return None
    ids = np.memmap(path, np.int64, "r", offset=HEADER_BYTES, shape=(n,))
    matrix = np.memmap(path, np.float32, "r", offset=at, shape=(n, dim))
    return ids, matrix, header


class Writer:
    """A copy file being written: arrays of room for capacity rows, mapped from a temporary file
    that commit() completes and renames into place."""

    def __init__(self, path: Path, capacity: int, dim: int) -> None:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        self.path = path
        remove_leftovers(path)
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")  # mode 0600
        self.temp = Path(temp)
        self._fd = fd  # held (and locked) until commit or abandon: a live writer's file is not a leftover
        try:
            _lock(fd)
            _allocate(fd, _matrix_offset(capacity) + capacity * dim * 4)
        except BaseException:
            self._fd = None
            os.close(fd)
            remove(self.temp)
            raise
        self.ids = np.memmap(self.temp, np.int64, "r+", offset=HEADER_BYTES, shape=(capacity,))
        self.matrix = np.memmap(self.temp, np.float32, "r+", offset=_matrix_offset(capacity), shape=(capacity, dim))
        self.capacity, self.dim = capacity, dim

    def commit(self, n: int, header: dict) -> None:
        self.ids.flush()
        self.matrix.flush()
        del self.ids, self.matrix
        text = json.dumps({**header, "n": n, "capacity": self.capacity, "dim": self.dim}).encode()
        if 16 + len(text) > HEADER_BYTES:
            raise ValueError("copy header too long")
        with open(self.temp, "r+b") as f:
            f.write(MAGIC + len(text).to_bytes(8, "little") + text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(self.temp, self.path)
        self._close()
        with contextlib.suppress(OSError):  # the rename itself, on filesystems that allow it
            folder = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)

    def abandon(self) -> None:
        for name in ("ids", "matrix"):
            self.__dict__.pop(name, None)
        remove(self.temp)
        self._close()

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _allocate(fd: int, size: int) -> None:
    """Give the file its blocks now. The arrays are filled through a memory map: on a file that
    is only sparse (ftruncate), a full disk shows up as SIGBUS on the page being written, which
    kills the process; allocated first, it is an OSError (ENOSPC) here, and the copy stays in
    memory."""
    os.ftruncate(fd, size)
    if not hasattr(os, "posix_fallocate"):  # macOS: write the zeros, the same guarantee
        _write_zeros(fd, size)
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        _write_zeros(fd, size)  # a filesystem without fallocate


def _write_zeros(fd: int, size: int) -> None:
    block = bytes(1 << 20)
    at = 0
    while at < size:
        at += os.pwrite(fd, block[: min(len(block), size - at)], at)
    os.fsync(fd)


def _lock(fd: int) -> None:
    """Mark the temporary file as being written: leftovers_of() removes only unlocked ones."""
    with contextlib.suppress(ImportError, OSError):
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def remove_leftovers(path: Path) -> None:
    """Delete the temporary files a killed writer of path left (each held the disk space of a
    whole copy); a file another live writer holds locked is left alone."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): only forget() and reembed remove leftovers
        return
    for temp in path.parent.glob(path.name + ".*.tmp"):
        try:
            fd = os.open(temp, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a live writer's
            continue
        else:
            remove(temp)
        finally:
            os.close(fd)


def remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def remove_user(folder: Path | None, user: str) -> None:
    """Delete the user's copy files of every layer (forget), with any a crash left half-written."""
    if folder is not None and folder.is_dir():
        for layer in ("atoms", "turns"):
            path = path_for(folder, layer, user)
            for temp in folder.glob(path.name + ".*.tmp"):
                remove(temp)
            remove(path)


def remove_all(folder: Path | None) -> None:
    """Delete every copy file, finished or not (reembed: the old embedder's vectors go)."""
    if folder is not None and folder.is_dir():
        for path in folder.iterdir():
            if path.name.endswith((SUFFIX, ".tmp")):
                remove(path)
