"""Ingest: what add() is given, validated into L0 rows, embedded and inserted in order.

Messages are checked whole before anything is written: a bad one raises InvalidInput naming
its index and field, and no turn of the call is stored.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import apsw
import numpy as np

from . import codec
from .checks import check_name, check_text, parse_ts
from .db import rows
from .errors import InvalidInput
from .index.vectors import turn_text

MAX_CONTENT_CHARS = 1_000_000


def embed_turns(turns: list[dict], embed: Callable[[list[str]], np.ndarray | None]) -> np.ndarray | None:
    """The vectors of checked turns (None without an embedder). Called outside any transaction:
    the embedder's time must not hold the write lock."""
    return embed([turn_text(t["speaker"], t["content"]) for t in turns])


def insert_turns(conn: apsw.Connection, *, user: str, session: str, turns: list[dict],
                 vectors: np.ndarray | None) -> list[int]:
    """Insert checked turns after the session's last one; their ids in order. Call inside write()."""
    seq = rows.next_seq(conn, user, session)
    return [rows.insert_turn(conn, user=user, session=session, seq=seq + i, **turn,
                             vector=None if vectors is None else vectors[i])
            for i, turn in enumerate(turns)]


def check_messages(messages: object, default_ts: str) -> list[dict]:
    """Validate what add() was given; return clean dicts or raise InvalidInput naming the field.

    Messages may come as chat APIs emit them (OpenAI's chat format): content as a list of parts,
    assistant tool calls, tool results. The rule, in one place:
    - text parts are joined with a line break; other parts (images, audio, files) are dropped;
    - an assistant's tool calls are stored in its turn, one line each, "tool call: name(arguments)",
      so the transcript stays whole;
    - a tool result ("role": "tool", or the older "function") is stored as a `tool` turn, its
      speaker the called function's name when the call came in the same add();
    - "developer" is stored as "system"; ids and annotations the API adds are dropped.
    Tool, system and assistant turns are kept as L0 evidence but never extracted into atoms
    (extraction/prefilter.py): memory is about what the user said, and a tool's output can be
    fetched again. A message left with no text at all (only an image) is skipped: it has no id.
    """
    if isinstance(messages, dict):
        messages = [messages]
    if not isinstance(messages, (list, tuple)):
        raise InvalidInput(f"messages must be a list of dicts, not {type(messages).__name__}")
    if not messages:
        raise InvalidInput("messages is empty; pass at least one {'role': ..., 'content': ...}")
    called: dict[str, str] = {}  # tool call id -> function name, to name the tool results
    checked = [_check_message(m, f"messages[{i}]", default_ts, called) for i, m in enumerate(messages)]
    return [turn for turn in checked if turn is not None]


def _check_message(message: object, where: str, default_ts: str, called: dict[str, str]) -> dict | None:
    if not isinstance(message, dict):
        raise InvalidInput(f"{where} must be a dict with 'role' and 'content', not {type(message).__name__}")
    unknown = set(message) - _KEYS - _CHAT_API_KEYS
    if unknown:
        raise InvalidInput(f"{where} has unknown key(s) {sorted(map(str, unknown))}; allowed: "
                           f"{', '.join(sorted(_KEYS))} (and {', '.join(sorted(_CHAT_API_KEYS))} as chat APIs send them)")
    role = message.get("role", "user")
    if not isinstance(role, str) or role not in _ROLE_ALIASES:  # a list or dict role is unhashable
        raise InvalidInput(f"{where}.role {str(role)[:40]!r} is not one of {', '.join(_ROLE_ALIASES)}")
    content = _content_text(message, where, called)
    if content is None:
        return None
    if not content.strip():
        raise InvalidInput(f"{where}.content is empty")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidInput(f"{where}.content has {len(content)} characters; the limit is {MAX_CONTENT_CHARS}")
    check_text(content, f"{where}.content")
    name = message.get("name")
    call_id = _tool_call_id(message, where)
    if name is None and _ROLE_ALIASES[role] == "tool":
        name = called.get(call_id)
    if name is not None:
        name = check_name(name, f"{where}.name")
    ts = parse_ts(message["ts"], f"{where}.ts") if message.get("ts") is not None else default_ts
    return {"role": _ROLE_ALIASES[role], "content": content, "speaker": name, "ts": ts}


_KEYS = frozenset({"role", "content", "name", "ts"})
# Keys of OpenAI-style chat messages that memdb reads (tool_calls, function_call, tool_call_id,
# refusal) or accepts and drops (annotations, audio): a transcript passes as it is.
_CHAT_API_KEYS = frozenset({"tool_calls", "function_call", "tool_call_id", "refusal", "annotations", "audio"})
_ROLE_ALIASES = {**{role: role for role in codec.ROLES}, "developer": "system", "function": "tool"}
_TEXT_PARTS = ("text", "input_text", "output_text")


def _content_text(message: dict, where: str, called: dict[str, str]) -> str | None:
    """The text a message stores: its content (a string, or its text parts joined), then one line
    per tool call; None when the message holds no text at all (an image alone)."""
    content = message.get("content")
    calls = _tool_call_lines(message, where, called)
    if content is None and (calls or isinstance(message.get("refusal"), str)):
        content = message.get("refusal") or ""
    elif isinstance(content, list):
        content = _joined_parts(content, f"{where}.content")
        if not content and not calls:
            return None
    elif not isinstance(content, str):
        raise InvalidInput(f"{where}.content must be a string or a list of parts, not {type(content).__name__}")
    return "\n".join(line for line in [content, *calls] if line)


def _joined_parts(parts: list, where: str) -> str:
    texts = []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            texts.append(part)
        elif not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise InvalidInput(f"{where}[{i}] must be a part like {{'type': 'text', 'text': ...}}, "
                               f"not {str(part)[:40]!r}")
        elif part["type"] in _TEXT_PARTS:
            if not isinstance(part.get("text"), str):
                raise InvalidInput(f"{where}[{i}].text must be a string, not {type(part.get('text')).__name__}")
            texts.append(part["text"])
        # any other part (image_url, input_audio, file, refusal, ...) carries no text to remember
    return "\n".join(t for t in texts if t.strip())


def _tool_call_lines(message: dict, where: str, called: dict[str, str]) -> list[str]:
    calls = message.get("tool_calls")
    if calls is None:
        calls = [] if message.get("function_call") is None else [{"function": message["function_call"]}]
    if not isinstance(calls, list):
        raise InvalidInput(f"{where}.tool_calls must be a list, not {type(calls).__name__}")
    lines = []
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidInput(f"{where}.tool_calls[{i}] must be {{'function': {{'name': ..., 'arguments': ...}}}}")
        arguments = function.get("arguments") or ""
        if not isinstance(arguments, str):  # the API sends a JSON string; a dict from hand-made messages
            try:
                arguments = json.dumps(arguments, ensure_ascii=False)
            except (TypeError, ValueError, RecursionError) as exc:  # a set, a cycle, a NaN-free check, too deep
                raise InvalidInput(f"{where}.tool_calls[{i}].function.arguments must be a JSON string or "
                                   f"JSON-ready data ({type(exc).__name__}: {str(exc)[:80]})") from None
        if isinstance(call.get("id"), str):
            called[call["id"]] = function["name"]
        lines.append(f"tool call: {function['name']}({arguments})")
    return lines


def _tool_call_id(message: dict, where: str) -> str | None:
    call_id = message.get("tool_call_id")
    if call_id is not None and not isinstance(call_id, str):
        raise InvalidInput(f"{where}.tool_call_id must be a string, not {type(call_id).__name__}")
    return call_id
