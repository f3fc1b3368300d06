"""The extraction model of a Memory: the one open() named, made on first use, recorded in the
file, and its tokenizer for token budgets.

A URL is an OpenAI-compatible server (llama-server, Ollama's /v1, LM Studio); anything else is
a GGUF (the bundled model by default, or $MEMDB_LLM) run in a worker process of its own
(Settings.model_worker). It is made outside the Memory's lock: reads never wait for a model to
start or load.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

import apsw

from . import text
from .db import connection
from .models.protocols import LLM
from .settings import Settings

# What open(llm=) takes: a GGUF path, a server URL, an LLM object, or None for the default.
LLMSpec = str | os.PathLike[str] | LLM | None


class Extractor:
    """The model slot of one Memory: given as an object, or made from spec on first use."""

    def __init__(self, llm: Any, *, threads: int | None, settings: Settings) -> None:
        given = llm if hasattr(llm, "complete") else None
        self.spec: str | None = None if given else (os.fspath(llm) if llm else os.environ.get("MEMDB_LLM") or None)
        self.model: Any = given
        self.threads = threads
        self.settings = settings
        self.recorded = False
        self._lock = threading.Lock()  # making the model

    def get(self, conn: apsw.Connection, lock: threading.RLock, *, read_only: bool) -> LLM:
        """The model, made the first time (raises ModelError if it cannot load), its name and
        sha256 then written to the file's meta (memdb stats: llm), by a writer only."""
        with self._lock:
            if self.model is None:
                self.model = self.make()
            if not self.recorded and not read_only:  # a model given as an object is recorded too
                name, digest = self.model.name, self.model.sha256  # a worker starts here and verifies the file
                with lock, connection.write(conn):
                    connection.set_meta(conn, "llm_name", name)
                    connection.set_meta(conn, "llm_sha256", digest)
                self.recorded = True
            return self.model

    def make(self) -> LLM:
        """The model the spec names: an endpoint for a URL, else a GGUF, in a worker process
        unless settings.model_worker is off."""
        from .models import endpoint, llama, worker

        spec, extra = self.spec, self.settings.model_extra_buffers
        if spec and spec.startswith(("http://", "https://")):
            return endpoint.EndpointLLM(spec, model=os.environ.get("MEMDB_LLM_MODEL") or None)
        local = llama.load_llm(spec, threads=self.threads, extra_bufts=extra)  # cheap: checks the file is there
        if not self.settings.model_worker:
            return local
        return worker.shared(("llama", spec, local.threads, extra),
                             functools.partial(llama.load_llm, spec, threads=local.threads, extra_bufts=extra),
                             timeout=self.settings.model_timeout, label=local.name)

    def count_tokens(self, line: str) -> int:
        """Tokens of line with the model's tokenizer (an estimate if unavailable)."""
        try:
            from .models import llama

            return llama.count_tokens(self.model if hasattr(self.model, "count_tokens") else self.spec, line)
        except Exception:  # no model: an estimate still keeps the budget roughly right
            return text.approx_tokens(line)
