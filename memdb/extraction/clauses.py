"""The extractive fallback: what the model left out, taken from the turn's own words.

A 0.5B model skips many facts a turn states plainly ("I'm allergic to shrimp", "她是我女儿，今年6岁").
After the model's notes, every sentence of the turn that states something about a person and
that no note covers becomes a note of its own: the sentence cut at its clauses, fillers and
interjections removed, "I", "my", "我" made the speaker's name, "she", "她" the person the turn
last named. Each such note then goes through the same grounding, gate and time resolution as
the model's, so it only fills gaps and never adds small talk.
"""

from __future__ import annotations

import re

from .. import text, timeparse
from .prefilter import FIRST_PERSON_WORDS, sentence_kind

# Leading words that carry nothing ("Yeah, so I ..." → "I ...").
_FILLER = re.compile(
    r"^(?:(?:yeah|yes|yep|oh|wow|well|so|also|anyway|btw|by the way|actually|haha|lol|hey|hi|thanks|thank you|"
    r"totally|cool|great|nice|sure|ok|okay|and|but|plus|oh and|good tip|nice)\b[\s,!.:–-]*)+", re.I)
_VOCATIVE = re.compile(r"^[A-Z][a-z]+,\s*|,\s*[A-Z][a-z]+$")  # "Mel, ..." / "..., Caroline"
_ZH_FILLER = re.compile(r"^(?:哈哈+|嗯+|对了|另外|还有|其实|说实话|不过|然后|所以|好的|好嘞|跟你说|跟你讲个八卦|"
                        r"(?:有|对|是的|没错|可以|行)(?=[，,]))[，,、：:\s]*")
_CLAUSE = re.compile(r"\s*(?:;|:|—|–| - |, but |, and |, so |, which | but | and then | and (?=it |it's |that |this ))\s*",
                     re.I)
_ZH_SENTENCE = re.compile(r"[^。！？!?；;\n]+")
_BRACKETS = re.compile(r"\[[^\]]*\]|\([^)]*\)|（[^）]*）")
# A clause worth a note names something: a durable verb about the speaker, a number, a name.
_DURABLE = re.compile(
    r"\b(?:am|is|are|was|were|have|has|had|got|went|go|going|work\w*|live\w*|moved?|moving|study\w*|"
    r"started|start\w*|joined|adopt\w*|bought|love\w*|like[sd]?|hate\w*|enjoy\w*|prefer\w*|allergic|"
    r"never|always|usually|plan\w*|signed|booked|visit\w*|finished|learn\w*|teach\w*|play\w*|paint\w*|"
    r"run\w*|ran|married|born|named|called|own\w*|use[sd]?|using|need\w*|want\w*|won|lost|took|made)\b", re.I)
_ENTITY = re.compile(r"(?<!^)(?<![.!?]\s)\b[A-Z][a-zA-Z]+|\d")
_NOT_NAMES = frozenset("""The This That These Those It Its There Here What When Where Why How Who Which
    My Our Your His Her Their We You They He She Anyway Also Maybe Just Still Now Then Today Yesterday
    Tomorrow Last Next Every Some Any All Both Each Most Many Much More Not No Yes Got Had Have Has
    Been Being Was Were Is Are Am Do Does Did Can Could Would Should Will Going Gonna Wanna Looking
    Thinking Hope Hoping Feel Feeling Taking Making Getting Working Having Being Trying""".split())
# "陪朵朵", "带老王", "叫年糕": two characters after a verb that takes a person (or pet) are a name.
_ZH_PERSON = re.compile(r"(?:陪|带着?|叫|跟|和|给)([\u4e00-\u9fff]{2})(?=[，,。！？\s]|$)")
_PRONOUN = re.compile(r"\b(?:she|he|her|him|his)\b|[她他]", re.I)
MAX_CLAUSE_CHARS = {"en": 140, "zh": 48}


def notes(content: str, speaker: str, names: set[str], covered: set[str], ts: str) -> list[dict]:
    """Records ({"subject", "object"}) for the statements of content that no held note covers
    (covered: the content terms of the model's notes)."""
    zh = text.has_cjk(content)
    found, covered = [], set(covered)
    person = None  # in Chinese, the last person a clause named: who a following "她" is
    for clause in _clauses(content, zh):
        if zh and person and re.match(r"[她他](?!们)", clause):
            clause = person + clause[1:]
        person = (_ZH_PERSON.findall(clause) or [person])[-1] if zh else None
        if sentence_kind(clause, names) != "content" or not _states_something(clause, zh, ts):
            continue
        terms = set(text.terms(clause))
        keys = {t for t in terms if re.search(r"[a-z0-9]", t)} if zh else set()
        if terms and len(terms & covered) >= len(terms) / 2 and keys <= covered:
            continue  # the model already said it (in Chinese, its names and numbers too)
        record = _as_record(clause, speaker, names | ({person} if person else set()), zh, content)
        if record:
            found.append(record)
            covered |= terms
    return found


def _clauses(content: str, zh: bool) -> list[str]:
    content = _BRACKETS.sub(" ", content)
    if zh:
        out = []
        for sentence in _ZH_SENTENCE.findall(content):
            sentence = _ZH_FILLER.sub("", sentence.strip(" ，,"))
            out += _cut(sentence, MAX_CLAUSE_CHARS["zh"], "，")
        return [c for c in out if c]
    out = []
    for sentence in text.sentences(content):
        for part in _CLAUSE.split(sentence):
            part = _FILLER.sub("", part.strip(" ,.!")).strip(" ,.!")
            part = _VOCATIVE.sub("", part)
            out += _cut(part, MAX_CLAUSE_CHARS["en"], ", ")
    return [c for c in out if c]


def _cut(clause: str, limit: int, joint: str) -> list[str]:
    # Keep whole comma-parts while they fit, so a long sentence gives notes that read alone.
    if len(clause) <= limit:
        return [clause]
    pieces, current = [], ""
    for part in clause.split(joint):
        if current and len(current) + len(joint) + len(part) > limit:
            pieces.append(current)
            current = part
        else:
            current = f"{current}{joint}{part}" if current else part
    return pieces + ([current] if current else [])


def _states_something(clause: str, zh: bool, ts: str) -> bool:
    if zh:
        return sum(text.is_cjk(ch) and ch not in text.ZH_STOP_CHARS for ch in clause) >= 4
    if len(text.terms(clause)) < 2:
        return False
    return bool(_DURABLE.search(clause) or _ENTITY.search(clause) or timeparse.find(clause, ts))


def _as_record(clause: str, speaker: str, names: set[str], zh: bool, content: str = "") -> dict | None:
    """The clause as a note about its subject: the speaker unless it names someone else first."""
    others = [n for n in names if n and n != speaker]
    return _zh_record(clause, speaker, others) if zh else _en_record(clause, speaker, names, others, content)


def _zh_record(clause: str, speaker: str, others: list[str]) -> dict:
    named = _last_named(clause, others)
    clause = re.sub(r"[她他](?=是|今年|这学期|天天|最近|突然|叫)", named or "\\g<0>", clause) if named else clause
    clause = clause.replace("我们", speaker).replace("我", speaker)
    for name in [speaker, *others]:
        if clause.startswith(name):
            return {"subject": name, "object": clause[len(name):].lstrip("，, ") or clause}
    return {"subject": speaker, "object": clause}


def _en_record(clause: str, speaker: str, names: set[str], others: list[str], content: str) -> dict | None:
    first = re.match(r"([A-Z][a-z]+)\s+(?!is\b|was\b)([a-z].*)", clause)
    if first and first.group(1) not in _NOT_NAMES and re.search(rf"[a-z,]\s+{first.group(1)}\b", content):
        # "Oh, and Priya told us she's leaving …": a name, capitalised mid-sentence, about Priya
        return {"subject": first.group(1), "object": first.group(2)}
    if FIRST_PERSON_WORDS.search(clause) is None and not any(n in clause for n in others) and _PRONOUN.search(clause):
        return None  # about someone only a pronoun names
    clause = _subject_first(clause)
    said = re.sub(r"^(?:i'm|i am|we're|we are)\b", "is", clause, flags=re.I)
    said = re.sub(r"^(?:i've|i have|we've|we have)\b", "has", said, flags=re.I)
    said = re.sub(r"^(?:i'll|we'll)\b", "will", said, flags=re.I)
    said = re.sub(r"^(?:i'd|we'd)\b", "would", said, flags=re.I)
    said = re.sub(r"^(?:i|we)\b\s*", "", said, flags=re.I)
    if said != clause and re.match(r"i\s", clause, re.I):  # "we all have" stays plural
        said = _third_person(said)
    if said != clause:
        return {"subject": speaker, **_verb_and_rest(said)}
    for name in others:
        if clause.startswith(name + " "):
            return {"subject": name, "object": clause[len(name) + 1:]}
    if re.match(r"^(?:my|our)\b", clause, re.I):
        return {"subject": f"{speaker}'s " + clause.split(" ", 2)[1], "object": clause.split(" ", 2)[2]} \
            if clause.count(" ") >= 2 else None
    named = [m for m in _ENTITY.findall(clause) if m not in names and not any(m in n for n in names)]
    own = re.search(r"\b(?:my|me|myself)\b", clause, re.I) and _DURABLE.search(clause)
    if not (named or own or timeparse.find(clause, "2000-01-01")):  # any reference day: only whether a time is named
        return None  # a remark with no name, number, time or own thing in it: small talk far more often than a fact
    return {"subject": speaker, "predicate": "says", "object": clause[:1].lower() + clause[1:] if not named else clause}


# "Right now I'm setting up …": a time or place before the speaker, moved behind the statement.
_LEAD = re.compile(r"^((?:right now|for now|these days|this (?:week|month|year)|last (?:week|month|year)|today|now|"
                   r"currently|lately|recently|at (?:work|home)|for (?:deployment|work|now)|since \w+)\s*,?\s+)"
                   r"(?=(?:i|we)\b)", re.I)
# "Been training since March", "Thought about …": the speaker left out, as people do in chat.
_ELIDED = re.compile(r"^(gonna|wanna|been|thought|got|went|had|started|finished|spent|took|made|tried|found|bought|signed|lost|won|"
                     r"quit|left|met|saw|joined|moved|visited|adopted|decided|learned|loved)\b\s*",
                     re.I)


def _subject_first(clause: str) -> str:
    """The clause with the speaker's "I" first, where chat put something else first or left it out."""
    lead = _LEAD.match(clause)
    if lead:
        return f"{clause[lead.end():]} {lead.group(1).strip(' ,').lower()}"
    elided = _ELIDED.match(clause)
    if elided and clause[0].isupper():
        verb = elided.group(1).lower()
        verb = {"been": "have been", "gonna": "am going to", "wanna": "want to"}.get(verb, verb)
        return f"I {verb} {clause[elided.end():]}".strip()
    return clause


_VERB_GROUP = re.compile(
    r"^((?:(?:is|are|was|were|has|have|had|will|would|can|does|did|just|also|really|still|never|always|"
    r"finally|recently|not|no longer|been|being|going to|about to)\s+)*(?!(?:a|an|the|my|some|this|that)\b)[a-z'-]+"
    r"(?:\s+(?:to|in|at|on|of|for|with|from|into|about|up|out|off|by|as))?)\s+(.+)$", re.I)


def _verb_and_rest(said: str) -> dict:
    """"is moving to Denver in August" → predicate "is moving to", object "Denver in August":
    the slot the lifecycle compares (a new city replaces the old, a repeat merges)."""
    m = _VERB_GROUP.match(said)
    return {"predicate": m.group(1), "object": m.group(2)} if m else {"object": said}


_NOT_PRESENT = re.compile(r"(?:\w+ed|can|could|will|would|should|must|might|may|am|is|has|does|was|were|had|did|got|went|"
                          r"made|took|saw|met|ran|won|lost|found|gave|told|came|left|bought|thought|felt)$", re.I)
_ADVERB = re.compile(r"(?:just|also|really|still|always|never|often|usually|sometimes|totally|basically|"
                     r"already|finally|recently|even|mostly|actually)$", re.I)


def _third_person(said: str) -> str:
    """"love sci-fi" said by "I" → "loves sci-fi" said of Bob: the verb agrees with the name."""
    verb, _, rest = said.partition(" ")
    if _ADVERB.match(verb) and rest:
        return f"{verb} {_third_person(rest)}"
    if not verb.isalpha() or _NOT_PRESENT.match(verb) or verb.lower() in ("have", "do", "go"):
        return {"have": "has", "do": "does", "go": "goes"}.get(verb.lower(), verb) + (" " + rest if rest else "")
    if re.search(r"(?:s|sh|ch|x|z|o)$", verb):
        verb += "es"
    elif re.search(r"[^aeiou]y$", verb):
        verb = verb[:-1] + "ies"
    else:
        verb += "s"
    return verb + (" " + rest if rest else "")


def _last_named(clause: str, others: list[str]) -> str | None:
    # The person a "她" stands for: a name the clause mentions before it.
    hits = [(clause.rfind(n), n) for n in others if n in clause]
    return max(hits)[1] if hits else None
