"""A chat agent with long-term memory: a model writes the replies, memdb remembers.

    python examples/chat.py agent.db --user me                      # the bundled Qwen2.5 0.5B, offline
    python examples/chat.py agent.db --user me --model ~/models/qwen2.5-7b-instruct-q4_k_m.gguf
    python examples/chat.py agent.db --user me --model http://localhost:11434 --model-name qwen2.5:7b
    printf 'I keep bees.\\nWhat do I keep?\\n' | python examples/chat.py agent.db --user me

--model is a GGUF run by llama.cpp in this process, or the URL of an OpenAI-compatible server
(llama-server, Ollama, LM Studio; $MEMDB_LLM_API_KEY is sent as its key).

Before each reply it asks memdb for the context of the user's message (what it remembers that
matters, under a token budget) and puts it in the system prompt; after the reply it adds the
exchange, so the next conversation, in this process or a later one, knows it. One model is
loaded for both: the chat and memdb's extraction share it when --model is the extraction model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from collections.abc import Callable, Iterable
from typing import TextIO

import memdb

SYSTEM = ("You are a helpful, concise assistant with long-term memory of the user. "
          "Use what you remember when it helps; do not make things up.")
Reply = Callable[[list[dict[str, str]]], str]


def chat(mem: memdb.Memory, reply: Reply, lines: Iterable[str], *, user: str, session: str = "chat",
         budget: int = 300, history: int = 6, show_context: bool = False, out: TextIO = sys.stdout) -> int:
    """Answer each line with memory: context() before the reply, add() after. Returns replies made."""
    recent: list[dict[str, str]] = []  # this conversation's last turns: the short-term memory
    replies = 0
    for line in lines:
        said = line.strip()
        if not said:
            continue
        remembered = mem.context(said, user=user, budget=budget, session=session)
        if show_context:
            print(f"[memory]\n{remembered or '(nothing yet)'}", file=out)
        system = SYSTEM + (f"\n\n{remembered}" if remembered else "")  # the block starts with its own header
        answer = reply([{"role": "system", "content": system}, *recent[-history:],
                        {"role": "user", "content": said}]).strip() or "…"
        print(f"assistant> {answer}", file=out, flush=True)
        exchange = [{"role": "user", "content": said}, {"role": "assistant", "content": answer}]
        mem.add(exchange, user=user, session=session)
        recent += exchange
        replies += 1
    return replies


def llama_reply(model: str | None, *, threads: int, max_tokens: int) -> Reply:
    """Replies from a GGUF run by llama.cpp (None: memdb's bundled model), the same loaded
    model memdb extracts with when it is the extraction model too."""
    from memdb.models.llama import load_llm

    llama = load_llm(model, threads=threads).model()

    def reply(messages: list[dict[str, str]]) -> str:
        out = llama.create_chat_completion(messages=messages, max_tokens=max_tokens, temperature=0.7)
        return out["choices"][0]["message"]["content"] or ""

    return reply


def endpoint_reply(url: str, model: str | None, *, max_tokens: int, timeout: float = 120.0) -> Reply:
    """Replies from an OpenAI-compatible server's /chat/completions (model None: the first
    model the server lists)."""
    from memdb.models.endpoint import API_KEY_ENV, EndpointLLM, api_base

    base = api_base(url)
    name = model or EndpointLLM(url).name  # asks {base}/models for the first id
    headers = {"Content-Type": "application/json"}
    if os.environ.get(API_KEY_ENV):
        headers["Authorization"] = f"Bearer {os.environ[API_KEY_ENV]}"

    def reply(messages: list[dict[str, str]]) -> str:
        body = {"model": name, "messages": messages, "max_tokens": max_tokens, "temperature": 0.7}
        request = urllib.request.Request(f"{base}/chat/completions", data=json.dumps(body).encode("utf-8"),
                                         headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read())
        return answer["choices"][0]["message"]["content"] or ""

    return reply


def prompted(stream: TextIO) -> Iterable[str]:
    """Lines of stream, with a prompt when a person is typing."""
    while True:
        if stream.isatty():
            print("you> ", end="", flush=True)
        line = stream.readline()
        if not line:
            return
        yield line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A local chat agent with memdb as its long-term memory.")
    parser.add_argument("db", help="the memdb file (created if missing)")
    parser.add_argument("--user", "-u", default="me", help="whose memory")
    parser.add_argument("--session", "-s", default="chat")
    parser.add_argument("--model", default=None, help="a chat GGUF (default: the bundled Qwen2.5 0.5B) or the "
                        "URL of an OpenAI-compatible server; also extracts memories unless --llm says otherwise")
    parser.add_argument("--model-name", default=os.environ.get("MEMDB_LLM_MODEL") or None,
                        help="with a --model URL: the server's model (default: the first it lists)")
    parser.add_argument("--llm", default=None, help="the extraction model: a GGUF or an OpenAI-compatible URL")
    parser.add_argument("--budget", type=int, default=300, help="tokens of memory put before each reply")
    parser.add_argument("--max-tokens", type=int, default=256, help="the longest reply, in tokens")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for the model")
    parser.add_argument("--show-context", action="store_true", help="print the memory block before each reply")
    args = parser.parse_args(argv)
    served = (args.model or "").startswith(("http://", "https://"))
    if served:
        reply = endpoint_reply(args.model, args.model_name, max_tokens=args.max_tokens)
    else:
        reply = llama_reply(args.model, threads=args.threads, max_tokens=args.max_tokens)
    llm = args.llm or args.model
    if served and not args.llm:  # extraction on the same server and model
        from memdb.models.endpoint import EndpointLLM

        llm = EndpointLLM(args.model, model=args.model_name)
    # A local chat model already runs in this process: when it extracts too, memdb uses the
    # same loaded weights here rather than a second copy in its model worker.
    shared = memdb.Settings(model_worker=bool(args.llm) or served)
    with memdb.open(args.db, llm=llm, threads=args.threads, settings=shared) as mem:
        chat(mem, reply, prompted(sys.stdin), user=args.user, session=args.session,
             budget=args.budget, show_context=args.show_context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
