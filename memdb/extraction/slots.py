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
from . import lexicon, persons

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


def names_every_value(key: str, value: str) -> bool:
    """Whether value is the attribute's own word ("pet", 宠物): an ending of it ends every value."""
    every = lexicon.table("attributes").get(key, {}).get("every", ())
    return value.strip().lower() in every


def _pattern(phrase: str, lang: str) -> re.Pattern[str]:
    # "*" stands for one word (Chinese: a few characters), "@list" for a word of that list of
    # en.toml; the value is the span from the first such place to the last.
    phrase, _, given = phrase.partition("=")
    if given:  # "戒烟=抽烟": the phrase names the value itself
        pattern = _pattern(phrase, lang)
        return re.compile(pattern.pattern.replace("(?P<v>", "(?:") + f"(?P<given_{_given_id(given)}>)", pattern.flags)
    if lang == "zh":  # a "*" that ends the phrase takes the rest of the clause, one inside it the least
        body = re.escape(phrase)
        body = body[:-2] + "(?P<v>[^，,。！？了的]{1,8})" if body.endswith(r"\*") else body
        # "#": an age-sized number, in digits or in Chinese ("35", "二十六"), not a word's 一 (统一)
        body = body.replace(r"\#", r"(?<![0-9一二两三四五六七八九十])(?P<v>[0-9]{2}|[二三四五六七八九]?十[一二三四五六七八九]?)")
        return re.compile(body.replace(r"\*", "(?P<v>[^，,。！？]{1,6}?)"))
    parts = []
    for word in phrase.split():
        if word == "*":
            parts.append((True, r"[\w'-]+(?:\s+[\w'-]+)?"))
        elif word == "#":
            parts.append((True, r"\d{1,3}"))
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
    {"attribute", "value", "polarity"}, the first two only when an attribute is named. A
    subject that is someone's thing ("Ana's favourite drink") is read with its body, so
    "favourite drink is tea" names the attribute; the polarity is that of the part of the note
    the attribute stands in ("left nursing and started a job as a pharmacist": holds)."""
    zh = text.has_cjk(body) or text.has_cjk(subject or "")
    thing = persons.owner_and_thing(subject)[1]
    line = f"{thing} {body}" if thing else body
    # The subject's own name inside a Chinese note ("用户的团队后端用 Go") is no attribute's phrase:
    # masked while the phrases are sought, put back in the value.
    owner = persons.owner_and_thing(subject)[0] if subject else ""
    mask = "\ue000" * len(owner)
    if zh and owner:
        line = line.replace(owner, mask)
    plain = line
    if zh:  # "扛不住" is no 住: such words are masked too, the same length (zh.toml: not_attribute_words)
        for word in lexicon.words("zh", "not_attribute_words"):
            line = line.replace(word, "\ue001" * len(word))
    for attribute in attributes():
        for pattern in attribute.patterns:
            if (pattern.pattern.isascii() or zh) and (m := pattern.search(line)):
                value = _value(m, line, zh)
                if "\ue001" in value:  # the words as said, where the value spans a masked word
                    start = line.find(value)
                    value = plain[start:start + len(value)] if start >= 0 else value.replace("\ue001", "")
                value = value.replace(mask, owner) if mask and value else value
                key = attribute.key
                if key == "favourite" and m.groupdict().get("v"):
                    thing = m.group("v").lower().split()[0]
                    key = "favourite_" + lexicon.table("en")["favourite_kinds"].get(thing, thing)
                    value = _tail(line[m.end():], zh)
                if value:
                    return {"polarity": polarity(_part(line, m.start(), m.end())), "attribute": key, "value": value}
    return {"polarity": polarity(body)}


def _part(line: str, start: int, end: int) -> str:
    # The clause of the note that holds line[start:end]: between " and ", ",", ";" (or 、，；).
    cuts = [0] + [m.end() for m in re.finditer(r",\s*|;\s*|\s+and\s+|\s+but\s+|[，；。]", line) if m.end() <= start]
    after = re.search(r",|;|\s+and\s+|\s+but\s+|[，；。]", line[end:])
    return line[max(cuts): end + (after.start() if after else len(line) - end)]


_GIVEN: dict[str, str] = {}


def _given_id(value: str) -> str:
    key = f"{len(_GIVEN)}"
    _GIVEN.setdefault(value, key)
    return _GIVEN[value]


def _value(m: re.Match, body: str, zh: bool) -> str:
    for name in m.groupdict():
        if name.startswith("given_"):
            return next(v for v, k in _GIVEN.items() if k == name[6:])
    if m.groupdict().get("v"):
        value = m.group("v").strip(" ,，")
        # "任何 ORM 框架" names ORM: a Chinese determiner is no value (zh.toml: value_leads)
        return re.sub(rf"^(?:{lexicon.alternation('zh', 'value_leads').pattern})\s*", "", value) if zh else value
    return _tail(body[m.end():], zh) or m.group(0).strip()  # "is single", "吃素": the phrase is the value


def _tail(rest: str, zh: bool) -> str:
    if zh:
        rest = re.sub(r"^的?是", "", rest.strip(" ，,"))
        rest = re.sub(rf"^(?:{lexicon.alternation('zh', 'value_leads').pattern})\s*", "", rest)
        rest = re.split(r"[，,。！？；;、\s]", rest)[0]
        return re.sub(r"[了的啦呢吧啊呀]+$", "", rest[:MAX_VALUE_CHARS_ZH])
    rest = re.split(r"[,.;:!?()]", rest.strip(" ,"))[0]
    ends = lexicon.alternation("en", "value_ends")
    cut = ends.search(rest)
    if cut:
        rest = rest[:cut.start()]
    words = [w for w in rest.split() if w.lower() not in ("a", "an", "the", "some", "my", "his", "her", "their")]
    return " ".join(words[:MAX_VALUE_WORDS])


def polarity(body: str) -> str:
    """"ended" when the note says something stopped holding, "never" when it is negated,
    else "holds"."""
    lang = "zh" if text.has_cjk(body) else "en"
    if lang == "zh":  # 不错, 不过, 不少 hold a 不 that negates nothing (zh.toml: not_negation)
        body = lexicon.alternation("zh", "not_negation").sub("", body)
    ended = lexicon.alternation(lang, "ended").search(body)
    if ended and not (lang == "en" and lexicon.alternation("en", "not_an_ending").match(body[ended.end():].lstrip())):
        return "ended"
    if lexicon.alternation(lang, "never").search(body):
        return "never"
    return "holds"
