"""A note's slots: which attribute of its subject it fills, with what value, and whether the
attribute holds, no longer holds, or never did.

The lifecycle compares notes by these slots (lifecycle/relation.py): a new value of an
attribute that holds one value at a time (lives_in, works_as, a favourite) supersedes the old
note; an ending ("stopped being vegetarian", 不再喝咖啡) supersedes the note it ends; values of
many-valued attributes (likes, allergies, places visited) add up. The attributes and their
phrases are data (lexicon/attributes.toml); the value is the words after the phrase.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from .. import text
from . import lexicon

POLARITIES = ("holds", "ended", "never")
MAX_VALUE_WORDS = 6
MAX_VALUE_CHARS_ZH = 10


@dataclass(frozen=True)
class Attribute:
    key: str
    single: bool
    patterns: tuple[re.Pattern[str], ...]  # English or Chinese phrases, a "v" group where the value sits


@functools.cache
def attributes() -> tuple[Attribute, ...]:
    found = []
    for key, spec in lexicon.table("attributes").items():
        patterns = tuple(_pattern(phrase, "en") for phrase in spec.get("en", ())) + \
            tuple(_pattern(phrase, "zh") for phrase in spec.get("zh", ()))
        found.append(Attribute(key, bool(spec.get("single")), patterns))
    return tuple(found)


def is_single(key: str) -> bool:
    """Whether an attribute holds one value at a time (favourite_<thing> keys do)."""
    base = "favourite" if key.startswith("favourite") else key
    return any(a.single for a in attributes() if a.key == base)


def _pattern(phrase: str, lang: str) -> re.Pattern[str]:
    # "*" stands for one word (Chinese: a few characters), "@list" for a word of that list of
    # en.toml; the value is the span from the first such place to the last.
    if lang == "zh":
        return re.compile(re.escape(phrase).replace(r"\*", "(?P<v>[^，,。！？]{1,6}?)"))
    parts = []
    for word in phrase.split():
        if word == "*":
            parts.append((True, r"[\w'-]+"))
        elif word.startswith("@"):
            parts.append((True, "(?:" + "|".join(map(re.escape, lexicon.words("en", word[1:]))) + ")"))
        else:
            parts.append((False, re.escape(word).replace("'", "['’]")))
    places = [i for i, (slot, _) in enumerate(parts) if slot]
    body = [regex for _, regex in parts]
    if places:
        first, last = places[0], places[-1]
        body[first:last + 1] = ["(?P<v>" + r"\s+".join(body[first:last + 1]) + ")"]
    return re.compile(r"(?<![\w'-])" + r"\s+".join(body) + r"(?![\w'-])", re.I)


def read(subject: str, body: str) -> dict:
    """The slots of a note whose subject is `subject` and whose words after it are `body`:
    {"attribute", "value", "polarity"}, the first two only when an attribute is named."""
    zh = text.has_cjk(body)
    found: dict = {"polarity": polarity(body)}
    for attribute in attributes():
        for pattern in attribute.patterns:
            if (pattern.pattern.isascii() or zh) and (m := pattern.search(body)):
                value = _value(m, body, zh)
                key = attribute.key
                if key == "favourite" and m.groupdict().get("v"):
                    key, value = f"favourite_{m.group('v').lower()}", _tail(body[m.end():], zh)
                if value:
                    found["attribute"], found["value"] = key, value
                    return found
    return found


def _value(m: re.Match, body: str, zh: bool) -> str:
    if m.groupdict().get("v"):
        return m.group("v").strip(" ,，")
    return _tail(body[m.end():], zh)


def _tail(rest: str, zh: bool) -> str:
    if zh:
        rest = re.split(r"[，,。！？；;、\s]", rest.strip(" ，,"))[0]
        return re.sub(r"[了的啦呢吧啊呀]+$", "", rest[:MAX_VALUE_CHARS_ZH])
    rest = re.split(r"[,.;:!?()]", rest.strip(" ,"))[0]
    ends = lexicon.alternation("en", "value_ends")
    cut = ends.search(rest)
    if cut and cut.start() > 0:
        rest = rest[:cut.start()]
    words = [w for w in rest.split() if w.lower() not in ("a", "an", "the", "some", "my", "his", "her", "their")]
    return " ".join(words[:MAX_VALUE_WORDS])


def polarity(body: str) -> str:
    """"ended" when the note says something stopped holding, "never" when it is negated,
    else "holds"."""
    lang = "zh" if text.has_cjk(body) else "en"
    if lexicon.alternation(lang, "ended").search(body):
        return "ended"
    if lexicon.alternation(lang, "never").search(body):
        return "never"
    return "holds"
