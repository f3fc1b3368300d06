"""Atom records: MessagePack with one-letter keys and integer enums, and the canonical line.

An atom's structure is a small dict (kind, subject, predicate, object, sentiment, time, …).
It is stored packed, so the file holds it compactly and every reader agrees on one layout,
and it is rendered as one short canonical line that is indexed, embedded and shown.
"""

from __future__ import annotations

import logging
import re

import msgpack

from .errors import InvalidInput
from .text import is_cjk

log = logging.getLogger("memdb")

# Coded enums. The same codes fill the lookup tables in schema.sql; keep both in step.
KINDS = {"fact": 0, "preference": 1, "constraint": 2, "event": 3}
SENTIMENTS = {"neutral": 0, "like": 1, "dislike": 2}
STATUSES = {"active": 0, "superseded": 1, "conflicting": 2}
ROLES = {"user": 0, "assistant": 1, "system": 2, "tool": 3}
STATES = {"pending": 0, "done": 1, "skipped": 2, "failed": 3}
# Whether a note's attribute holds, no longer holds ("stopped being vegetarian") or never did.
POLARITIES = {"holds": 0, "ended": 1, "never": 2}

KIND_NAMES = {code: name for name, code in KINDS.items()}
SENTIMENT_NAMES = {code: name for name, code in SENTIMENTS.items()}
STATUS_NAMES = {code: name for name, code in STATUSES.items()}
ROLE_NAMES = {code: name for name, code in ROLES.items()}
STATE_NAMES = {code: name for name, code in STATES.items()}
POLARITY_NAMES = {code: name for name, code in POLARITIES.items()}


def codes(table: dict[str, int], *names: str) -> str:
    """The codes of names as an SQL list, "(0, 2)": SQL names its enums through this table,
    never by bare numbers (the codes are constants, so formatting them in is safe)."""
    return "(" + ", ".join(str(table[name]) for name in names) + ")"


# Statuses an atom counts as held with: active, or active and disputed.
HELD = codes(STATUSES, "active", "conflicting")

# Field name in the Python record -> key in the packed record.
SHORT_KEYS = {
    "kind": "k",        # KINDS code
    "subject": "s",     # who or what the atom is about ("Alice", "backend")
    "predicate": "p",   # attribute, relation or preference target ("database", "likes")
    "object": "o",      # value, object or rule ("PostgreSQL", "sci-fi movies")
    "sentiment": "e",   # SENTIMENTS code, preferences only
    "domain": "d",      # optional grouping ("food", "movies")
    "date": "t",        # resolved ISO date of an event ("2023-05-07")
    "when": "w",        # the time expression as said ("last Wednesday")
    "outcome": "x",     # an event's result, optional
    "lang": "l",        # "en" or "zh": the language the atom is written in
    "attribute": "a",   # the slot it fills: a canonical key ("lives_in", "likes", "favourite_drink")
    "value": "v",       # the slot's value ("Porto", "vegetarian")
    "polarity": "n",    # POLARITIES code: holds (left out), ended, never
}
LONG_KEYS = {short: long for long, short in SHORT_KEYS.items()}
TEXT_FIELDS = ("subject", "predicate", "object", "domain", "date", "when", "outcome", "lang", "attribute", "value")
MAX_FIELD_CHARS = 300


def validate(record: dict) -> dict:
    """Return a clean copy of record, or raise InvalidInput naming the bad field."""
    if not isinstance(record, dict):
        raise InvalidInput(f"an atom record must be a dict, not {type(record).__name__}")
    unknown = set(record) - set(SHORT_KEYS)
    if unknown:
        raise InvalidInput(f"unknown atom field(s): {', '.join(sorted(unknown))}")
    kind = record.get("kind")
    if kind not in KINDS:
        raise InvalidInput(f"atom field 'kind' must be one of {', '.join(KINDS)}, not {kind!r}")
    clean: dict = {"kind": kind}
    for field in TEXT_FIELDS:
        value = record.get(field)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise InvalidInput(f"atom field {field!r} must be a string, not {type(value).__name__}")
        value = " ".join(value.split())
        if len(value) > MAX_FIELD_CHARS:
            raise InvalidInput(f"atom field {field!r} is longer than {MAX_FIELD_CHARS} characters")
        if value:
            clean[field] = value
    if not clean.get("object") and not clean.get("predicate"):
        raise InvalidInput("an atom needs at least an 'object' or a 'predicate'")
    sentiment = record.get("sentiment", "neutral")
    if sentiment not in SENTIMENTS:
        raise InvalidInput(f"atom field 'sentiment' must be one of {', '.join(SENTIMENTS)}, not {sentiment!r}")
    if sentiment != "neutral":
        clean["sentiment"] = sentiment
    polarity = record.get("polarity", "holds")
    if polarity not in POLARITIES:
        raise InvalidInput(f"atom field 'polarity' must be one of {', '.join(POLARITIES)}, not {polarity!r}")
    if polarity != "holds":
        clean["polarity"] = polarity
    return clean


def pack(record: dict) -> bytes:
    """Pack a validated record with short keys and integer enums."""
    short: dict = {}
    for field, value in record.items():
        if field == "kind":
            value = KINDS[value]
        elif field == "sentiment":
            value = SENTIMENTS[value]
        elif field == "polarity":
            value = POLARITIES[value]
        short[SHORT_KEYS[field]] = value
    return msgpack.packb(short, use_bin_type=True)


def unpack(blob: bytes) -> dict:
    """The inverse of pack: long field names and enum names.

    The file is open to sqlite3 (the README shows how): a record edited by hand that does not
    decode reads as {}, and a field with an unknown key, an unknown enum code or a value that is
    not text is left out, each logged, so that one bad row never stops a read (get, profile,
    export) or a forget; the atom's text column still says what it was."""
    try:
        packed = msgpack.unpackb(blob, raw=False)
    except Exception as exc:  # msgpack raises ExtraData, FormatError, StackError, ValueError, TypeError...
        log.warning("memdb: an atom record does not decode (%s: %s); read as empty", type(exc).__name__, exc)
        return {}
    if not isinstance(packed, dict):
        log.warning("memdb: an atom record is a %s, not a map; read as empty", type(packed).__name__)
        return {}
    record: dict = {}
    for key, value in packed.items():
        field = LONG_KEYS.get(key) if isinstance(key, str) else None
        if field == "kind":
            value = KIND_NAMES.get(value) if isinstance(value, int) else None
        elif field == "sentiment":
            value = SENTIMENT_NAMES.get(value) if isinstance(value, int) else None
        elif field == "polarity":
            value = POLARITY_NAMES.get(value) if isinstance(value, int) else None
        elif not isinstance(value, str):
            value = None
        if field is None or value is None:
            log.warning("memdb: an atom record holds %r: %r, which memdb does not know; left out", key, value)
            continue
        record[field] = value
    return record


def name_of(names: dict[int, str], code: object) -> str:
    """The name of an enum code read from the file; "unknown" for a code edited in by hand."""
    return names.get(code, "unknown") if isinstance(code, int) else "unknown"


def canonical_text(record: dict) -> str:
    """The one line an atom reads as: subject, predicate and object as a short sentence.

    Chinese parts are joined without spaces ("用户喜欢美式咖啡"), others with one space; a
    Chinese object that names the subject itself is the whole line.
    Dates are kept out of the line (they live in the record and in the rendered context).
    """
    parts = [record[f] for f in ("subject", "predicate", "object") if record.get(f)]
    subject, obj = record.get("subject"), record.get("object", "")
    if subject and not record.get("predicate") and any(map(is_cjk, obj)) and subject in obj:
        # "芹菜，那个味儿苏禾受不了", "医生让苏禾戒了咖啡": a Chinese note names its subject where
        # the clause does, never twice
        parts = [obj]
    if record.get("outcome"):
        parts.append(f"({record['outcome']})")
    line = ""
    for part in parts:
        # "Alice喜欢" as Chinese writes a name; "是 PostgreSQL" keeps its space; "苏禾2027年" none
        if line and not is_cjk(part[0]) and not (is_cjk(line[-1]) and part[0].isdigit()):
            line += " "
        line += part
    return line

