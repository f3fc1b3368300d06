"""An extraction model served over HTTP by an OpenAI-compatible chat endpoint.

memdb's default extraction model runs in-process on the CPU. Users with a GPU can instead run a
bigger model in llama.cpp's ``llama-server``, Ollama (its ``/v1`` API) or LM Studio, and hand
memdb an `EndpointLLM`: it satisfies the `memdb.models.protocols.LLM` protocol with the standard library
only (urllib, json), so it adds no dependency.

What the servers do with ``response_format`` (checked against their sources and trackers):

- llama-server (tools/server/server-common.cpp, ``oaicompat_chat_params_parse``) turns
  ``{"type": "json_schema", "json_schema": {"schema": ...}}`` into a grammar, and also the
  llama.cpp-only ``{"type": "json_object", "schema": ...}``; ``strict`` is not read. Builds from
  before Sept. 2024 refuse ``json_schema`` with "response_format type must be one of "text" or
  "json_object"" as HTTP 500, not 400 (ggml-org/llama.cpp#9522), newer ones answer 400 to a schema
  they cannot convert ("JSON schema conversion failed"), and a schema whose grammar fails to parse
  runs unconstrained with 200 (ggml-org/llama.cpp#19051) — so replies are never trusted blindly.
- Ollama (openai/openai.go, ``FromChatRequest``) maps ``json_schema`` to its ``format`` schema
  (0.5.0 and later) and ``json_object`` to ``format: "json"``; any other type is ignored, never
  refused (older versions ignored ``json_schema`` the same silent way).
- LM Studio accepts ``json_schema`` and ``text`` but refuses ``json_object`` with 400
  "'response_format.type' must be 'json_schema' or 'text'" (lmstudio-bug-tracker#189, #307).

Hence the order: the OpenAI ``json_schema`` form first (every current server constrains with it),
then ``json_object`` carrying the schema under ``schema`` (constrained on old llama-server, plain
JSON mode on Ollama), then no ``response_format``; a refusal is an error status of 400 or 500
whose body names response_format, the schema or the grammar. What works is kept per instance.

memdb's own parser validates every reply anyway, so a server that ignores the schema costs
quality, not correctness.
"""

from __future__ import annotations

import hashlib
import http.client
import ipaddress
import json
import logging
import os
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ..errors import InvalidInput, MemdbError, ModelError
from ..text import approx_tokens

log = logging.getLogger("memdb")

__all__ = ["EndpointLLM", "EndpointError", "api_base"]

API_KEY_ENV = "MEMDB_LLM_API_KEY"
_FORMATS = ("json_schema", "json_object", "none")  # tried in this order; see the module docstring
_REFUSAL = re.compile(r"response_format|json.?schema|grammar", re.IGNORECASE)
_UNUSABLE_STATUS = {401, 403, 404}  # wrong key, wrong URL or unknown model: nothing will work


class EndpointError(MemdbError, RuntimeError):
    """One call to a chat endpoint that has worked before failed (memdb fails those turns only)."""


class _Unreachable(Exception):
    """No HTTP answer at all: connection refused, DNS failure, timeout, connection dropped."""


def api_base(base_url: str) -> str:
    """The URL the OpenAI routes hang off: base_url without a trailing slash, with ``/v1``
    appended unless it already ends in ``/v1``. So "http://localhost:8080" (llama-server),
    "http://localhost:11434/v1" (Ollama) and "http://localhost:1234/v1/" (LM Studio) all work."""
    base = base_url.strip().rstrip("/")
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidInput(f"endpoint base_url must be an http(s) URL such as http://localhost:8080, got {base_url!r}")
    return base if base.endswith("/v1") else base + "/v1"


class EndpointLLM:
    """memdb's extraction model as a remote OpenAI-compatible chat endpoint.

    model=None asks ``{base}/models`` once, here, and takes the first id. Nothing else touches the
    network before the first `complete()`. `timeout` bounds each socket operation, in seconds.
    Errors: ModelError when the endpoint cannot be used at all (listing models fails, or nothing
    has worked yet and the server cannot be reached, refuses the key, URL or model, or does not
    speak JSON); EndpointError for a failed call otherwise, which memdb records on those turns.
    """

    def __init__(self, base_url: str, model: str | None = None, *, api_key: str | None = None,
                 timeout: float = 60.0) -> None:
        self.base_url = api_base(base_url)
        self.timeout = timeout
        self._api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV) or None
        self._opener = _opener_for(self.base_url)
        self._format = 0           # index into _FORMATS: the richest response_format that works
        self._reached = False      # a completion has succeeded: later failures are per call
        self._lock = threading.Lock()
        self.stats: dict[str, int | float] = {"calls": 0, "prompt_tokens": 0, "generated_tokens": 0, "seconds": 0.0}
        self.name = model or self._first_model()

    @property
    def sha256(self) -> str:
        """A stable identity for the file's meta. There are no weights to hash behind an endpoint,
        so "which server, which model" stands in for them: reopening a file with the same endpoint
        and model keeps the identity, pointing it at another changes it. The normalised base
        (always ending in /v1) is hashed, so spelling the URL with or without /v1 does not matter."""
        return hashlib.sha256(f"endpoint:{self.base_url}{self.name}".encode("utf-8")).hexdigest()

    def count_tokens(self, line: str) -> int:
        """An estimate: the server's tokenizer is a round trip away, and budgets only need an estimate."""
        return approx_tokens(line)

    def complete(self, messages: list[dict[str, str]], *, schema: dict, max_tokens: int) -> str:
        """The model's reply to messages, asked for JSON matching schema (see the module docstring).
        A trailing assistant message is a prefill: it is not sent, and is put back in front of a
        reply that continues it (see `_with_prefill`)."""
        prefill, asked = _split_prefill(messages)
        started = time.perf_counter()
        data = self._chat(asked, schema, max_tokens)
        reply = self._reply_text(data)
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        with self._lock:
            self._reached = True
            self.stats["calls"] += 1
            self.stats["prompt_tokens"] += _count(usage, "prompt_tokens")
            self.stats["generated_tokens"] += _count(usage, "completion_tokens")
            self.stats["seconds"] += time.perf_counter() - started
        return _with_prefill(prefill, reply)

    # ------------------------------------------------------------ requests

    def _chat(self, messages: list[dict[str, str]], schema: dict, max_tokens: int) -> dict:
        """The decoded answer of /chat/completions, stepping down the response formats on refusal."""
        url = f"{self.base_url}/chat/completions"
        first = index = self._format
        while True:
            body: dict[str, Any] = {"model": self.name, "messages": messages, "temperature": 0,
                                    "max_tokens": max_tokens, "stream": False}
            response_format = _response_format(_FORMATS[index], schema)
            if response_format is not None:
                body["response_format"] = response_format
            status, raw = self._send(url, body)
            if status < 400:
                break
            if index + 1 < len(_FORMATS) and _refuses_format(status, raw):
                log.debug("memdb: %s refused response_format %s: %s", url, _FORMATS[index], _snippet(raw))
                index += 1
                continue
            raise self._status_error(url, status, raw)
        if index != first:
            with self._lock:
                self._format = max(self._format, index)
            log.info("memdb: %s refuses response_format %s; sending %s from now on", url, _FORMATS[first],
                     "no response_format" if _FORMATS[index] == "none" else _FORMATS[index])
        return self._decode(url, raw)

    def check(self) -> None:
        """Ask the server now whether it has this model: ModelError if it cannot be reached or
        lists the model under no such id (with the ids it has). A server that lists no models
        at all is taken at its word until the first completion. For callers that must know
        before they store anything (`memdb add --llm URL --llm-model NAME`)."""
        ids = self._models(required=False)
        if ids and self.name not in ids:
            raise ModelError(f"{self.base_url}/models lists no model {self.name!r}; it has: "
                             f"{', '.join(map(str, ids[:20]))}")

    def _first_model(self) -> str:
        ids = self._models(required=True)
        if not ids or not isinstance(ids[0], str):
            raise ModelError(f"{self.base_url}/models lists no models; load or pull one in the server, "
                             "or pass model= explicitly")
        return ids[0]

    def _models(self, *, required: bool) -> list:
        """The ids {base}/models lists. An error status or an answer that is not a model list
        raises ModelError when required, else gives []; no answer at all always raises."""
        url = f"{self.base_url}/models"
        advice = "start the server, check base_url, or pass model= explicitly"
        status, raw = self._send(url, None)
        try:
            if status >= 400:
                raise ModelError(f"cannot list the models of {url}: HTTP {status} {_snippet(raw)}; {advice}")
            return [entry["id"] for entry in json.loads(raw).get("data") or []]
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            if required:
                raise ModelError(f"{url} did not return an OpenAI model list ({exc}); {advice}") from exc
        except ModelError:
            if required:
                raise
        return []

    def _send(self, url: str, payload: dict | None) -> tuple[int, bytes]:
        """(status, body) of a GET (payload None) or a JSON POST; error statuses are returned, not
        raised. No answer at all raises ModelError before anything has worked, else EndpointError."""
        headers = {"Accept": "application/json", "User-Agent": "memdb"}
        data = None
        if payload is not None:
            data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(url, data=data, headers=headers,
                                         method="GET" if payload is None else "POST")
        try:
            return self._exchange(request)
        except _Unreachable as exc:
            if not self._reached:
                raise ModelError(f"cannot reach the extraction endpoint {url}: {exc}; start the server "
                                 f"(llama-server, ollama serve, LM Studio) or check base_url") from exc
            raise EndpointError(f"{url} did not answer: {exc}") from exc

    def _exchange(self, request: urllib.request.Request) -> tuple[int, bytes]:
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:  # an answer, with an error status: the caller decides
            try:
                return exc.code, exc.read()
            except OSError:
                return exc.code, b""
            finally:
                exc.close()
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise _Unreachable(self._timed_out()) from exc
            raise _Unreachable(str(exc.reason)) from exc
        except TimeoutError as exc:
            raise _Unreachable(self._timed_out()) from exc
        except (OSError, http.client.HTTPException) as exc:  # e.g. the server closed the connection
            raise _Unreachable(f"{type(exc).__name__}: {exc}") from exc

    def _timed_out(self) -> str:
        return f"no answer within {self.timeout:g}s (a big model may need a larger timeout=)"

    def _status_error(self, url: str, status: int, raw: bytes) -> MemdbError:
        message = f"{url} answered HTTP {status}: {_snippet(raw)}"
        if status in _UNUSABLE_STATUS and not self._reached:
            hint = "check base_url and the model name" if status == 404 else f"set {API_KEY_ENV} or pass api_key="
            return ModelError(f"{message}; {hint}")
        return EndpointError(message)

    def _decode(self, url: str, raw: bytes) -> dict:
        try:
            data = json.loads(raw)
            if isinstance(data, dict):
                return data
        except ValueError:
            pass
        message = f"{url} did not answer with JSON: {_snippet(raw)}"
        if not self._reached:  # an HTML page or another API: this is not an OpenAI-style server
            raise ModelError(f"{message}; is base_url an OpenAI-compatible server?")
        raise EndpointError(message)

    def _reply_text(self, data: dict) -> str:
        try:
            content = data["choices"][0]["message"].get("content")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            message = f"{self.base_url}/chat/completions answered without choices[0].message: {_snippet(data)}"
            if not self._reached:
                raise ModelError(f"{message}; is base_url an OpenAI-compatible server?") from exc
            raise EndpointError(message) from exc
        return content if isinstance(content, str) else ""  # null content: an empty reply


# --------------------------------------------------------------- helpers


def _response_format(kind: str, schema: dict) -> dict | None:
    if kind == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "atoms", "schema": schema, "strict": True}}
    if kind == "json_object":  # "schema" is llama.cpp's extension: old llama-server still constrains
        return {"type": "json_object", "schema": schema}
    return None


def _refuses_format(status: int, raw: bytes) -> bool:
    """Whether an error answer is a refusal of the response_format (old llama-server says so with 500)."""
    return status in (400, 422, 500) and _REFUSAL.search(raw.decode("utf-8", "replace")) is not None


def _split_prefill(messages: list[dict[str, str]]) -> tuple[str, list[dict[str, str]]]:
    """(prefill, messages to send): a trailing assistant message is the prefill, and is not sent.

    OpenAI-style servers do not reliably continue an assistant message (LM Studio and Ollama's /v1
    start a new one), and where llama-server does, its schema grammar constrains the generated
    text alone, so the model would be forced to open a second object after the prefill."""
    if messages and messages[-1].get("role") == "assistant":
        return messages[-1].get("content") or "", messages[:-1]
    return "", list(messages)


def _with_prefill(prefill: str, reply: str) -> str:
    """The whole reply. One that opens like the prefill (its first character) is already whole;
    one that does not is a continuation only if prefill + reply is valid JSON. Anything else is
    returned as is: memdb's parser takes whole JSON objects, lists and fenced JSON."""
    if not prefill or reply.lstrip().startswith(prefill[0]):
        return reply
    try:
        json.loads(prefill + reply)
    except ValueError:
        return reply
    return prefill + reply


def _count(usage: dict, key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and value >= 0 else 0


def _snippet(raw: Any, limit: int = 200) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else json.dumps(raw, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


def _opener_for(base_url: str) -> urllib.request.OpenerDirector:
    """An opener that ignores HTTP(S)_PROXY for loopback hosts: a proxy set for the internet
    would otherwise swallow requests to a server on this machine unless NO_PROXY lists it."""
    host = urllib.parse.urlsplit(base_url).hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    return urllib.request.build_opener(urllib.request.ProxyHandler({}) if loopback else urllib.request.ProxyHandler())
