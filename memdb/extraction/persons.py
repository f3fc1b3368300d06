"""Persons in notes: a statement about a person, as a clean third-person note.

A note names its subject once and then uses pronouns ("Ana sold her old car", not "Ana sold
Ana's old car"); it never says "X says", never opens with a discourse word ("Anyway, …"), and a
team's or family's fact says so ("Ana's team uses Go"). The same rules write the notes the
rules cut from a turn (clauses.py) and those the model proposes, so both read alike.

Which pronoun a person takes is not something rules can know: `Pronouns.ask` asks the model
once per name (a one-word answer under a grammar) and falls back to "they", which is always
grammatical. Chinese notes need a pronoun less often (the name, then nothing): 他/她 only where
a second 我 stands in a clause.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from dataclasses import dataclass

from .. import text, timeparse
from . import lexicon

log = logging.getLogger("memdb")


@dataclass(frozen=True)
class Pronouns:
    """The words that stand for a person after their name: subject, object, possessive,
    possessive alone, reflexive; plural says whether verbs agree as with "they"."""

    subject: str
    object: str
    possessive: str
    alone: str
    reflexive: str
    plural: bool

    @classmethod
    def of(cls, word: str) -> Pronouns:
        return _FORMS.get(word, _FORMS["they"])

    @staticmethod
    def ask(name: str, llm) -> Pronouns:
        """The pronouns the model takes `name` to use (cached per name); "they" when it cannot say."""
        if name.lower() in ("user", "用户", "") or llm is None:
            return _FORMS["they"]
        key = (getattr(llm, "sha256", None) or getattr(llm, "name", ""), name)
        with _ASKED_LOCK:
            if key in _ASKED:
                return _ASKED[key]
        word = "they"
        try:
            reply = llm.complete(
                [{"role": "system", "content": "Say which pronoun a person with this name most likely uses: he, she or they."},
                 {"role": "user", "content": f"Name: {name}"}, {"role": "assistant", "content": '{"p":"'}],
                schema=_PRONOUN_SCHEMA, max_tokens=8)
            word = json.loads(reply).get("p", "they") if reply.lstrip().startswith("{") else "they"
        except Exception as exc:  # any model failure: "they" is always grammatical
            log.debug("memdb: no pronoun for %r (%s)", name, exc)
        forms = Pronouns.of(word if isinstance(word, str) else "they")
        with _ASKED_LOCK:
            _ASKED[key] = forms
        return forms


_FORMS = {
    "he": Pronouns("he", "him", "his", "his", "himself", False),
    "she": Pronouns("she", "her", "her", "hers", "herself", False),
    "they": Pronouns("they", "them", "their", "theirs", "themself", True),
}
_PRONOUN_SCHEMA = {"type": "object", "properties": {"p": {"type": "string", "enum": ["he", "she", "they"]}},
                   "required": ["p"], "additionalProperties": False}
_ASKED: dict[tuple[str, str], Pronouns] = {}
_ASKED_LOCK = threading.Lock()


# ---------------------------------------------------------------- English

_NOT_PRESENT = re.compile(r"(?:\w+[^e]ed|can|could|will|would|should|must|might|may|am|is|has|does|was|were|had|did|got|"
                          r"went|made|took|saw|met|ran|won|lost|found|gave|told|came|left|bought|thought|felt|sold|"
                          r"kept|said|spent|began|became|brought|built|caught|drove|flew|grew|heard|held|paid|put|"
                          r"read|sent|set|taught|wrote|quit|let|cut|hit|shut|hurt|cost|chose|wore|ate|drank|swam|sang|"
                          r"began|spoke|broke|froze|woke|rode|drove|rose|shook|forgot|sat|stood|understood|meant|"
                          r"slept|kept|fell|fought|flew|knew|threw|won|led|fed|hid|lay|bit|dug|lit|wept|learnt|burnt|dreamt|spelt|"
                          r"spilt|leant|knelt|dwelt|smelt)$", re.I)
_ADVERB = re.compile(r"(?:just|also|really|still|always|never|often|usually|sometimes|totally|basically|"
                     r"already|finally|recently|even|mostly|actually|only|now|"
                     r"(?!(?:rely|apply|reply|supply|comply|imply|multiply|ally|rally|tally|bully|belly)$)[a-z]{3,}ly)$", re.I)


def agree(said: str) -> str:
    """The verb at the front of `said` as it agrees with he or she: "love sci-fi" → "loves
    sci-fi", "have a dog" → "has a dog", "don't eat meat" → "doesn't eat meat"; past forms and
    modals stay."""
    verb, _, rest = said.partition(" ")
    low = verb.lower()
    if _ADVERB.match(verb) and rest:
        return f"{verb} {agree(rest)}"
    irregular = {"have": "has", "do": "does", "go": "goes", "am": "is", "are": "is", "'m": "is", "were": "was",
                 "wanna": "wants to", "gonna": "is going to", "gotta": "has to",
                 "don't": "doesn't", "do not": "does not", "haven't": "hasn't", "aren't": "isn't"}
    if low in irregular:
        return irregular[low] + (" " + rest if rest else "")
    if not verb.isalpha() or _NOT_PRESENT.match(verb) or low.endswith("ing") or re.search(r"[^s]s$", low):
        return said  # a past form, a modal, or agreed already
    if re.search(r"(?:s|sh|ch|x|z|o)$", verb):
        verb += "es"
    elif re.search(r"[^aeiou]y$", verb):
        verb = verb[:-1] + "ies"
    else:
        verb += "s"
    return verb + (" " + rest if rest else "")


FIRST_PERSON = re.compile(r"\b(?:i|i['’](?:m|ve|ll|d)|me|my|mine|myself|we|we['’](?:re|ve|ll)|us|our|ours|ourselves)\b|我", re.I)
# Contractions and forms of "to be" / "to have" after I or we, as they read after he, she or they.
_LEADING_I = re.compile(r"^(?:i['’]m|i am|i['’]ve|i have|i['’]ll|i['’]d|i was|i)\b\s*", re.I)
_CONTRACTED = {"i'm": ("is", "are"), "i am": ("is", "are"), "i've": ("has", "have"), "i have": ("has", "have"),
               "i'll": ("will", "will"), "i'd": ("would", "would"), "i was": ("was", "were")}


def _verb_after_i(lead: str, rest: str, plural: bool) -> str:
    # What "I …" reads as once "I" is gone: "I'm moving" → "is moving", "I love it" → "loves it".
    key = " ".join(lead.lower().replace("’", "'").split())
    if key in _CONTRACTED:
        singular, plurals = _CONTRACTED[key]
        return f"{plurals if plural else singular} {rest}".strip()
    return rest if plural else agree(rest)


def drop_leading_i(clause: str) -> str:
    """A clause that opens with "I" as it reads after the speaker's name: "I'm moving to Porto"
    → "is moving to Porto", "I love hiking" → "loves hiking"; the clause as it is otherwise."""
    lead = _LEADING_I.match(clause)
    return _verb_after_i(lead.group(0).strip(), clause[lead.end():], False) if lead else clause


def third_person_en(value: str, name: str, p: Pronouns, *, named: bool, clause: bool = False) -> str:
    """First-person words in a note's predicate or object, as the speaker seen from outside.

    named: the note's subject is the speaker already, so a leading "I" goes ("Ana | I sold my
    car" → "sold her car") and later ones are pronouns; otherwise the first mention is the name
    ("Emil got a job near me" → "… near Ana") and pronouns follow. clause: the value is a clause
    of its own after a verb like "thinks" ("Ana | thinks | I'm ready" → "she is ready")."""
    if not FIRST_PERSON.search(value):
        return value
    lead = _LEADING_I.match(value)
    if named and lead and not clause:  # after the name: the verb agrees with one person
        value = _verb_after_i(lead.group(0).strip(), value[lead.end():], False)
    elif not named:
        m = FIRST_PERSON.search(value)
        word = m.group(0).lower().replace("’", "'")
        if word in ("my", "our"):
            value = f"{value[:m.start()]}{name}'s{value[m.end():]}"
        elif word in ("me", "us"):
            value = f"{value[:m.start()]}{name}{value[m.end():]}"
        elif word.startswith("i"):
            value = f"{value[:m.start()]}{name} {_verb_after_i(word, value[m.end():].lstrip(), False)}"
    # Each later "I" starts a clause of its own: its verb agrees with the pronoun.
    value = re.sub(r"\b(i['’]m|i am|i['’]ve|i have|i['’]ll|i['’]d|i was|i)\b\s*([^,;.!?]*)",
                   lambda m: f"{p.subject} {_verb_after_i(m.group(1), m.group(2), p.plural)}".rstrip(), value, flags=re.I)
    for pattern, word in ((r"\b(?:me|us)\b", p.object), (r"\b(?:my|our)\b", p.possessive),
                          (r"\b(?:mine|ours)\b", p.alone), (r"\b(?:myself|ourselves)\b", p.reflexive),
                          (r"\bwe['’]re\b", "they are"), (r"\bwe['’]ve\b", "they have"), (r"\bwe['’]ll\b", "they will"),
                          (r"\bwe\b", "they")):
        value = re.sub(pattern, word, value, flags=re.I)
    return " ".join(value.split())


def discourse_free(clause: str) -> str:
    """The clause without the discourse words that open it ("Anyway, in the meantime, I …" → "I …")."""
    pattern = lexicon.alternation("en", "discourse")
    while True:
        m = pattern.match(clause)
        if not m:
            return clause
        rest = clause[m.end():].lstrip(" ,:;!.-–—")
        if not rest or rest == clause:
            return clause
        clause = rest


def we_are(clause: str, name: str) -> str:
    """Who "we" is in a clause: the speaker's team when it speaks of work, the speaker's family
    when it speaks of home, else the speaker."""
    # "enjoy each other's company" keeps no company
    low = set(re.findall(r"[\w'-]+", re.sub(r"\b(?:each other['’]s|one another['’]s)\s+company\b", "", clause.lower())))
    if low & set(lexicon.words("en", "work_words")):
        return f"{name}'s team"
    if low & set(lexicon.words("en", "family_words")):
        return f"{name}'s family"
    return name


# ---------------------------------------------------------------- Chinese

def third_person_zh(value: str, name: str, *, named: bool, pronoun: str = "") -> str:
    """我 as a word (not inside 自我 or 迷你) as the speaker seen from outside: dropped where it
    opens a note whose subject is the speaker already, else the name (我师父 → 苏禾的师父);
    我们 → the speaker's team when the clause speaks of work, else the speaker. pronoun (她, 他,
    or "" when the model could not say): the speaker said again where neither leaving them out
    nor 自己 reads ("医生让苏禾戒糖" → "医生让她戒糖"), so the name stands once."""
    keep = lexicon.words("zh", "not_pronoun")
    for i, word in enumerate(keep):
        value = value.replace(word, f"\x00{i}\x01")
    work = any(w in value for w in lexicon.words("zh", "work_words"))
    family = any(w in value for w in lexicon.words("zh", "family_words"))
    group = f"{name}的团队" if work and not family else name
    if named:  # the subject position, after a time word or two ("十月中旬我要去…"): the name stands there
        value = re.sub(r"^([^，,。！？我]{1,6}?)我(?![们的])", r"\1", value, count=1)
        value = re.sub(r"^(?:我们|我)(?:的)?", lambda m: "" if m.group(0) != "我们" or group == name else group, value)
    mentioned = named
    topic = named  # the speaker opens the note ("我一直喜欢写作"), not someone of theirs ("我的上司…")
    leads = False  # the name moves to the front: "有时我会忘记" → "苏禾有时会忘记"

    def person(m: re.Match) -> str:
        nonlocal mentioned, topic, leads
        word = m.group(0)
        if word.startswith("我们"):
            if re.match(r"团队|组|公司|部门|家", value[m.end():]):  # 我们团队 → 罗婷的团队
                return "" if mentioned else f"{name}的"  # "…罗婷不去了，团队有个版本上线": once is enough
            if mentioned and group == name:
                return word[2:]
            if mentioned and pronoun:
                return pronoun + group[len(name):] + word[2:]  # "…苏禾不去了，下周她的团队有个版本上线"
            mentioned = mentioned or group == name
            return group + word[2:]
        if mentioned and topic:
            # The speaker again, in a note about them: never the name twice, and no 他/她 (the
            # gender is not known). Left out as a subject ("但是觉得…") and before a relative
            # ("和女儿去了"); 自己 after a verb of thinking ("觉得自己缺乏灵感") and as an owner
            # ("缓解自己的压力"). Elsewhere ("医生让苏禾戒糖") 自己 could point at another person.
            before, after = value[: m.start()], value[m.end():]
            # where a clause's subject stands: its start, after a comma or a joining word
            slot = rf"(?:^|[，,；;]\s*|{lexicon.alternation('zh', 'subject_joints').pattern})$"
            if word == "我" and (re.search(slot, before) or adverbial_zh(re.split(r"[，,；;]\s*", before)[-1])):
                return ""
            if word in ("我的", "我") and re.match(lexicon.alternation("zh", "relations").pattern, after):
                return ""
            if word == "我的" or word == "我" and re.search(rf"(?:{lexicon.alternation('zh', 'thinking_verbs').pattern})$", before):
                return "自己" + word[1:]
        if mentioned and pronoun and not word.startswith("我们"):
            return pronoun + word[1:]  # "医生让她把咖啡戒了", "林晓的上司总是要求她…"
        first = not mentioned
        mentioned = True
        if word == "我" and re.match(lexicon.alternation("zh", "relations").pattern, value[m.end():]):
            return name + "的"  # 我师父 → 苏禾的师父
        if first and word == "我" and _subject_slot_zh(value[: m.start()]):
            leads = topic = True  # the name opens the note, as a person writing it down puts it
            return ""
        if first:
            topic = word == "我" and re.fullmatch(r"[^，,。！？]{0,8}", value[: m.start()]) is not None
        # The name where the speaker is someone's ("我的上司…要求我…" → "林晓的上司…要求林晓…"):
        # 自己 there would point at the other person.
        return name + word[1:]

    value = re.sub(r"我们的?|我的|我", person, value)
    if leads:  # "但我计划…" → "苏禾计划…": a joining word points at a sentence the note does not hold
        value = name + re.sub(rf"^(?:{lexicon.alternation('zh', 'subject_joints').pattern})[，,]?", "", value)
    for i, word in enumerate(keep):
        value = value.replace(f"\x00{i}\x01", word)
    return value


# "…钢琴课…啊不对，是美术课": a word said, then corrected in the next breath.
_ZH_CORRECTION = re.compile(r"[…。.，,\s]*(?:啊|哦|呃)?不对(?:不对)?[，,]\s*是([\u4e00-\u9fff]{1,6})(?=$|[，,。！？])")


def corrected_zh(value: str) -> str:
    """A Chinese note as its speaker corrected it ("朵朵有钢琴课…啊不对，是美术课" → "朵朵有美术课"):
    the corrected word stands where the word it replaces (as long, with the same last character)
    did; a correction that matches nothing before it is left as said."""
    m = _ZH_CORRECTION.search(value)
    if not m:
        return value
    right, before = m.group(1), value[: m.start()]
    if len(before) >= len(right) and before[-1] == right[-1]:
        return before[: -len(right)] + right + value[m.end():]
    return value


def _subject_slot_zh(before: str) -> bool:
    """Whether 我 after `before` stands where the note's subject does: after nothing but time
    words and joining words ("有时我", "但是下周我"), or after one short comma-part that leaves
    its subject out ("有点慌，之前我…"). "医生让我…", "那个味儿我…" are not."""
    parts = re.split(r"[，,]\s*", before)
    if len(parts) > 2 or len(parts) == 2 and not (
            len(parts[0]) <= 6 and parts[0].startswith(tuple(lexicon.words("zh", "subject_openers")))
            and not re.match(r"[^是]{0,4}是", parts[0])):  # "今天是周日，我…": the day has its own verb
        return False
    return adverbial_zh(parts[-1])


def adverbial_zh(rest: str) -> bool:
    """Whether `rest` is nothing but time words, parts of the day, adverbs of time, when-clauses and
    joining words (or nothing)."""
    adverbial = "|".join(lexicon.alternation("zh", name).pattern for name in ("parts_of_day", "subject_joints", "time_adverbs"))
    while rest:
        times = [p for p, _ in timeparse.find(rest, "2000-01-01") if rest.startswith(p)]
        # "开会的时候我…": a when-clause stands where a time word does
        word = re.match(adverbial, rest) or re.match(r"[^，,。！？我你他她]{1,16}?的时候", rest)
        if not times and not word:
            return False
        rest = rest[len(times[0]) if times else word.end():].lstrip("，, ")
    return True




_OWNED = re.compile(r"^(.+?)(?:['’]s\s+|的)(.+)$")


def owner_and_thing(subject: str) -> tuple[str, str]:
    """A subject that is someone's thing, split: "Ana's Oslo trip" → ("Ana", "Oslo trip"),
    "林晓的团队" → ("林晓", "团队"); a plain subject → (subject, "")."""
    m = _OWNED.match(subject or "")
    return (m.group(1), m.group(2)) if m else (subject or "", "")


def drop_repeated_subject(subject: str, value: str) -> str:
    """"张三 | 张三会去看看" → "会去看看": a model or a rule that put the subject in the value too."""
    stripped = value
    while subject and stripped.startswith(subject) and len(stripped) > len(subject):
        rest = stripped[len(subject):]
        if not (text.has_cjk(subject) or re.match(r"[\s,:]", rest)) or rest.startswith("的"):
            break  # "Ana's sister", "苏禾的师父" name someone else
        if text.has_cjk(subject) and subject in rest:
            break  # "苏禾上周…医生让苏禾…": a line that names its subject again is shown whole (codec)
        stripped = rest.lstrip(" ，,:：")
    return stripped


def spelled_out(value: str) -> str:
    """Chat words in an English note as a note spells them (en.toml: colloquial); a contraction a
    tokenizer split ("won 't") is joined again."""
    value = re.sub(r"(\w)\s+(['’](?:t|s|re|ve|ll|d|m))\b", r"\1\2", value)
    for pair in lexicon.words("en", "colloquial"):
        said, written = pair.split("=", 1)
        value = re.sub(rf"(?<![\w'-]){re.escape(said)}(?![\w'-])", written, value, flags=re.I)
    return value


def plain(value: str) -> str:
    """An English note's words as a note-taker writes them: without the intensifiers of chat
    (en.toml: intensifiers; "is super excited" → "is excited"), "so" before a feeling or a
    verdict ("is so glad" → "is glad"), the chat adverbs before a verb (en.toml: chat_adverbs;
    "even went camping" → "went camping") and a closing "too"."""
    verbs = "|".join(map(re.escape, (*lexicon.words("en", "auxiliaries"), *lexicon.words("en", "past_forms"))))
    value = re.sub(rf"(?<![\w'-])(?:{lexicon.alternation('en', 'intensifiers').pattern})\s+(?=[a-z])", "", value)
    feeling = "|".join(map(re.escape, (*lexicon.words("en", "feelings_without_be"), *lexicon.words("en", "evaluative"))))
    value = re.sub(rf"\bso\s+(?=(?:{feeling})\b)(?!so\b)", "", value)
    adverbs = "|".join(map(re.escape, lexicon.words("en", "chat_adverbs")))
    value = re.sub(rf"\b(?:{adverbs})\s+(?=(?:{verbs})\b|[a-z]+ed\b)", "", value)
    closing_too = re.search(r"(\w+),?\s+too$", value)  # "does too", "me too" say who else: they stay
    if closing_too and closing_too.group(1).lower() not in {*lexicon.words("en", "auxiliaries"), "me", "us", "them", "her", "him"}:
        value = value[: closing_too.start(1) + len(closing_too.group(1))]
    return value


def plain_parts(predicate: str, value: str) -> tuple[str, str]:
    """plain() on a note's predicate and object, and on the word where they meet: "is truly |
    grateful for …" → "is | grateful for …", "even | found a place" → "" and "found a place"."""
    predicate, value = plain(predicate), plain(value)
    last = predicate.split()[-1] if predicate.split() else ""
    if last and value and plain(f"{last} {value}") == value:
        predicate = predicate[: -len(last)].rstrip()
    return predicate, value


# ", it looks so cozy", "- it's so heartwarming", ", plus it's fulfilling": a verdict on what
# the note already said, after a comma or dash.
_VERDICT_TAIL = re.compile(r"\s*[,;–—-]\s*(?:plus\s+|and\s+|so\s+)?(?:it|that|this)\s*(?:['’]s|\s+is|\s+was|\s+looks|"
                           r"\s+feels|\s+sounds|\s+seems)\s+(?P<verdict>(?:[\w'-]+\s+){0,7}[\w'-]+)\s*$", re.I)


def without_tail(value: str) -> str:
    """An English note without the chat that trails it: a verdict on what it said ("loved the
    yellow leaves, it looks so cozy") or a word to the listener ("…, take a look"; en.toml:
    chat_tails)."""
    verdict = _VERDICT_TAIL.search(value)
    if verdict and any(w.lower() in lexicon.words("en", "evaluative") for w in verdict.group("verdict").split()):
        value = value[: verdict.start()]
    tails = lexicon.alternation("en", "chat_tails").pattern
    return re.sub(rf"\s*[,;–—-]?\s*(?:{tails})\W*$", "", value, flags=re.I) if re.search(r"\s", value.strip()) else value


def indefinite(predicate: str, value: str) -> str:
    """An object that points into the chat ("painted | that lake sunrise") as a note says it to
    someone who was not there: "a lake sunrise". "realize | that self-care matters" keeps its
    "that" (en.toml: that_clause_verbs); these/those stay ("has known these friends": without
    them, which friends is lost)."""
    value = _this_inside(value)
    m = re.match(r"(?:this|that)\s+(?=[a-z])(?!(?:it|he|she|they|we|i|you|there|her|his|their|my|our|the|a|an|for|to|after|"
                 r"before|with|in|on|at|from|by|about|as|is|was|and|or|but|so|because|when|if|too|again)\b)", value)
    last = predicate.split()[-1].lower() if predicate.split() else ""
    if not m or last in lexicon.words("en", "that_clause_verbs") or re.match(r"\S+\s+(?:is|was|are|were|has|had|will)\b", value[m.end():]):
        return value
    if any(value.lower().startswith(phrase.lower()) for phrase, _ in timeparse.find(value, "2000-01-01")):
        return value  # "this week": a time, not a thing
    rest = value[m.end():]
    return ("an " if re.match(r"[aeiou]", rest) else "a ") + rest


def _this_inside(value: str) -> str:
    # "got help from this adoption group she attended" → "from an adoption group …": "this" inside
    # an object, after a word that takes a noun (a preposition or a verb of doing), points into
    # the chat too. A time ("this week") and "like this" stay.
    def indefinite_article(m: re.Match) -> str:
        rest = value[m.end():]
        if any(rest.lower().startswith(p.lower()) or f"this {rest}".lower().startswith(p.lower())
               for p, _ in timeparse.find(f"this {rest}", "2000-01-01")):
            return m.group(0)
        return f"{m.group(1)} {'an' if re.match(r'[aeiou]', rest) else 'a'} "
    return re.sub(r"\b(from|by|of|with|across|at|in|on|about|seeing|saw|found|made|got|bought|met|joined|visited)\s+this\s+"
                  r"(?=[a-z])(?!(?:is|was|one|time|point|moment|stage|rate|week|month|year|morning|afternoon|evening|weekend|summer|winter|spring|fall|autumn)\b)",
                  indefinite_article, value)


def with_article(predicate: str, value: str) -> str:
    """"is | data engineer at a firm" (from "I'm Wren, data engineer at a firm") as a sentence says
    it: "a data engineer at a firm". Only a role of en.toml's professions, said without a
    determiner, after "is"/"was"."""
    if not re.search(r"\b(?:is|was)$", predicate.strip()):
        return value
    role = re.match(r"((?:[a-z-]+\s+){0,2}?)(%s)\b" % "|".join(map(re.escape, lexicon.words("en", "professions"))), value)
    if not role or re.match(r"(?:a|an|the|my|his|her|their|our|its|one|no|not)\b", value):
        return value
    return ("an " if re.match(r"[aeiou]", value) else "a ") + value
