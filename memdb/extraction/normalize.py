"""Normalisation: a raw atom's fields made canonical — subject (first person → the speaker),
kind and sentiment from closed sets (the model's word through synonym maps, else rules), time
words resolved to absolute dates, and a confidence from how explicit the statement was.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .. import text, timeparse
from ..settings import Settings
from .records import Turn

_KIND_SYNONYMS = {
    "f": "fact", "fact": "fact", "facts": "fact", "info": "fact", "information": "fact", "attribute": "fact",
    "state": "fact", "status": "fact", "事实": "fact",
    "p": "preference", "preference": "preference", "preferences": "preference", "pref": "preference",
    "like": "preference", "likes": "preference", "dislike": "preference", "taste": "preference", "偏好": "preference",
    "c": "constraint", "constraint": "constraint", "constraints": "constraint", "rule": "constraint",
    "rules": "constraint", "restriction": "constraint", "limit": "constraint", "requirement": "constraint",
    "约束": "constraint", "限制": "constraint", "禁止": "constraint",
    "e": "event", "event": "event", "events": "event", "activity": "event", "action": "event",
    "experience": "event", "plan": "event", "事件": "event",
}
_SENTIMENT_SYNONYMS = {
    "like": "like", "likes": "like", "positive": "like", "pos": "like", "love": "like", "loves": "like",
    "enjoys": "like", "enjoy": "like", "fond of": "like", "favorite": "like", "favourite": "like", "+": "like",
    "喜欢": "like", "爱": "like", "正面": "like",
    "dislike": "dislike", "dislikes": "dislike", "negative": "dislike", "neg": "dislike", "hates": "dislike",
    "hate": "dislike", "-": "dislike", "讨厌": "dislike", "不喜欢": "dislike", "负面": "dislike",
    "neutral": "neutral", "none": "neutral", "中性": "neutral", "0": "neutral",
}
_DISLIKE_PREDICATE = re.compile(
    r"\b(?:hates?|dislikes?|can't stand|cannot stand|can not stand|detests?|loathes?|(?:does ?n[o']t|do ?n[o']t|"
    r"never) (?:like|enjoy|love)s?|not (?:a )?fan of|avoids?|quit|stopped|gave up|giving up|no longer|"
    r"not anymore|switched from)\b|不喜欢|讨厌|厌恶|受不了|反感|不爱|戒|不再|不喝|不吃", re.I)
_LIKE_PREDICATE = re.compile(
    r"\b(?:likes?|loves?|loving|enjoys?|enjoying|adores?|prefers?|fond of|into|favou?rites?|fave|fan of|"
    r"passion\w*|a big fan|keen on|dreams? of|dream|wants? to|would love to|wishes|hopes? to|go-to|top pick|fav|"
    r"interested in|cherish\w*|treasures?)\b|喜欢|爱|偏爱|偏好|热爱|最爱|想要|希望|梦想", re.I)
_FIRST_PERSON = {"i", "me", "myself", "i'm", "im", "the speaker", "speaker", "我", "我自己", "本人", "自己"}
_USER_WORDS = {"user", "the user", "用户", "该用户"}
_HEDGES = re.compile(
    r"\b(?:maybe|perhaps|probably|possibly|might|i think|i guess|i suppose|not sure|kind of|sort of|"
    r"hopefully|considering|thinking about|thinking of)\b|可能|也许|大概|好像|或许|我觉得|估计|说不定|考虑", re.I)


_CONSTRAINT_WORDS = re.compile(
    r"\b(?:must|mustn't|never|can't|cannot|can not|not allowed|allergic|allergy|forbid\w*|avoids?|banned|"
    r"no longer allowed|has to|have to|needs? to|can only|only (?:eats?|drinks?|uses?)|"
    r"no (?!doubt|way|problem|worries|idea|clue)\w+|"
    r"vegetarian|vegan|rule|nothing|stays? inside|must not)\b|不能|禁止|不要|不许|不准|不可|别|必须|只能|过敏|忌|不用|一律|不让|规矩", re.I)
_EVENT_WORDS = re.compile(
    r"\b(?:\w+ed|went|got|made|took|saw|met|did|bought|ran|began|won|found|gave|told|came|left|"
    r"wrote|read|sold|built|drew|flew|drove|threw|held|taught|brought|caught|kept|heard|paid|sent|"
    r"spent|grew|chose|became|lost|quit|fell|broke|began|is going|are going|will|plans?|planning|going|off to|visit\w*|"
    r"trip|packing|moving|signed up|booked)\b|了|过|刚|将要|打算|计划|去了|参加", re.I)


# "is swamped", "are so excited": a participle after "to be" says how someone is, not what happened.
_STATES = re.compile(r"\b(?:am|is|are|was|were|'m|'re|'s|be|been|feels?|felt)\s+(?:(?:so|very|really|pretty|super|too|a bit)\s+)*\w+ed\b",
                     re.I)


def kind(value: str | None, record: dict, sentiment: str) -> str:
    """The model's kind if it gave one (mapped through the synonyms), else decided by rules:
    a rule or limit → constraint, a like/dislike → preference, something done or planned → event."""
    if value:
        return _KIND_SYNONYMS.get(value.strip().lower(), "fact")
    words = " ".join(record.get(f, "") for f in ("predicate", "object"))
    if _CONSTRAINT_WORDS.search(words):
        return "constraint"
    if sentiment != "neutral":
        return "preference"
    if record.get("when") or _EVENT_WORDS.search(_STATES.sub("", record.get("predicate", ""))):
        return "event"
    if _EVENT_WORDS.match(record.get("object", "")):
        return "event"  # "Beatrix | | went camping": the verb landed in the object
    return "fact"


def sentiment(raw: dict[str, Any], predicate: str) -> str:
    explicit = _SENTIMENT_SYNONYMS.get(str(raw.get("sentiment", "")).strip().lower())
    if explicit:
        return explicit
    if _DISLIKE_PREDICATE.search(predicate):
        return "dislike"
    if _LIKE_PREDICATE.search(predicate):
        return "like"
    return "neutral"


def person(value: str, speaker: str, zh: bool, names: Iterable[str] = ()) -> str:
    """First person (and "the user") → the speaker; "my X" → "Speaker's X", "我的X" → "Speaker的X"."""
    low = value.lower()
    if low in _FIRST_PERSON or low in _USER_WORDS:
        return speaker
    if names:  # a short form of a speaker's name ("Bea") → the name as the speakers are known
        for name in names:
            if len(low) >= 3 and name.lower().startswith(low) and name.lower() != low:
                return name
    if low.startswith("my "):
        return f"{speaker}'s {value[3:]}"
    if value.startswith("我的"):
        return f"{speaker}的{value[2:]}"
    return value


_VAGUE_TIME = re.compile(
    r"\b(?:recently|lately|soon|ago|since|earlier|later|once|years?|months?|weeks?|days?|tonight|morning|"
    r"afternoon|evening|weekend|childhood|summer|winter|spring|fall|autumn|now|currently|nowadays)\b|"
    r"最近|以前|之前|以后|刚才|小时候|时候|年|月|周|天|早上|晚上|现在", re.I)


_ZH_DONE = re.compile(r"刚|了|过|完成|做完")
_FUTURE = re.compile(
    r"\b(?:will|'ll|going to|gonna|plan(?:s|ning)?|next|upcoming|tomorrow|soon|booked|scheduled|about to|"
    r"intend|hope to|want to|wanna|thinking (?:about|of)|can't wait|looking forward|"
    r"by (?:the )?(?:end|start|beginning|middle) of|(?:am|is|are|'m|'re|'s) (?:\w+ing))\b"
    r"|打算|准备|计划|下个|下周|下月|明天|后天|明年|将要|要去|届时", re.I)
_PAST = re.compile(r"\b(?:last|ago|yesterday|went|was|were|did|had|got|been|used to|\w+ed)\b"
                   r"|了|过|上个|上周|昨天|前天|去年|刚", re.I)


_TODAY = re.compile(r"\b(?:off to|today|tonight|this (?:morning|afternoon|evening)|right now|just now)\b|今天|今晚|刚刚", re.I)


def tense(sentence: str) -> bool | None:
    """Whether a sentence speaks of the future (True), the past (False), or does not say (None)."""
    if _FUTURE.search(sentence):
        return True
    return False if _PAST.search(sentence) else None


def is_time(words: str, ts: str) -> bool:
    """Whether the model's `when` is a time at all (resolvable, or a vague one such as "recently")."""
    return bool(timeparse.find(words, ts)) or _VAGUE_TIME.search(words) is not None


def attach_time(record: dict, when: str | None, turn: Turn, sentence: str) -> dict:
    """Set `when`/`date` from the model's time words when the turn says them, else (for events)
    from a time phrase in the turn's sentence the atom came from."""
    if when and when.lower() not in turn.content.lower():
        when = None  # time words the turn never said: the atom stays, undated
    words = " ".join(record.get(f, "") for f in ("predicate", "object"))
    # The note's own tense first: "the concert is on June 4" is this year's June 4 even when the
    # sentence goes on "and I got roped into baking"; a note that says nothing takes the sentence's.
    own = tense(words)
    future = own if own is not None else None if re.search(r"\b(?:is|are|am)\b", words, re.I) else tense(sentence)
    # A time phrase inside the object or predicate belongs in `when` when the turn said it, and
    # nowhere when it did not (a small model copies the example's "前天" into other atoms).
    said: list[str] = []
    for part in ("object", "predicate"):
        value = record.get(part, "")
        for phrase, iso in timeparse.find(value, turn.ts, future):
            if text.has_cjk(phrase):
                # Chinese has no word gaps to cut at ("下个月底" less "下个月" is "底"): a phrase the
                # turn said stays where it was said, as the date it named ("明年就35了" → "2027年
                # 就35了"), unless it names the note's own day or year (今天, 今年: the note's date
                # says it); one the turn never said goes.
                if phrase in turn.content:
                    said.append(phrase)
                written = timeparse.zh_words(phrase, iso) if phrase in turn.content else ""
                if written != phrase and iso == turn.ts[: len(iso)] and not value.startswith(f"{phrase}是"):
                    written = ""  # but "今天是苏禾的生日" keeps its day: it is the note's subject
                before = value[: value.find(phrase)]
                if written[:1].isdigit() and before[-1:].isascii() and before[-1:].isalpha():
                    written = f" {written}"  # "Wren 2026年6月17日…", not a user name "Wren2026"
                value = record[part] = value.replace(phrase, written, 1).strip(" ，,")
                continue
            if len(value) > len(phrase) + 2:
                # "on March 20" goes whole: a preposition left behind reads as a cut ("flying on for a week")
                cut = re.sub(rf"(?:\b(?:on|in|at|by|from|until|since|for)\s+)?(?:\b(?:about|around|roughly|nearly|almost|over|"
                             rf"just|only|some)\s+)?{re.escape(phrase)}", " ", value, count=1, flags=re.I)
                value = record[part] = re.sub(r"\s+([,，])", r"\1", " ".join(cut.split())).strip(" ,，")
            elif part == "predicate":
                continue  # the whole predicate a time ("is | since March"): nothing to read without it
            # The time is all the object says ("has been training | since March"): its words stay.
            if phrase.lower() in turn.content.lower():
                said.append(phrase)
    # "told us today she's leaving in September": the day of telling is not the event's
    when = when or next((p for p in said if not _TODAY.fullmatch(p)), said[0] if said else None)
    if record["kind"] == "fact" and _ZH_DONE.search(" ".join(record.get(f, "") for f in ("predicate", "object"))):
        record["kind"] = "event"  # 刚做完 / 做了 / 去过: something happened
    if not when and record["kind"] == "event":
        in_turn = timeparse.find(turn.content, turn.ts, future)
        found = timeparse.find(sentence, turn.ts, future) or (in_turn if len(in_turn) == 1 else [])
        found = [f for f in found if not _TODAY.fullmatch(f[0])] or found
        if found:
            when = found[0][0]
    if not when and record["kind"] == "event" and _TODAY.search(sentence):
        record["date"] = turn.ts[:10]  # "I'm off to go swimming": it happens the day it is said
    if when:
        record["when"] = when
        resolved = timeparse.resolve(when, turn.ts, future)
        if resolved:
            record["date"] = resolved
            obj = record.get("object", "")
            if obj and not text.has_cjk(obj) and obj.lower() == when.lower():
                # "the opening night is | tomorrow": the time is all the object says, and a note
                # is read later, so it says the day ("is on 10 March 2026")
                record["object"] = timeparse.en_words(obj, resolved)
            if record["kind"] == "fact" and (len(resolved) == 10 or resolved > turn.ts[: len(resolved)]):
                record["kind"] = "event"  # a fact pinned to a day, or to a time ahead, is an event
    return record


def best_sentence(record: dict, content: str) -> str:
    """The sentence of the turn that shares most words with the atom (for hedges and time)."""
    sentences = text.sentences(content) or [content]
    atom_terms = set(text.terms(" ".join(record.get(f, "") for f in ("predicate", "object"))))
    return max(sentences, key=lambda s: len(atom_terms & set(text.terms(s))))


def confidence(record: dict, sentence: str, speaker: str, settings: Settings) -> float:
    """Explicit first-person statements score high; hedged ones, or claims about others, lower."""
    score = settings.confidence_own if record.get("subject") == speaker else settings.confidence_other
    if _HEDGES.search(sentence):
        score -= settings.confidence_hedge
    return round(score, 2)
