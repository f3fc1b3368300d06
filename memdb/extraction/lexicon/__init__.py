"""Word lists and patterns as data: one TOML file per language (en.toml, zh.toml) and one of
attributes (attributes.toml), each list with a comment that says what it is for. Code asks
for a list by name; the files are read once per process."""

from __future__ import annotations

import functools
import importlib.resources
import re
import tomllib
from typing import Any


@functools.cache
def table(name: str) -> dict[str, Any]:
    """The parsed file `name`.toml of this package."""
    raw = importlib.resources.files(__package__).joinpath(f"{name}.toml").read_text(encoding="utf-8")
    return tomllib.loads(raw)


def words(lang: str, name: str) -> tuple[str, ...]:
    """The list `name` of lang's file, longest phrase first (so "oh and" goes before "oh")."""
    return tuple(sorted(table(lang)[name], key=len, reverse=True))


@functools.cache
def alternation(lang: str, name: str) -> re.Pattern[str]:
    """One pattern matching any phrase of the list as whole words (English) or as a substring
    (Chinese). "*" in a phrase stands for one to three words (English) or up to four characters (Chinese);
    "…" for up to four characters between two Chinese parts (不…了)."""
    parts = []
    for phrase in words(lang, name):
        body = re.escape(phrase).replace(r"\*", r"[\w'-]+(?:\s+[\w'-]+){0,2}?" if lang == "en" else r"[^，,。！？]{1,4}?")
        body = body.replace("…", r"[^，,。！？]{1,4}?")
        parts.append(rf"(?<![\w'-]){body}(?![\w'-])" if lang == "en" else body)
    return re.compile("|".join(parts), re.I)
