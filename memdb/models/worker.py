"""The extraction model in a process of its own, so that the model can never take the caller down.

`WorkerLLM` has the LLM protocol; behind it a child Python process (`python -m
memdb.models.worker`) builds the real model once and answers `complete()` calls for as long as
it lives. A native crash (SIGSEGV in llama.cpp), an abort, an out-of-memory kill or a call that
outlasts `timeout` ends that worker, not the caller: the call raises ModelError (the extraction
queue then leaves its turns pending) and the next call starts a fresh worker.

How the pieces were chosen:
- The child is started with subprocess (fork + exec at once), not multiprocessing: forking a
  process that holds threads and open SQLite connections is unsafe, and multiprocessing's
  spawn and forkserver re-import the caller's __main__, which runs an unguarded script again.
- The model is described by a factory the child can rebuild: a picklable zero-argument callable
  (a class, a functools.partial of a module-level function) or an import path
  "package.module:name". The child starts with the caller's sys.path, so the same modules load.
- Requests and replies are length-prefixed pickles over the child's stdin and stdout. The child
  moves them to other descriptors at once and points fd 1 at stderr, so whatever llama.cpp
  prints cannot corrupt them. Its stderr goes to a temporary file, whose tail is quoted in the
  error when it dies ("GGML_ASSERT ...").
- One call at a time per worker (a lock); `shared()` hands every Memory of the process the same
  worker for the same model, so a Pool of files loads the model once, not once per file.
- What the model logs (memdb's logger, info and up) comes back with each reply and is logged
  in the caller; llama.cpp's own lines (debug) stay in the worker.
- The worker exits when the caller does: at its stdin's end when idle, and by a watch on its
  parent's pid when the caller was killed in the middle of a call.
- A timeout is a timer that kills the worker; the blocking read then ends.
"""

from __future__ import annotations

import atexit
import importlib
import json
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from typing import IO, Any

from ..errors import InvalidInput, ModelError
from . import loaded

log = logging.getLogger("memdb")

Factory = Callable[[], Any] | str
_PATH_ENV = "MEMDB_WORKER_SYS_PATH"
_CHILD = (f"import json, os, sys; sys.path[:0] = json.loads(os.environ.pop({_PATH_ENV!r})); "
          "from memdb.models.worker import serve; serve()")
_HEADER = struct.Struct("!I")
_STDERR_TAIL = 1500  # characters of a dead worker's stderr quoted in the error
# The child does one thing, llama.cpp's (its own thread count): libraries it loads beside it
# must not start a thread per core of their own on a machine the caller shares.
_CHILD_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class WorkerLLM:
    """An LLM (memdb.models.protocols.LLM) run in a worker process, started on first use.

    factory: a picklable zero-argument callable returning the model, or "module:name" naming
    one. timeout: seconds one call may take, the worker's start and the model's loading
    included; past it the worker is killed and the call raises ModelError. name and sha256 are
    the model's own, asked of the worker when first read.
    """

    def __init__(self, factory: Factory, *, timeout: float = 120.0, label: str | None = None) -> None:
        if isinstance(factory, str):
            if ":" not in factory:
                raise InvalidInput(f'a model factory path looks like "package.module:name", not {factory!r}')
        elif not callable(factory):
            raise InvalidInput(f"factory must be a callable or a 'module:name' path, not {type(factory).__name__}")
        try:
            self._factory = pickle.dumps(factory)
        except Exception as exc:
            raise InvalidInput(f"the model factory cannot be sent to a worker process ({exc}); pass a "
                               f"module-level class or function, or a 'module:name' path") from exc
        self.timeout = float(timeout)
        self.label = label or _describe(factory)
        self.calls = 0          # calls answered, by every worker this object started
        self.starts = 0         # workers started (more than one: some died or were stopped)
        self.load_seconds = 0.0  # the last worker's start, until its model answered who it is
        self._identity: dict[str, Any] | None = None
        self._proc: subprocess.Popen | None = None
        self._stderr: IO[bytes] | None = None
        self._lock = threading.Lock()
        self._last_stats: dict[str, Any] = {}
        _LIVE.add(self)

    # ------------------------------------------------------------ the LLM protocol

    @property
    def name(self) -> str:
        return str(self._who()["name"])

    @property
    def sha256(self) -> str:
        return str(self._who()["sha256"])

    def complete(self, messages: list[dict[str, str]], *, schema: dict, max_tokens: int) -> str:
        """The worker model's reply (see LLM.complete). A dead or stopped worker: ModelError;
        the model's own exceptions are raised here as they were raised there."""
        reply = self._request(("call", "complete", (messages,), {"schema": schema, "max_tokens": max_tokens}))
        self.calls += 1
        return reply

    def load(self) -> None:
        """Have the worker load its model's weights now, where the model can (LlamaLLM.load):
        a model that cannot run fails here, before anything is stored. A model with nothing
        to load (an endpoint, a fake) is started and asked who it is."""
        try:
            self._request(("call", "load", (), {}))
        except AttributeError:
            self._who()

    @property
    def stats(self) -> dict[str, Any]:
        """The model's own counters, if it keeps any (LlamaLLM, EndpointLLM), from the live worker."""
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._last_stats = dict(self._request(("get", "stats")) or {})
            except Exception as exc:  # counters are for measurement only
                log.debug("memdb: model stats unavailable: %s", exc)
        return self._last_stats

    @property
    def pid(self) -> int | None:
        """The live worker's process id (None before the first call or after it died)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def close(self) -> None:
        """Stop the worker (it starts again on the next call)."""
        with self._lock:
            self._stop(kill=False)

    # ------------------------------------------------------------ the parent's side

    def _who(self) -> dict[str, Any]:
        if self._identity is None:
            with self._lock:
                self._ensure()
        assert self._identity is not None
        return self._identity

    def _request(self, message: tuple) -> Any:
        with self._lock:
            self._ensure()
            return self._exchange(message, "answer")

    def _ensure(self) -> None:
        """A live worker with its model built (under self._lock)."""
        if self._proc is not None and self._proc.poll() is None:
            return
        if self._proc is not None:  # died between calls (killed from outside): say so, start anew
            log.warning("memdb: the model worker %s had exited (%s); starting a new one",
                        self._proc.pid, _how_it_ended(self._proc.returncode))
            self._stop(kill=True)
        started = time.perf_counter()
        self._stderr = tempfile.TemporaryFile(prefix="memdb-worker-")
        env = {**os.environ, **{k: v for k, v in _CHILD_ENV.items() if k not in os.environ}}
        # The child imports as the caller does (this very memdb, the factory's module): the
        # caller's sys.path goes first, handed over before anything is imported.
        env[_PATH_ENV] = json.dumps(sys.path)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self._stderr, env=env, close_fds=True,
                start_new_session=True)  # the terminal's Ctrl-C is the caller's to handle, not the worker's
        except OSError as exc:
            self._stop(kill=True)
            raise ModelError(f"cannot start a worker process for the extraction model: {exc}") from exc
        self.starts += 1
        hello = {"factory": self._factory, "parent": os.getpid()}
        try:
            self._identity = self._exchange(("load", hello), "start and load")
        except ModelError:
            self._stop(kill=True)
            raise
        except Exception as exc:  # the factory failed in the worker, which has left
            self._stop(kill=True)
            raise ModelError(f"the extraction model ({self.label}) could not be built in its worker: "
                             f"{type(exc).__name__}: {exc}") from exc
        self.load_seconds = time.perf_counter() - started

    def _exchange(self, message: tuple, what: str) -> Any:
        """Send one request, wait for its reply under the timeout; ModelError if the worker dies."""
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            _kill(proc)

        timer = threading.Timer(self.timeout, expire)
        timer.daemon = True
        timer.start()
        try:
            try:
                _send(proc.stdin, message)
                reply = _receive(proc.stdout)
            except (OSError, ValueError, EOFError, pickle.UnpicklingError):
                reply = None
            except BaseException:  # Ctrl-C while waiting: the reply would answer the next request
                self._stop(kill=True)
                raise
        finally:
            timer.cancel()
        if reply is None:
            raise self._died(what, expired.is_set())
        status, said, *rest = reply
        for level, line in said:  # what the model logged there, logged here
            log.log(level, "%s", line)
        if status == "ok":
            return rest[0]
        raise _rebuild(*rest)

    def _died(self, what: str, expired: bool) -> ModelError:
        proc = self._proc
        assert proc is not None
        _kill(proc)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        tail = self._stderr_tail()
        self._stop(kill=True)
        if expired:
            why = f"did not {what} within the model timeout ({self.timeout:g} s; Settings.model_timeout) and was stopped"
        else:
            why = f"ended ({_how_it_ended(proc.returncode)}) before it could {what}"
        return ModelError(f"the extraction model ({self.label}) {why}; nothing was written for this call, "
                          f"the turns stay pending and the next call starts a new worker"
                          + (f". Its last output: {tail}" if tail else ""))

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - 4 * _STDERR_TAIL))
            lines = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return " | ".join(line.strip() for line in lines if line.strip())[-_STDERR_TAIL:]

    def _stop(self, *, kill: bool) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                if proc.stdin:
                    proc.stdin.close()  # an idle worker leaves at the end of its input
            except OSError:
                pass
            if kill:
                _kill(proc)
            try:
                proc.wait(timeout=None if kill else 10)
            except subprocess.TimeoutExpired:
                _kill(proc)
                proc.wait()
            if proc.stdout:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __repr__(self) -> str:
        return f"<memdb WorkerLLM {self.label} pid={self.pid}>"


def _describe(factory: Factory) -> str:
    """A short name for a factory, for messages: its path, or its function's or class's name."""
    if isinstance(factory, str):
        return factory
    return str(getattr(getattr(factory, "func", factory), "__name__", type(factory).__name__))


def _kill(proc: subprocess.Popen) -> None:
    try:
        proc.kill()
    except OSError:  # already gone
        pass


def _how_it_ended(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = {"SIGSEGV": "a crash in native code", "SIGABRT": "an abort in native code",
                "SIGKILL": "killed: out of memory, or by another process", "SIGBUS": "a crash in native code",
                "SIGILL": "an instruction this CPU lacks"}.get(name, "a signal")
        return f"{name}, {hint}"
    return f"exit status {code}"


def _rebuild(kind: str, message: str, pickled: bytes | None, model_error: bool) -> BaseException:
    """The worker's exception, raised here: the same object when it pickles, else its words."""
    if pickled is not None:
        try:
            exc = pickle.loads(pickled)
            if isinstance(exc, BaseException):
                return exc
        except Exception:
            pass
    if model_error:
        return ModelError(message)
    return WorkerCallError(f"{kind}: {message}")


class WorkerCallError(Exception):
    """The model raised, in its worker, an exception that could not be sent back as it was.
    Not a ModelError: like any failed model call it fails those turns, it does not stop extraction."""


# ------------------------------------------------------------ one worker per model per process

_LIVE: weakref.WeakSet[WorkerLLM] = weakref.WeakSet()  # stopped at exit (one dropped earlier: at its pipe's end)


def shared(key: tuple, factory: Factory, *, timeout: float, label: str | None = None) -> WorkerLLM:
    """The process's WorkerLLM for key (the model and how it is loaded), made on first use."""
    return loaded.once("worker", (key, timeout), lambda: WorkerLLM(factory, timeout=timeout, label=label))


@atexit.register
def _stop_all() -> None:
    for worker in list(_LIVE):
        try:
            worker.close()
        except Exception:  # at exit: nothing left to tell
            pass


# ------------------------------------------------------------ framing


def _send(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    """The next message, or None at the end of the stream (the other side is gone)."""
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


# ------------------------------------------------------------ the worker's side


def _build(factory: Factory) -> Any:
    if isinstance(factory, str):
        module, _, name = factory.partition(":")
        target: Any = importlib.import_module(module)
        for part in name.split("."):
            target = getattr(target, part)
        factory = target
    return factory()


def _watch_parent(parent: int) -> None:
    """End this worker when its parent is gone (killed mid-call, its pipe not yet read)."""
    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="memdb-worker-parent-watch", daemon=True).start()


def _error(exc: BaseException) -> tuple:
    try:
        pickled: bytes | None = pickle.dumps(exc)
        pickle.loads(pickled)  # an exception whose constructor differs cannot come back
    except Exception:
        pickled = None
    return ("error", _SAID.take(), type(exc).__name__, str(exc), pickled, isinstance(exc, ModelError))


class _Said(logging.Handler):
    """The memdb log lines of this worker since the last reply, sent back with it."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.levelno, record.getMessage()))

    def take(self) -> list[tuple[int, str]]:
        lines, self.lines = self.lines, []
        return lines


_SAID = _Said()


def serve() -> None:
    """The worker's loop: build the model from the first message, then answer calls until the
    parent closes the pipe."""
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    quiet = os.open(os.devnull, os.O_RDONLY)
    os.dup2(quiet, 0)
    os.dup2(2, 1)  # stray prints (llama.cpp's, the model's) go to stderr, never into a reply
    os.close(quiet)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("memdb").setLevel(logging.INFO)  # llama.cpp's own lines are debug: not sent
    logging.getLogger("memdb").addHandler(_SAID)
    first = _receive(requests)
    if first is None:
        return
    _, hello = first
    _watch_parent(hello["parent"])
    try:
        model = _build(pickle.loads(hello["factory"]))
        _send(replies, ("ok", _SAID.take(), {"name": model.name, "sha256": model.sha256, "pid": os.getpid()}))
    except BaseException as exc:  # a model that cannot be built: say why, then leave
        _send(replies, _error(exc))
        return
    while True:
        message = _receive(requests)
        if message is None:
            return
        try:
            if message[0] == "call":
                _, method, args, kwargs = message
                result = getattr(model, method)(*args, **kwargs)
            else:  # ("get", attribute)
                result = getattr(model, message[1], None)
            reply: tuple = ("ok", _SAID.take(), result)
        except Exception as exc:
            reply = _error(exc)
        _send(replies, reply)


if __name__ == "__main__":
    serve()
