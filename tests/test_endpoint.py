"""EndpointLLM against a stub OpenAI-compatible server on 127.0.0.1 (no model, no network)."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from memdb.errors import ModelError
from memdb.models.endpoint import EndpointError, EndpointLLM, api_base

PREFILL = '{"a":['
ATOMS = {"a": ["Anna | likes | green tea"]}
SCHEMA = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}, "required": ["a"]}
MESSAGES = [
    {"role": "system", "content": "Extract atoms as JSON."},
    {"role": "user", "content": "* Anna: I love green tea."},
    {"role": "assistant", "content": PREFILL},
]
# What an old llama-server says to json_schema (ggml-org/llama.cpp#9522).
OLD_LLAMA_REFUSAL = 'response_format type must be one of "text" or "json_object", but got: json_schema'


@dataclass
class Stub:
    """What the stub server answers, and what it was asked."""
    url: str = ""
    reply: str = json.dumps(ATOMS)
    models: list[str] = field(default_factory=lambda: ["stub-model", "other-model"])
    refuse: tuple[str, ...] = ()          # response_format types answered with refuse_status
    refuse_status: int = 400
    fail_status: int | None = None        # answer every chat request with this status
    delay: float = 0.0                    # seconds to wait before answering a chat request
    usage: dict | None = field(default_factory=lambda: {"prompt_tokens": 12, "completion_tokens": 5})
    requests: list[dict] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    def chats(self) -> list[dict]:
        return [r["body"] for r in self.requests if r["path"] == "/v1/chat/completions"]


def _handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # keep pytest output clean
            pass

        def _answer(self, status: int, payload: object) -> None:
            body = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting (timeout test)
                pass

        def do_GET(self) -> None:
            stub.requests.append({"path": self.path, "headers": dict(self.headers), "body": None})
            if self.path == "/v1/models":
                self._answer(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in stub.models]})
            else:
                self._answer(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            stub.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
            kind = (body.get("response_format") or {}).get("type")
            time.sleep(stub.delay)
            if self.path != "/v1/chat/completions":
                self._answer(404, {"error": {"message": "not found"}})
            elif stub.fail_status:
                self._answer(stub.fail_status, {"error": {"code": stub.fail_status, "message": "slot crashed"}})
            elif kind in stub.refuse:
                message = OLD_LLAMA_REFUSAL.replace("json_schema", kind)
                self._answer(stub.refuse_status, {"error": {"code": stub.refuse_status, "message": message}})
            else:
                answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": stub.reply},
                                       "finish_reason": "stop"}]}
                if stub.usage is not None:
                    answer["usage"] = stub.usage
                self._answer(200, answer)

    return Handler


@pytest.fixture
def stub() -> Iterator[Stub]:
    state = Stub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    state.server = server  # lets a test take the server down
    yield state
    server.shutdown()
    server.server_close()
    thread.join(timeout=2)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_request_drops_the_prefill_and_asks_for_the_schema(stub: Stub) -> None:
    llm = EndpointLLM(stub.url, "stub-model")

    llm.complete(MESSAGES, schema=SCHEMA, max_tokens=56)

    (body,) = stub.chats()
    assert MESSAGES[:-1] == body["messages"]
    assert 0 == body["temperature"]
    assert 56 == body["max_tokens"]
    assert "stub-model" == body["model"]
    assert {"type": "json_schema", "json_schema": {"name": "atoms", "schema": SCHEMA, "strict": True}} \
        == body["response_format"]


@pytest.mark.parametrize("reply", [json.dumps(ATOMS, separators=(",", ":")), '"Anna | likes | green tea"]}'],
                         ids=["whole object", "continuation of the prefill"])
def test_reply_comes_back_whole(stub: Stub, reply: str) -> None:
    stub.reply = reply

    out = EndpointLLM(stub.url, "stub-model").complete(MESSAGES, schema=SCHEMA, max_tokens=56)

    assert ATOMS == json.loads(out)
    assert out.startswith(PREFILL)


def test_reply_that_is_not_a_continuation_is_returned_as_is(stub: Stub) -> None:
    stub.reply = "Sure! Here are the atoms: []"

    out = EndpointLLM(stub.url, "stub-model").complete(MESSAGES, schema=SCHEMA, max_tokens=56)

    assert "Sure! Here are the atoms: []" == out


@pytest.mark.parametrize("status", [400, 500])
def test_refused_json_schema_falls_back_to_json_object_and_is_remembered(stub: Stub, status: int,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    stub.refuse, stub.refuse_status = ("json_schema",), status
    llm = EndpointLLM(stub.url, "stub-model")

    with caplog.at_level(logging.INFO, logger="memdb"):
        first = llm.complete(MESSAGES, schema=SCHEMA, max_tokens=56)
        second = llm.complete(MESSAGES, schema=SCHEMA, max_tokens=56)

    kinds = [body["response_format"]["type"] for body in stub.chats()]
    assert ["json_schema", "json_object", "json_object"] == kinds
    assert SCHEMA == stub.chats()[-1]["response_format"]["schema"]
    assert ATOMS == json.loads(first) == json.loads(second)
    assert 1 == sum("response_format" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)


def test_refused_json_object_too_falls_back_to_no_response_format(stub: Stub) -> None:
    stub.refuse = ("json_schema", "json_object")
    llm = EndpointLLM(stub.url, "stub-model")

    llm.complete(MESSAGES, schema=SCHEMA, max_tokens=56)
    llm.complete(MESSAGES, schema=SCHEMA, max_tokens=56)

    formats = [body.get("response_format", {}).get("type") for body in stub.chats()]
    assert ["json_schema", "json_object", None, None] == formats


def test_model_discovered_from_models(stub: Stub) -> None:
    llm = EndpointLLM(stub.url)

    llm.complete(MESSAGES, schema=SCHEMA, max_tokens=56)

    assert "stub-model" == llm.name
    assert ["/v1/models", "/v1/chat/completions"] == [r["path"] for r in stub.requests]
    assert "stub-model" == stub.chats()[0]["model"]


def test_discovery_with_no_models_is_a_model_error(stub: Stub) -> None:
    stub.models = []

    with pytest.raises(ModelError) as caught:
        EndpointLLM(stub.url)

    assert f"{stub.url}/v1/models" in str(caught.value)


def test_server_down_at_discovery_is_a_model_error_naming_the_url() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"

    with pytest.raises(ModelError) as caught:
        EndpointLLM(url, timeout=1)

    assert f"{url}/v1/models" in str(caught.value)


def test_server_down_at_first_call_is_a_model_error_naming_the_url() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    llm = EndpointLLM(url, "m", timeout=1)

    with pytest.raises(ModelError) as caught:
        llm.complete(MESSAGES, schema=SCHEMA, max_tokens=56)

    assert f"{url}/chat/completions" in str(caught.value)


def test_no_answer_in_time_at_first_call_is_a_model_error(stub: Stub) -> None:
    stub.delay = 0.3

    with pytest.raises(ModelError) as caught:
        EndpointLLM(stub.url, "stub-model", timeout=0.1).complete(MESSAGES, schema=SCHEMA, max_tokens=56)

    assert "0.1s" in str(caught.value)
    assert f"{stub.url}/v1/chat/completions" in str(caught.value)


def test_server_down_after_a_call_fails_that_call_only(stub: Stub) -> None:
    llm = EndpointLLM(stub.url, "stub-model", timeout=1)
    llm.complete(MESSAGES, schema=SCHEMA, max_tokens=56)
    assert stub.server is not None
    stub.server.shutdown()
    stub.server.server_close()

    with pytest.raises(EndpointError) as caught:
        llm.complete(MESSAGES, schema=SCHEMA, max_tokens=56)

    assert not isinstance(caught.value, ModelError)
    assert f"{stub.url}/v1/chat/completions" in str(caught.value)


def test_http_500_raises_with_the_status(stub: Stub) -> None:
    stub.fail_status = 500

    with pytest.raises(EndpointError) as caught:
        EndpointLLM(stub.url, "stub-model").complete(MESSAGES, schema=SCHEMA, max_tokens=56)

    assert "HTTP 500" in str(caught.value)
    assert "slot crashed" in str(caught.value)
    assert 1 == len(stub.chats())  # a 500 that does not name response_format is not a refusal


def test_unknown_model_before_any_success_is_a_model_error(stub: Stub) -> None:
    with pytest.raises(ModelError) as caught:
        EndpointLLM(stub.url + "/nowhere", "stub-model").complete(MESSAGES, schema=SCHEMA, max_tokens=56)

    assert "HTTP 404" in str(caught.value)


def test_stats_counted(stub: Stub) -> None:
    llm = EndpointLLM(stub.url, "stub-model")

    llm.complete(MESSAGES, schema=SCHEMA, max_tokens=56)
    llm.complete(MESSAGES, schema=SCHEMA, max_tokens=56)
    stub.usage = None
    llm.complete(MESSAGES, schema=SCHEMA, max_tokens=56)

    assert (3, 24, 10) == (llm.stats["calls"], llm.stats["prompt_tokens"], llm.stats["generated_tokens"])
    assert llm.stats["seconds"] > 0


def test_api_key_from_the_environment(stub: Stub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMDB_LLM_API_KEY", "sk-local")

    EndpointLLM(stub.url, "stub-model").complete(MESSAGES, schema=SCHEMA, max_tokens=56)

    assert "Bearer sk-local" == stub.requests[0]["headers"]["Authorization"]


def test_no_api_key_sends_no_authorization(stub: Stub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMDB_LLM_API_KEY", raising=False)

    EndpointLLM(stub.url, "stub-model").complete(MESSAGES, schema=SCHEMA, max_tokens=56)

    assert "Authorization" not in stub.requests[0]["headers"]


@pytest.mark.parametrize("given", ["http://h:8080", "http://h:8080/", "http://h:8080/v1", "http://h:8080/v1/"])
def test_base_url_with_or_without_v1(given: str) -> None:
    assert "http://h:8080/v1" == api_base(given)


def test_identity_is_stable_and_names_endpoint_and_model() -> None:
    a = EndpointLLM("http://h:8080", "qwen")

    assert a.sha256 == EndpointLLM("http://h:8080/v1/", "qwen").sha256
    assert a.sha256 != EndpointLLM("http://h:8080", "llama").sha256
    assert a.sha256 != EndpointLLM("http://other:8080", "qwen").sha256
    # Pinned: a file records it, so a new spelling of the identity would orphan every file's.
    assert "ccd85b58be11a6ca059157c43176ce87420743de0d6f8482381f85cbaa6180cd" == a.sha256  # of endpoint:http://h:8080/v1qwen


def test_satisfies_the_extraction_protocol_and_estimates_tokens() -> None:
    from memdb.models.protocols import LLM

    llm = EndpointLLM("http://h:8080", "qwen")

    assert isinstance(llm, LLM)
    assert 3 == llm.count_tokens("咖啡馆")
    assert 2 == llm.count_tokens("tea time")  # 8 characters, about 4 per token
