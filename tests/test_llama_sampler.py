"""memdb's greedy grammar sampler reads private attributes of llama-cpp-python behind one
function (llama._internals): what they give on the pinned version, and the public API taking
over when they are gone."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from memdb.models import llama

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}, "required": ["a"]}


def test_the_installed_llama_cpp_python_is_the_pinned_one() -> None:
    # _internals reads attributes of this version: a new pin means checking them again (the
    # model test below), not a silent fallback to the slower public sampler
    import llama_cpp

    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (pinned,) = [re.sub(r"^llama-cpp-python==", "", d) for d in dependencies if d.startswith("llama-cpp-python==")]
    assert pinned == llama_cpp.__version__


class PublicOnly:
    """A Llama with the public API alone (tokenize, create_completion), as a later
    llama-cpp-python that renamed its private attributes would look to memdb."""

    metadata = {"tokenizer.chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"}
    n_tokens = 0

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        return list(text[:5])

    def create_completion(self, **kwargs) -> dict:
        self.calls.append(kwargs)
        return {"choices": [{"text": '{"a":["Ivo | has | a dog"]}'}], "usage": {"completion_tokens": 9}}


def test_without_the_private_attributes_the_public_sampler_answers() -> None:
    llm = llama.LlamaLLM(Path("unused.gguf"), name="public-only", threads=1)
    fake = llm._llama = PublicOnly()
    messages = [{"role": "user", "content": "Ivo: I have a dog."}, {"role": "assistant", "content": '{"a":['}]
    assert '{"a":["Ivo | has | a dog"]}' == llm.complete(messages, schema=SCHEMA, max_tokens=40)
    (call,) = fake.calls
    assert (list(b"<|im_"), 0.0, 40, ["<|im_end|>"]) == (call["prompt"], call["temperature"], call["max_tokens"],
                                                         call["stop"])
    assert call["grammar"] is llm._grammar(SCHEMA)  # the schema's grammar, by the public API
    assert (1, 9) == (llm.stats["calls"], llm.stats["generated_tokens"])


def test_internals_name_the_version_when_an_attribute_is_gone() -> None:
    import llama_cpp

    with pytest.raises(llama._GrammarUnavailable, match=f"llama-cpp-python {re.escape(llama_cpp.__version__)} has no"):
        llama._internals(PublicOnly())
    with pytest.raises(llama._GrammarUnavailable, match="keeps no GBNF text"):
        llama._grammar_text(object())


@pytest.mark.model
def test_the_private_attributes_give_what_the_sampler_needs() -> None:
    llm = llama.load_llm(threads=2)
    model = llm.model()
    grammar = llm._grammar(SCHEMA)
    assert 'root ::= "{" space a-kv "}" space' in llama._grammar_text(grammar).splitlines()  # the schema's GBNF
    messages = [{"role": "system", "content": "Reply with JSON."}, {"role": "user", "content": "Ivo: I have a dog."}]
    tokens = model.tokenize(llama._render_chatml(messages).encode(), add_bos=True, special=True)
    ours, generated = llama._greedy(model, tokens, llama._grammar_text(grammar), 30, 0)
    inside = llama._internals(model)
    held = inside.held()
    assert tokens == held[: len(tokens)] and len(tokens) + generated - 1 <= len(held)  # the KV cache's tokens
    assert inside.forget_after(len(tokens))  # the cache can be cut back to the prompt
    assert bool(inside.ctx) and bool(inside.model)
    theirs = model.create_completion(tokens, grammar=grammar, temperature=0.0, max_tokens=30, stop=["<|im_end|>"])
    assert theirs["choices"][0]["text"] == ours  # the lazy check picks what the public sampler picks
