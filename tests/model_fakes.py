"""Fake extraction models that misbehave the way a native model can: they crash the process
(SIGSEGV), abort, hang or answer, as a control file says at each call. They run in a model
worker (memdb.models.worker), which rebuilds them from these import paths; the control file
lets a test change what the next call does, in whichever worker process answers it."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

REPLY = '{"a": ["Anna | likes | green tea"]}'
LINE = "Green tea, every single time."  # a line the rules take nothing from: the model is asked


class ControlledLLM:
    """Does what the control file says at each call: "ok", "segfault", "abort", "hang",
    "raise" (a Python exception), "exit" (the process leaves with status 3) or "kill" (SIGKILL,
    as the kernel's out-of-memory killer sends)."""

    name, sha256 = "controlled", "c" * 64

    def __init__(self, control: str) -> None:
        self.control = Path(control)

    def complete(self, messages, *, schema, max_tokens):
        mode = self.control.read_text().strip()
        with open(f"{self.control}.calls", "a") as calls:  # how many calls reached a model
            calls.write(f"{os.getpid()} {mode}\n")
        if mode == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif mode == "abort":
            os.abort()
        elif mode == "hang":
            time.sleep(3600)
        elif mode == "exit":
            os._exit(3)
        elif mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif mode == "raise":
            raise ValueError("the fake model refused this prompt")
        return REPLY


class EchoLLM:
    """Answers at once: what a worker costs per call, without a model's own time."""

    name, sha256 = "echo", "e" * 64

    def complete(self, messages, *, schema, max_tokens):
        return REPLY


class ChattyLLM(EchoLLM):
    """Logs as memdb's own models do (a warning, a debug line) while it answers."""

    def complete(self, messages, *, schema, max_tokens):
        logging.getLogger("memdb").warning("memdb: the fake grammar failed; using free JSON")
        logging.getLogger("memdb").debug("llama.cpp: a line nobody needs")
        return REPLY


class BrokenAtBuild:
    """A model whose constructor fails (a missing file, say)."""

    name, sha256 = "broken", "b" * 64

    def __init__(self) -> None:
        raise FileNotFoundError("no weights at /nowhere/model.gguf")


class SlowLLM:
    """Blocks in complete() until released, and says when a call has started (in-process only)."""

    name, sha256 = "slow", "5" * 64

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def complete(self, messages, *, schema, max_tokens):
        self.started.set()
        assert self.release.wait(30), "the test never released the model"
        return REPLY


class InesLLM:
    """The note memdb doctor's probe turn holds ("Weekends are for the allotment — tomatoes this year.")."""

    name, sha256 = "ines", "1" * 64

    def complete(self, messages, *, schema, max_tokens):
        return '{"a": ["Ines | grows | tomatoes at the allotment"]}'


class GarbageLLM:
    """Answers, but never anything extraction can use."""

    name, sha256 = "garbage", "9" * 64

    def complete(self, messages, *, schema, max_tokens):
        return "]} ,,,,,,"


class SlowToBuild(EchoLLM):
    """Takes as long to load as the test wants: says it started (a file beside the control
    file), then waits for the test's release file."""

    def __init__(self, control: str) -> None:
        control_path = Path(control)
        Path(f"{control_path}.building").write_text(str(os.getpid()))
        for _ in range(600):
            if Path(f"{control_path}.release").exists():
                return
            time.sleep(0.05)
        raise TimeoutError("the test never released the build")
