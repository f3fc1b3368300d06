"""Argument checks shared by every entry point: names, times and ids.

Each check returns the clean value or raises InvalidInput naming the argument, before anything
is written, so bad input never leaves half a change behind.
"""

from __future__ import annotations

import datetime as dt
import os
import unicodedata
from collections.abc import Callable
from typing import Any

from .errors import InvalidInput
from .settings import Settings

# What str.splitlines() breaks on, and tab: none of it belongs in a one-line name.
_LINE_BREAKS = frozenset("\t\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
# Unicode categories no name needs: controls (C0 and C1), format characters (bidi overrides,
# zero-width spaces and joiners, BOM, soft hyphen, tag characters), unassigned, private use,
# surrogates, and separators other than the plain space (line and paragraph separators).
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cn", "Co", "Cs", "Zl", "Zp"})
# Characters that print as nothing though their category is a letter or a mark: Unicode's
# Default_Ignorable_Code_Point set outside Cf/Cn (Hangul fillers, variation selectors, the
# combining grapheme joiner, Mongolian free variation selectors) and the braille blank. "\u3164"
# alone prints as an empty name, "alice\ufe0f" as "alice".
_INVISIBLE_RANGES = ((0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x2800, 0x2800),
                     (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0xE0100, 0xE01EF))
# SQLite integers are signed 64-bit: a larger id can match no row, and apsw raises OverflowError.
MAX_ID = 2**63 - 1


# Times are stored as ISO 8601 text to the second. A time known in UTC (an aware time, or
# the clock of add()) is converted to UTC and ends in "Z"; a naive time is kept as given, no
# marker: its zone is the caller's and unknown to memdb. So a stored time never looks like
# UTC when it is not, nor like local time when it is UTC.
UTC_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
NAIVE_FORMAT = "%Y-%m-%dT%H:%M:%S"


def now() -> str:
    """The current UTC time as memdb stores times: 'YYYY-MM-DDTHH:MM:SSZ'."""
    return dt.datetime.now(dt.timezone.utc).strftime(UTC_FORMAT)


def _iso(value: dt.datetime) -> str:
    # Not strftime("%Y"): on glibc it writes year 999 as "999", which sorts after "2026" and
    # no longer parses; stored times always have four year digits.
    return (f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
            f"T{value.hour:02d}:{value.minute:02d}:{value.second:02d}")


def check_name(value: object, field: str) -> str:
    """A user, session or speaker name: one line of 1-256 printable characters, not all space."""
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be a string, not {type(value).__name__}")
    if not value or len(value) > 256:
        raise InvalidInput(f"{field} must be 1 to 256 characters long")
    check_text(value, field, c1=False)  # a C1 control in a name is reported as invisible, below
    breaks = [ch for ch in value if ch in _LINE_BREAKS]
    if breaks:  # a speaker name is printed into the extraction prompt: one line, or it forges lines
        raise InvalidInput(f"{field} holds {breaks[0]!r}; names are one line of printable text")
    hidden = next((i for i, ch in enumerate(value) if unicodedata.category(ch) in _UNPRINTABLE
                   or any(low <= ord(ch) <= high for low, high in _INVISIBLE_RANGES)), None)
    if hidden is not None:  # "ali\u202ece" shows as "alice" reversed; a zero-width space hides a second user
        raise InvalidInput(f"{field} holds invisible or control character {value[hidden]!r} at position {hidden}; "
                           "names are printable text")
    if value.isspace() or unicodedata.category(value[0]).startswith("M"):
        raise InvalidInput(f"{field} {value!r} has no visible first character; names start with a printable one")
    return value


def check_text(value: str, field: str, *, c1: bool = True) -> None:
    """Valid Unicode without control characters, C0 or C1 (tab and line breaks allowed: \n, \r,
    and U+0085 NEL, which str.splitlines() breaks on as it does on U+2028 and U+2029)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{field} holds a lone surrogate at position {exc.start}; send valid Unicode") from None
    for i, ch in enumerate(value):
        if ch < " " and ch not in "\t\n\r" or ch == "\x7f" or c1 and "\x80" <= ch <= "\x9f" and ch != "\x85":
            raise InvalidInput(f"{field} holds control character {ch!r} at position {i}; strip it first")


def parse_ts(value: object, field: str) -> str:
    """ISO 8601 text for a datetime, a date or an ISO string: aware times in UTC with a "Z",
    naive ones as given without a marker."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise InvalidInput(f"{field} {value[:40]!r} is not an ISO 8601 time such as 2026-10-05T10:00:00") from None
    elif isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, dt.datetime):
        raise InvalidInput(f"{field} must be an ISO 8601 string or a datetime, not {type(value).__name__}")
    if value.tzinfo is not None:
        try:
            return _iso(value.astimezone(dt.timezone.utc)) + "Z"
        except OverflowError:  # 0001-01-01T00:00+05:00 is before year 1 in UTC
            raise InvalidInput(f"{field} {value.isoformat()} is outside the years 1 to 9999 in UTC") from None
    return _iso(value)


def check_id(value: Any, field: str = "id") -> int:
    """One row id: an int that fits SQLite's 64 bits (a bool is not an id)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"{field} must be an integer, not {type(value).__name__}")
    if not -MAX_ID <= value <= MAX_ID:
        raise InvalidInput(f"{field} {value} is too large for an id (ids fit in 64 bits, at most {MAX_ID})")
    return value


def check_ids(ids: Any, field: str) -> list[int]:
    """A list of row ids."""
    # A str is iterable and would be read as one id per character; a None or a dict would
    # reach SQLite as a binding it cannot take.
    if not isinstance(ids, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InvalidInput(f"{field} must be a list of integer ids, not {str(ids)[:60]!r}")
    return [check_id(i, f"{field}[{n}]") for n, i in enumerate(ids)]


def check_texts(texts: Any) -> list[str]:
    """What an embedder embeds: a list of strings."""
    # A lone string would otherwise be embedded character by character.
    if isinstance(texts, str):
        raise InvalidInput("embed() takes a list of strings, not one string: wrap it in a list")
    texts = list(texts)
    for t in texts:
        if not isinstance(t, str):
            raise InvalidInput(f"embed() takes strings, got {type(t).__name__}")
    return texts


def check_count(value: Any, field: str, *, most: int | None = None) -> int:
    """A positive integer, at most `most` when given."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1 and (most is None or value <= most)
    if not ok:
        bound = f"an integer from 1 to {most}" if most is not None else "a positive integer"
        raise InvalidInput(f"{field} must be {bound}, not {value!r}")
    return value


def parse_bound(value: object, field: str, latest: Callable[[], str]) -> str:
    """since= or until=: an ISO time (parse_ts), or a relative date ("yesterday", "last week",
    "上周三") resolved as search resolves one, from latest() (the user's latest turn). A relative
    "until" covers its whole day, month or year."""
    if not isinstance(value, str) or _reads_as_iso(value):
        return parse_ts(value, field)  # its own errors: out of range, and the like
    from . import timeparse

    resolved = timeparse.resolve(value.strip(), latest()) if value.strip() else None
    if resolved is None:
        raise InvalidInput(f"{field} {value[:40]!r} is neither an ISO 8601 time such as 2026-10-05 nor a "
                           "date such as yesterday, last week or 3 days ago")
    return resolved if field == "since" else resolved + "~"  # "~" sorts after any time of that day


def _reads_as_iso(value: str) -> bool:
    """Whether value reads as ISO 8601 at all (a relative date does not)."""
    try:
        dt.datetime.fromisoformat(value.strip())
    except ValueError:
        return False
    return True


EXTRACT_MODES = ("now", "defer")


def check_open(path: object, *, user: object, extract: object, threads: object, settings: object, llm: object,
               read_only: object) -> None:
    """memdb.open()'s arguments (all but the embedder, which loading checks)."""
    if extract not in EXTRACT_MODES:
        raise InvalidInput(f"extract must be one of {', '.join(EXTRACT_MODES)}, not {extract!r}")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise InvalidInput(f"threads must be a positive integer, not {threads!r}")
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidInput(f"path must be a str or os.PathLike, not {type(path).__name__}")
    if not os.fspath(path):  # SQLite reads "" as a temporary file, deleted with every turn at close
        raise InvalidInput('path is empty; give a file path, or ":memory:" for a memory that ends at close')
    if user is not None:
        check_name(user, "user")
    if settings is not None and not isinstance(settings, Settings):  # "fast", a dict: no presets exist
        raise InvalidInput(f"settings must be a memdb.Settings, not {type(settings).__name__} "
                           "(e.g. memdb.Settings(extract_batch=8))")
    if llm is not None and not isinstance(llm, (str, os.PathLike)) and not hasattr(llm, "complete"):
        raise InvalidInput(f"llm must be a GGUF path or an object with complete(), not {type(llm).__name__}")
    if not isinstance(read_only, bool):
        raise InvalidInput(f"read_only must be True or False, not {read_only!r}")
