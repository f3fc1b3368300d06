"""examples/chat.py, fed piped input: memory goes into the prompt before each reply, and each
exchange is added after it."""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
from pathlib import Path

import pytest

import memdb
from tests.test_endpoint import stub  # noqa: F401 - the stub OpenAI-compatible server, a fixture

SCRIPT = Path(__file__).resolve().parent.parent / "examples" / "chat.py"


def load_example():
    spec = importlib.util.spec_from_file_location("chat_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_reply_sees_what_earlier_turns_said_and_each_exchange_is_stored(mem):
    example = load_example()
    prompts: list[list[dict]] = []

    def reply(messages):
        prompts.append(messages)
        return f"reply {len(prompts)}"

    out = io.StringIO()
    piped = io.StringIO("I keep bees on my roof.\n\n   \nWhat do I keep on my roof?\n")
    made = example.chat(mem, reply, example.prompted(piped), user="ana", out=out)
    assert 2 == made
    assert "assistant> reply 1\nassistant> reply 2\n" == out.getvalue()  # no prompt: stdin is not a terminal
    first, second = prompts
    assert mem.settings.context_header not in first[0]["content"]  # nothing remembered yet
    assert "I keep bees on my roof." in second[0]["content"]  # context() before the reply
    assert ["system", "user", "assistant", "user"] == [m["role"] for m in second]
    turns = [(t["role"], t["content"]) for t in mem.export("ana") if t["type"] == "turn"]
    assert [("user", "I keep bees on my roof."), ("assistant", "reply 1"),
            ("user", "What do I keep on my roof?"), ("assistant", "reply 2")] == turns


@pytest.mark.model
def test_the_example_chats_with_the_bundled_model_from_piped_input(tmp_path):
    db = tmp_path / "chat.db"
    run = subprocess.run([sys.executable, str(SCRIPT), str(db), "--user", "ana", "--max-tokens", "12",
                          "--threads", "2", "--show-context"],
                         input="I keep bees on my roof.\nWhat do I keep on my roof?\n",
                         capture_output=True, text=True, timeout=600)
    assert 0 == run.returncode, run.stderr
    assert 2 == run.stdout.count("assistant> ")
    second_memory = run.stdout.split("[memory]")[2]
    assert "bees" in second_memory
    with memdb.open(db, embedder=None, extract="defer") as mem:
        assert ["user", "assistant", "user", "assistant"] == [
            t["role"] for t in mem.export("ana") if t["type"] == "turn"]


def test_the_example_replies_from_an_openai_compatible_endpoint(tmp_path, stub, cache):
    stub.reply = "You keep bees."
    db = tmp_path / "chat.db"
    run = subprocess.run([sys.executable, str(SCRIPT), str(db), "--user", "ana", "--model", stub.url,
                          "--model-name", "other-model"],
                         input="I keep bees on my roof.\n", capture_output=True, text=True, timeout=600)
    assert 0 == run.returncode, run.stderr
    assert "assistant> You keep bees.\n" == run.stdout
    chats = [r["body"] for r in stub.requests if r["path"] == "/v1/chat/completions"]
    replies = [c for c in chats if c.get("temperature") == 0.7]  # the reply; extraction asks at temperature 0
    assert ["other-model"] == [c["model"] for c in replies]
    assert "I keep bees on my roof." == replies[0]["messages"][-1]["content"]
