"""Grounding: an atom the turn does not support is dropped, with the reason counted.

The checks catch what a small model does wrong: nothing said beyond names, small talk, words
the prompt's example copied, the whole line pasted, names or words
the turn never said, another language than the turn's.
"""

from __future__ import annotations

import re

from .. import text, timeparse
from .prefilter import PHATIC_WORDS
from .persons import owner_and_thing
from .prompt import FEWSHOT_MARKERS

# Latin letters and digits only: in "8月我们全家" the entity is "8", not the whole run of
# characters (\w would take the Chinese too, and a renamed "我们" would fail the check).
_LATIN_ENTITY = re.compile(r"(?<![A-Za-z0-9'’-])(?:[A-Z][A-Za-z0-9'’-]*|[A-Za-z0-9-]*\d[A-Za-z0-9-]*)(?![A-Za-z0-9'’-])")


def ground(record: dict, source: str, names: set[str], *, extractive: bool = False) -> str | None:
    """Why record is not supported by the source text, or None when it is.

    `source` is the text of the atom's own turn; `names` are the speakers' names (allowed even when
    the turn does not spell them: "I" became the speaker's name). Checks, in order: nothing said
    beyond names, only small talk, copied from the prompt's examples,
    a whole line pasted, named things (capitalised words, numbers) absent, another language than
    the turn's, most content words absent (CJK: bigrams; Latin: crude stems).
    """
    low_source = source.lower()
    name_words = {w.lower() for n in names for w in text.WORD.findall(n)} | {"user", "用户"}
    thing = owner_and_thing(record.get("subject") or "")[1]
    # A Chinese note's written date ("2026年11月18日") is the date a phrase of the turn named: the
    # note is checked without it.
    record = {f: timeparse.without_zh_dates(v) if isinstance(v, str) else v for f, v in record.items()}
    said = " ".join([thing, *(record.get(f, "") for f in ("predicate", "object"))])  # "Ana's Oslo trip | is off"
    said_terms = [w for w in text.terms(said) if w not in name_words]
    if not said_terms:
        return "no content"
    if all(w in PHATIC_WORDS for w in said_terms):
        return "small talk"
    body = " ".join(record.get(f, "") for f in ("subject", "predicate", "object", "outcome"))
    content = " ".join(record.get(f, "") for f in ("subject", "object", "outcome"))
    words = [w.lower() for w in text.WORD.findall(content)]
    if any(w in FEWSHOT_MARKERS and w not in low_source for w in words) or any(
            m in content and m not in source for m in FEWSHOT_MARKERS if text.has_cjk(m)):
        return "copied from examples"
    if not extractive and _pasted(body, source):  # an extractive note is the turn's words by design
        return "whole line pasted"
    for entity in _LATIN_ENTITY.findall(body):
        entity = re.sub(r"['’]s$", "", entity)  # "Rosalind's school": the name is Rosalind
        if entity.lower() not in low_source and entity.lower() not in name_words and entity.lower() not in ("i",):
            if not any(entity.lower() in n.lower() for n in names):
                return f"entity not in source: {entity!r}"
    if text.has_cjk(body) and not text.has_cjk(source):
        return "not in the turn's language"
    if text.has_cjk(source):
        grams = text.cjk_bigrams(content) - {g for n in names for g in text.cjk_bigrams(n)}
        if grams and sum(g in source for g in grams) < len(grams) / 2:
            return "words not in source"
        if not text.has_cjk(body):
            return "not in the turn's language"
    # Word starts (six letters) meet across derivations: "counseling" supports "counselor".
    source_stems = {text.stem(w)[:6] for w in text.WORD.findall(source)}
    terms = [w for w in text.terms(content) if not text.has_cjk(w) and w not in name_words]
    if terms and sum(text.stem(w)[:6] in source_stems for w in terms) < len(terms) / 2:
        return "words not in source"
    return None


def _pasted(body: str, source: str) -> bool:
    """The atom is (nearly) the speaker's whole line: it restates instead of distilling."""
    if text.has_cjk(source):
        src = re.sub(r"\W", "", source)
        atom = re.sub(r"\W", "", body)
        return len(src) >= 12 and len(atom) >= 0.8 * len(src)
    src_words = text.WORD.findall(source.lower())
    atom_words = set(text.WORD.findall(body.lower()))
    if len(src_words) < 10:
        return False
    covered = sum(w in atom_words for w in src_words)
    return covered >= 0.8 * len(src_words)
