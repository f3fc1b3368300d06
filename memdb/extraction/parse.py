"""Parsing: any model reply → raw atoms, never an exception.

Tolerates what models write instead of the schema (a bare list, other keys, dicts with long or
short keys, prose around the JSON, a reply cut off mid-list), so a bigger or different model
plugs in without changes.
"""

from __future__ import annotations

import json
from typing import Any

from .. import codec
from .prompt import MAX_ATOMS_PER_TURN

MAX_OUTPUT_CHARS = 20_000
_FIELD_ALIASES = {
    "turn": ("n", "t", "turn", "turn_id", "id", "num", "i"),
    "kind": ("k", "kind", "type", "category", "memory_type"),
    "subject": ("s", "subject", "subj", "who", "entity"),
    "predicate": ("p", "predicate", "pred", "relation", "verb", "attribute"),
    "object": ("o", "object", "obj", "value", "content", "target"),
    "when": ("w", "when", "time", "date"),
    "sentiment": ("e", "sentiment", "polarity"),
    "outcome": ("x", "outcome", "result"),
}
_POSITIONS = ("kind", "subject", "predicate", "object", "when")


def parse_output(raw: Any, n_turns: int) -> tuple[list[dict[str, Any]], str | None]:
    """Raw atoms from a model reply, or ([], why) when the reply is unusable as a whole.

    Tolerates what models write instead of the schema: a bare list, other top-level keys, atoms as
    dicts with long or short keys, numbers as strings, a JSON object wrapped in prose or a code
    fence. An atom with a wrong shape is skipped (it is not a reason to fail the whole call).
    Each raw atom is {"kind", "subject", "predicate", "object", "when", "sentiment", "outcome": str,
    optionally "turn": int (1-based, a hint)}, or carries "_invalid": why, so the caller can count it.
    """
    try:
        data, error = _load_json(raw)
        if error:
            return [], error
        items, error = _atom_list(data)
        if error:
            return [], error
        limit = MAX_ATOMS_PER_TURN * max(n_turns, 1) + 5
        atoms = [_raw_atom(item, n_turns) for item in items[:limit]]
        if len(items) > limit:
            atoms.append({"_invalid": f"too many atoms ({len(items)})"})
        return atoms, None
    except Exception as exc:  # the parser must survive anything; say what happened
        return [], f"unparseable output ({type(exc).__name__})"


def _load_json(raw: Any) -> tuple[Any, str | None]:
    if not isinstance(raw, str):
        return None, f"output is {type(raw).__name__}, not text"
    body = raw.strip()
    if len(body) > MAX_OUTPUT_CHARS:
        return None, f"output too long ({len(body)} chars)"
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    try:
        return json.loads(body), None
    except (ValueError, RecursionError):
        pass
    start, end = body.find("{"), body.rfind("}")  # an object wrapped in prose
    if 0 <= start < end:
        try:
            return json.loads(body[start : end + 1]), None
        except (ValueError, RecursionError):
            pass
    salvaged = _close_truncated(body)
    if salvaged is not None:
        return salvaged, None
    snippet = body[:60].replace("\n", " ")
    return None, f"invalid JSON: {snippet!r}" if body else "empty output"


def _close_truncated(body: str) -> Any:
    """A reply cut off mid-list (max_tokens, or a stopped repetition), kept up to its last complete
    element: '{"a":["x | y | z","p | q' → {"a": ["x | y | z"]}. None when nothing complete is left."""
    if not body.startswith("{") or len(body) > MAX_OUTPUT_CHARS:
        return None
    stack: list[str] = []
    cuts: list[tuple[int, str]] = []  # (position of a top-level-list comma, closers needed there)
    in_string = escaped = False
    for i, ch in enumerate(body):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
            if len(stack) > 64:
                return None
        elif ch in "]}":
            if not stack or stack.pop() != ch:
                return None
        elif ch == "," and len(stack) == 2:
            cuts.append((i, "".join(reversed(stack))))
    for position, closers in reversed(cuts[-3:]):
        try:
            return json.loads(body[:position] + closers)
        except (ValueError, RecursionError):
            continue
    return None


def _atom_list(data: Any) -> tuple[list, str | None]:
    if isinstance(data, list):
        # A bare list of atoms, or one atom given as a flat list.
        if data and not isinstance(data[0], (list, dict)):
            return [data], None
        return data, None
    if isinstance(data, dict):
        for key in ("a", "atoms", "memories", "facts", "items", "results", "data"):
            if key in data:
                value = data[key]
                if isinstance(value, list):
                    return value, None
                if isinstance(value, dict):
                    return [value], None
                return [], f"'{key}' is {type(value).__name__}, not a list"
        if any(alias in data for alias in _FIELD_ALIASES["object"] + _FIELD_ALIASES["predicate"]):
            return [data], None
        if not data:
            return [], None  # {} means nothing found
        return [], f"no atom list in output (keys: {', '.join(map(str, list(data)[:5]))})"
    return [], f"output is a JSON {type(data).__name__}, not an object"


def _raw_atom(item: Any, n_turns: int) -> dict[str, Any]:
    if isinstance(item, str):  # "subject | predicate | object | when"
        parts = [part.strip() for part in item.split("|")]
        if len(parts) < 2 or len(parts) > 4:
            return {"_invalid": "not 'subject | predicate | object | when'"}
        names = ("subject", "predicate", "object", "when") if len(parts) > 2 else ("subject", "predicate")
        fields = dict(zip(names, parts))
    elif isinstance(item, list):
        fields = {name: item[i] for i, name in enumerate(_POSITIONS) if i < len(item)}
        if item and isinstance(item[0], int) and not isinstance(item[0], bool):
            fields = {name: item[i + 1] for i, name in enumerate(_POSITIONS) if i + 1 < len(item)}
            fields["turn"] = item[0]  # [turn, kind, subject, predicate, object, when]
        if len(item) < 4:
            return {"_invalid": "atom array too short"}
    elif isinstance(item, dict):
        fields = {}
        lowered = {str(k).lower(): v for k, v in item.items()}
        for name, aliases in _FIELD_ALIASES.items():
            for alias in aliases:
                if alias in lowered:
                    fields[name] = lowered[alias]
                    break
    else:
        return {"_invalid": f"atom is a {type(item).__name__}"}
    atom: dict[str, Any] = {}
    for name, value in fields.items():
        if name == "turn":
            continue
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            return {"_invalid": f"field {name} is a {type(value).__name__}"}
        value = " ".join(str(value).split()).strip(" .;,。；，")
        if len(value) > codec.MAX_FIELD_CHARS:
            return {"_invalid": f"field {name} too long"}
        if value:
            atom[name] = value
    turn = _turn_number(fields.get("turn"), n_turns)
    if turn is not None:
        atom["turn"] = turn  # a hint only: each call reads one turn (extract._extract_turn)
    if not atom.get("object") and not atom.get("predicate"):
        return {"_invalid": "no predicate or object"}
    return atom


def _turn_number(value: Any, n_turns: int) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 1 <= value <= n_turns:
        return value
    return None
