"""Ingest: what add() is given, validated into L0 rows, embedded and inserted in order.

Messages are checked whole before anything is written: a bad one raises InvalidInput naming
its index and field, and no turn of the call is stored.
"""

from __future__ import annotations

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
    """Validate what add() was given; return clean dicts or raise InvalidInput naming the field."""
    if isinstance(messages, dict):
        messages = [messages]
    if not isinstance(messages, (list, tuple)):
        raise InvalidInput(f"messages must be a list of dicts, not {type(messages).__name__}")
    if not messages:
        raise InvalidInput("messages is empty; pass at least one {'role': ..., 'content': ...}")
    return [_check_message(m, f"messages[{i}]", default_ts) for i, m in enumerate(messages)]


def _check_message(message: object, where: str, default_ts: str) -> dict:
    if not isinstance(message, dict):
        raise InvalidInput(f"{where} must be a dict with 'role' and 'content', not {type(message).__name__}")
    unknown = set(message) - {"role", "content", "name", "ts"}
    if unknown:
        raise InvalidInput(f"{where} has unknown key(s) {sorted(map(str, unknown))}; allowed: role, content, name, ts")
    content = message.get("content")
    if not isinstance(content, str):
        raise InvalidInput(f"{where}.content must be a string, not {type(content).__name__}")
    if not content.strip():
        raise InvalidInput(f"{where}.content is empty")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidInput(f"{where}.content has {len(content)} characters; the limit is {MAX_CONTENT_CHARS}")
    check_text(content, f"{where}.content")
    role = message.get("role", "user")
    if not isinstance(role, str) or role not in codec.ROLES:  # a list or dict role is unhashable
        raise InvalidInput(f"{where}.role {str(role)[:40]!r} is not one of {', '.join(codec.ROLES)}")
    name = message.get("name")
    if name is not None:
        name = check_name(name, f"{where}.name")
    ts = parse_ts(message["ts"], f"{where}.ts") if message.get("ts") is not None else default_ts
    return {"role": role, "content": content, "speaker": name, "ts": ts}
