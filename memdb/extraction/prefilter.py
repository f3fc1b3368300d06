"""The pre-filter: turns that carry nothing durable (greetings, thanks, acknowledgements,
questions back, assistant turns) are skipped before any model call. Cheap: rules only.

Its word lists also tell grounding what small talk and addressing the listener look like.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .. import text
from . import lexicon
from .records import Turn

SECOND_PERSON = re.compile(r"\b(?:you|your|yours|yourself|u)\b|你", re.I)
FIRST_PERSON_WORDS = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|me|my|mine|myself)\b|我", re.I)
_GREETING_WORDS = frozenset(lexicon.words("en", "greetings"))
_THANKS_WORDS = frozenset(lexicon.words("en", "thanks"))
PHATIC_WORDS = _GREETING_WORDS | _THANKS_WORDS | frozenset(lexicon.words("en", "acknowledgements"))
_FILLER_WORDS = frozenset(lexicon.words("en", "filler_words"))
_ZH_GREETING = lexicon.words("zh", "greetings")
_ZH_THANKS = lexicon.words("zh", "thanks")
_ZH_ACK = lexicon.words("zh", "acknowledgements")
_ZH_QUESTION_END = re.compile(r"[吗呢吧么][？?。.!！]*$")


def prefilter(turn: Turn, names: Iterable[str] = ()) -> str | None:
    """Why turn carries nothing durable ("greeting", "thanks", "acknowledgement", "question", …),
    or None when it may hold something worth extracting. Cheap: no model involved."""
    if turn.role in ("system", "tool"):
        return f"{turn.role} turn"
    if turn.role == "assistant":
        return "assistant turn"  # memory is about the user; assistant turns are context only
    content = turn.content.strip()
    if not content:
        return "empty"
    names = {n.lower() for n in names if n} | ({turn.speaker.lower()} if turn.speaker else set())
    kinds = [sentence_kind(s, names) for s in text.sentences(content)]
    if not kinds or "content" in kinds:
        return None
    order = ["greeting", "thanks", "acknowledgement", "reaction", "question"]
    return "+".join(k for k in order if k in kinds)


def sentence_kind(sentence: str, names: set[str]) -> str:
    """"content", or what else the sentence is: "greeting", "thanks", "acknowledgement", "reaction", "question"."""
    if text.has_cjk(sentence):
        return _zh_sentence_kind(sentence)
    words = [w.lower().replace("’", "'") for w in re.findall(r"[^\W_]+(?:['’][^\W_]+)?", sentence)]
    if sentence.rstrip().endswith("?") and not _tells_first(sentence):
        return "question"
    content = [w for w in words if w not in PHATIC_WORDS and w not in text.STOP_WORDS
               and w not in _FILLER_WORDS and not _is_name(w, names)]
    if content and SECOND_PERSON.search(sentence) and not FIRST_PERSON_WORDS.search(sentence):
        return "reaction"  # about the listener ("You'd be a great counselor!"): theirs to tell
    if content:
        return "content"
    if any(w in _THANKS_WORDS for w in words):
        return "thanks"
    if any(w in _GREETING_WORDS for w in words) or re.search(r"how are you|what's up|how's it going", sentence, re.I):
        return "greeting"
    return "acknowledgement"


def _tells_first(question: str) -> bool:
    """A question that says something before it asks ("家里那只橘猫汤圆，三岁了，最近挑食，咋办？",
    "I tweaked my knee on Sunday's long run, any tips?"): the clauses before the last one hold
    at least 8 CJK characters or 6 words."""
    before = re.split(r"[，,；;]", question)[:-1]
    said = "".join(before)
    return sum(text.is_cjk(ch) for ch in said) >= 8 or len(re.findall(r"[A-Za-z]+", said)) >= 6


def _is_name(word: str, names: set[str]) -> bool:
    """A speaker's name or a short form of it ("Bea" for Beatrix)."""
    return any(word == n or (len(word) >= 3 and n.startswith(word)) for n in names)


def _zh_sentence_kind(sentence: str) -> str:
    core = re.sub(r"[\s，,。.!！？?~～、…]+", "", sentence)
    asks = sentence.rstrip().endswith(("?", "？")) or _ZH_QUESTION_END.search(sentence) and "吗" in sentence[-3:]
    if asks and not _tells_first(sentence):
        return "question"
    label = None
    for words, name in ((_ZH_THANKS, "thanks"), (_ZH_GREETING, "greeting"), (_ZH_ACK, "acknowledgement")):
        for word in sorted(words, key=len, reverse=True):
            if word in core:
                core = core.replace(word, "")
                label = label or name
    leftover = [ch for ch in core if text.is_cjk(ch) and ch not in text.ZH_STOP_CHARS] + re.findall(r"[A-Za-z0-9]+", core)
    if len(leftover) >= 2 or label is None:
        return "content"
    return label
