"""How a new atom stands to a held one: "duplicate", "conflict" or "distinct" — pure rules
over two records and their similarity, so bench/dedup.py measures them on labelled pairs.

Vectors say "these read alike", fields confirm what it means: a similarity alone never merges
two atoms whose subject, kind or polarity differ, or whose values clash.
"""

from __future__ import annotations

import functools
import re

from .. import codec, text, timeparse
from ..extraction import lexicon, persons, slots
from ..settings import Settings

# Attributes that hold one value at a time: a new value replaces the old. The key of a
# predicate is found by phrase (stemmed words in order, or a Chinese substring), then by the
# bag of its content words. Predicates outside this map never conflict by value (a person
# has many dogs, sisters and hobbies); they only merge when they say the same thing.
ATTRIBUTE_KEYS: dict[str, tuple[str, ...]] = {
    "location": (
        "lives in", "living in", "moved to", "moving to", "relocated to", "is based in",
        "based in", "resides in", "settled in", "home is in",
        "住在", "住", "搬到", "搬去", "搬家到", "定居", "居住", "现居", "常驻", "生活在",
    ),
    "origin": ("is from", "comes from", "originally from", "grew up in", "hometown", "来自", "老家", "出生在", "出生于"),
    "employer": ("works at", "works for", "employed at", "employed by", "job at", "hired by", "任职于", "就职于", "就职", "上班"),
    "occupation": ("works as", "job is", "occupation", "profession", "job title", "职业", "工作是", "担任"),
    "relationship": (
        "married to", "is married", "dating", "relationship status", "in a relationship with",
        "engaged to", "divorced from", "partner is", "boyfriend is", "girlfriend is", "husband is", "wife is",
        "结婚", "单身", "恋爱", "男朋友", "女朋友", "离婚",
    ),
    "household": ("lives with", "shares a flat with", "shares an apartment with", "同住", "合租"),
    "age": ("age", "aged", "years old", "is years old", "岁", "年龄"),
    "name": ("name is", "is named", "is called", "goes by", "名字", "叫"),
    "school": ("studies at", "attends", "goes to school at", "enrolled at", "就读", "在读"),
}

# Words that turn a statement around ("no ORM", "doesn't drink coffee", "禁止 ORM").
_NEGATION = re.compile(
    r"\b(?:no longer|not|no|never|none|without|avoids?|stopped|quit|lost|left|anymore|can't|cannot|won't|"
    r"\w+n't)\b|不|没|别|禁止|勿|无|戒|讨厌",
    re.I,
)
# A plan called off: the new statement replaces the planned event it names.
_CANCELLED = re.compile(
    r"\b(?:cancel\w*|called off|(?:is|are|it's) off|postpon\w*|not going|won't (?:go|make it)|scrapp\w*|"
    r"fell through)\b|取消|不去了|去不了|泡汤|黄了|推迟|延期|改期", re.I)
# A habit given up: "让我把咖啡戒了", "quit coffee", "no more tea" replaces the habit it names.
_QUIT = re.compile(
    r"\b(?:quit|gave up|giving up|stopped|no more|no longer (?:drinks?|eats?|uses?))\s+(?:drinking |eating |using )?"
    r"([^\W\d_][\w-]*)|把(\w{1,4}?)戒(?:掉)?了|戒(?:掉|了)(\w{1,2})|不再(?:喝|吃|用)(\w{1,2})", re.I)
# A wish or intention is a plan too, when the small model files it as a preference or fact.
_PLANNED = re.compile(r"\b(?:plan\w*|want\w* to|going to|will|hop\w* to|(?:is|are|am)\s+\w+ing)\b"
                      r"|希望|打算|计划|准备|要去|下个|下周|明年|下月", re.I)
_WORD = re.compile(r"[^\W\d_]+(?:'[a-z]+)?|\d+", re.I)
_FAVOURITE = re.compile(r"(?:\bfavou?rite|最喜欢的)\s*([^\W\d_].*)", re.I)
_COPULAS = frozenset({"is", "am", "are", "was", "were", "be", "是", "为"})


def relation(new: dict, old: dict, similarity: float, settings: Settings, *, keyword_only: bool = False,
             multilingual: bool = False) -> str:
    """How a new record stands to a held one: "duplicate", "conflict" or "distinct".

    similarity is the vector cosine of the two canonical lines (or their keyword overlap in
    keyword-only mode); the fields decide what a high similarity may mean. multilingual says
    the vectors read Chinese and English alike (the default e5, not MiniLM): then a Chinese and
    an English line can meet at all, and English lines use e5's own merge threshold.
    """
    new, old = _dateless(new), _dateless(old)
    if _cancels(new, old, settings) or _quits(new, old):
        return "conflict"
    by_slots = _by_slots(new, old, settings)
    if by_slots:
        return by_slots
    if not _same_topic(new, old):
        return "distinct"
    if multilingual and not keyword_only and _has_cjk(new) != _has_cjk(old):
        return _across_languages(new, old, similarity, settings)
    if not _kinds_compatible(new, old):
        # The small model's kind wavers ("keen on counseling" an event, then a preference):
        # across kinds only a near-identical statement merges, and nothing conflicts.
        lexical = keyword_similarity(codec.canonical_text(new), codec.canonical_text(old))
        return _by_similarity(new, old, similarity, lexical, settings, keyword_only, multilingual)
    if {new["kind"], old["kind"]} == {"fact", "event"} and (attribute_key(new) or attribute_key(old)):
        # "moved to Hangzhou" replaces "lives in Berlin", but a fact restating the move is a
        # fact of its own: the event stays true whatever happens to the fact later.
        return "conflict" if _slot_conflict(new, old, settings) else "distinct"
    lexical = keyword_similarity(codec.canonical_text(new), codec.canonical_text(old))
    # Without vectors the fields carry the decision; the words only have to meet at all.
    floor = settings.merge_min_overlap if keyword_only else settings.merge_similarity_same_key
    by_slot = _by_slot(new, old, settings, confirmed=max(similarity, lexical) >= floor)
    return by_slot or _by_similarity(new, old, similarity, lexical, settings, keyword_only, multilingual)


def _by_slots(new: dict, old: dict, settings: Settings) -> str | None:
    """The decision when both notes fill the same attribute of the same subject (their slots,
    extraction/slots.py), None when they do not. The same value with the same polarity is a
    repeat; the same value with another polarity is a change ("stopped being vegetarian"); a
    new value of a one-value attribute replaces the old (lives_in Lisbon → Porto); values of a
    many-value attribute add up, and an ending never replaces what it does not name."""
    if old.get("polarity") != "ended" and owner(new) == owner(old) and _ends(new, old):
        return "conflict"
    key = new.get("attribute")
    if not key or key != old.get("attribute") or owner(new) != owner(old):
        return None
    if _changes(new):
        return "distinct"  # "Sicily instead of Crete" names Crete, but says something else holds
    same = _same_value(new.get("value", ""), old.get("value", ""), settings)
    if same:
        return "duplicate" if new.get("polarity", "holds") == old.get("polarity", "holds") else "conflict"
    if "ended" in (new.get("polarity"), old.get("polarity")):
        return "distinct"
    both_hold = new.get("polarity", "holds") == old.get("polarity", "holds") == "holds"
    return "conflict" if both_hold and slots.is_single(key) else "distinct"


def owner(record: dict) -> str:
    """Whose note it is: the person before "'s" / "的" in its subject ("Ana's trip" → "ana")."""
    return _owner(record.get("subject") or "")


# Cached, as _norm: each new note is judged against a dozen held ones, which recur across notes.
@functools.lru_cache(maxsize=1 << 14)
def _owner(subject: str) -> str:
    return _norm(persons.owner_and_thing(subject)[0])


def _dateless(record: dict) -> dict:
    # A Chinese note carries its date in its words ("2026年10月去杭州"); two notes are compared
    # on what they say, their dates being in their fields ("when", "date").
    return {**record, **{f: timeparse.without_zh_dates(record[f]) for f in ("predicate", "object") if record.get(f)}}


def _ends(new: dict, old: dict) -> bool:
    # An ending ("the Crete trip is off", "戒烟了", "switched from Jira to Linear") ends the note
    # it names: the same one-value attribute (an ending of a diet ends whichever diet), the same
    # value, or, when the ending names no attribute of the old note, a word of what it ends
    # (before "to" / 成 / 到, which name what comes instead).
    key = new.get("attribute")
    if key and key == old.get("attribute") and new.get("polarity") == "ended":
        if slots.names_every_value(key, new.get("value", "")):
            return True  # "doesn't have a pet anymore" ends the hamster
        if _same_value(new.get("value", ""), old.get("value", ""), Settings()):
            return True
        if not slots.is_single(key) or _changes(new):  # "豆豆送人了，没养宠物了" ends the hamster 豆豆
            return _shared(new, old)
        return False
    body = codec.canonical_text(new)
    if old["kind"] == "event" and not (_PLANNED.search(f"{codec.canonical_text(old)} {old.get('when', '')}")
                                       or _same_thing(new, old)):
        return False  # what happened stays true; only a plan or a state is called off
    return (_changes(new) or slots.polarity(body) == "ended") and _shared(new, old)


def _changes(record: dict) -> bool:
    # "switched to", "instead of", 改成: something now stands where something else stood.
    body = codec.canonical_text(record)
    return lexicon.alternation("zh" if text.has_cjk(body) else "en", "changes").search(body) is not None


def _same_thing(new: dict, old: dict) -> bool:
    # "Ana's offsite | got cancelled" and "Ana's team offsite | is on the 14th": one thing.
    def thing(record: dict) -> set[str]:
        return {text.stem(t) for t in text.terms(persons.owner_and_thing(record.get("subject") or "")[1])}
    return bool(thing(new) & thing(old))


def _shared(ending: dict, old: dict) -> bool:
    line = codec.canonical_text(ending)
    who = owner(ending)
    line = line[len(who):] if line.lower().startswith(who) else line  # the owner's name is no topic
    # what it ends, not what comes instead: the words after "to" / 改成 up to the clause's end go
    replaced = " ".join(re.findall(r"\binstead of ([^,;.]+)", line))  # "Sicily instead of Crete": Crete goes
    line = re.sub(r"\b(?:to|into|for)\b(?!.*\bfrom\b)[^,;.]*|(?:改成|换成|改到|改为|迁到|搬到)[^，,。；]*", " ", line)
    line = f"{line} {replaced}"
    ending = {text.stem(w) for w in lexicon.words("en", "ending_words")} | set(lexicon.words("zh", "common_words"))
    ours = {text.stem(t) for t in text.terms(line)} - ending
    theirs = {text.stem(t) for t in text.terms(codec.canonical_text(old))} - {owner(old)}
    return bool(ours & theirs)


def _same_value(a: str, b: str, settings: Settings) -> bool:
    if not a or not b:
        return False
    if text.has_cjk(a) or text.has_cjk(b):
        return a in b or b in a
    ta, tb = {text.stem(t) for t in text.terms(a)}, {text.stem(t) for t in text.terms(b)}
    if not ta or not tb:
        return a.casefold() == b.casefold()
    return len(ta & tb) / min(len(ta), len(tb)) >= settings.merge_value_overlap


def _across_languages(new: dict, old: dict, similarity: float, settings: Settings) -> str:
    """A Chinese and an English line share no words, so the vector alone says whether they
    say one thing ("我喜欢喝咖啡" / "likes coffee"); opposite polarity on a line that close
    is a conflict ("likes coffee" / "讨厌咖啡"). Names and numbers still have to agree."""
    if names_clash(new, old) or not _kinds_compatible(new, old):
        return "distinct"
    if polarity(new) != polarity(old):
        close = similarity >= settings.conflict_similarity_crosslingual and _statement_pair(new, old)
        return "conflict" if close else "distinct"
    return "duplicate" if similarity >= settings.merge_similarity_crosslingual else "distinct"


def _cancels(new: dict, old: dict, settings: Settings) -> bool:
    """Whether new calls off the plan old is: same subject, old an event, new saying it is off
    and naming what old named."""
    planned = old["kind"] == "event" or old["kind"] != "constraint" and _PLANNED.search(
        f"{codec.canonical_text(old)} {old.get('when', '')}")
    if not planned or owner(new) != owner(old):
        return False
    if not _CANCELLED.search(codec.canonical_text(new)) or _CANCELLED.search(codec.canonical_text(old)):
        return False
    return value_overlap(new, old) >= settings.cancel_overlap


def _quits(new: dict, old: dict) -> bool:
    """Whether new gives up the habit or liking old states: same subject, and what new quits
    is named in old."""
    if old["kind"] not in ("fact", "preference") or _norm(new.get("subject")) != _norm(old.get("subject")):
        return False
    old_line = codec.canonical_text(old)
    if _QUIT.search(old_line):
        return False
    old_terms = {text.stem(t) for t in text.terms(old_line)}
    for m in _QUIT.finditer(codec.canonical_text(new)):
        quit_terms = {text.stem(t) for t in text.terms(next(g for g in m.groups() if g))}
        if quit_terms and quit_terms <= old_terms:
            return True
    return False


def _same_topic(new: dict, old: dict) -> bool:
    # Same subject and (events) not on two known dates.
    if _norm(new.get("subject")) != _norm(old.get("subject")):
        return False
    dates = (new.get("date"), old.get("date"))
    return not (new["kind"] == old["kind"] == "event" and None not in dates and dates[0] != dates[1])


def _by_slot(new: dict, old: dict, settings: Settings, *, confirmed: bool) -> str | None:
    """The decision when both fill one slot (attribute key, preference target, predicate);
    None when they do not, and similarity alone has to decide."""
    key_new, key_old = attribute_key(new), attribute_key(old)
    same_value = value_overlap(new, old) >= settings.merge_value_overlap
    opposite = polarity(new) != polarity(old)
    if key_new and key_new == key_old:
        if same_value and not opposite:
            return "duplicate" if confirmed else "distinct"
        return "conflict" if _statement_pair(new, old) else "distinct"
    if key_new or key_old:  # one names a single-valued attribute, the other does not
        return "distinct"
    if same_value and _same_slot(new, old):
        if opposite:
            return "conflict" if _statement_pair(new, old) else "distinct"
        return "duplicate" if confirmed else "distinct"
    return None


def _by_similarity(new: dict, old: dict, similarity: float, lexical: float, settings: Settings,
                   keyword_only: bool, multilingual: bool) -> str:
    # Values worded differently ("a store selling fashion" / "an online clothing store"):
    # only a high similarity merges, and never across a negation or two different names.
    if polarity(new) != polarity(old) or names_clash(new, old):
        return "distinct"
    if keyword_only or _has_cjk(new, old):
        # MiniLM reads most Chinese characters as [UNK]: two Chinese lines look alike to it
        # whatever they say. e5 reads them, but "小王喜欢咖啡" / "小王喜欢茶" still sit at 0.97
        # (bench/dedup.py: zh merge precision 0.8 by vector, 1.0 by words), so without shared
        # values only the words vouch for a merge; across languages see _across_languages.
        return "duplicate" if lexical >= settings.merge_keyword_overlap else "distinct"
    # e5's cosines sit higher and closer together than MiniLM's: its own threshold.
    threshold = settings.merge_similarity_multilingual if multilingual else settings.merge_similarity
    ok = similarity >= threshold and lexical >= settings.merge_min_overlap
    return "duplicate" if ok else "distinct"


def _has_cjk(*records: dict) -> bool:
    return any(text.has_cjk(codec.canonical_text(r)) for r in records)


def _kinds_compatible(new: dict, old: dict) -> bool:
    # A small model files "no ORM" as a preference one day and a constraint the next, and
    # one statement as a fact in one run and an event in the next; those pairs are compared.
    return new["kind"] == old["kind"] or {new["kind"], old["kind"]} in ({"preference", "constraint"}, {"fact", "event"})


def _slot_conflict(new: dict, old: dict, settings: Settings) -> bool:
    # A fact and an event of which at least one names a single-valued attribute.
    if attribute_key(new) != attribute_key(old):
        return False
    different = value_overlap(new, old) < settings.merge_value_overlap or polarity(new) != polarity(old)
    return different and _statement_pair(new, old)


def _same_slot(new: dict, old: dict) -> bool:
    # A preference or constraint is about its target, however the liking is worded ("likes",
    # "enjoys", "禁止"); a fact or event is about its predicate too ("has a dog" ≠ "walks a dog").
    if {new["kind"], old["kind"]} <= {"preference", "constraint"}:
        return True
    a, b = _content_stems(new.get("predicate")), _content_stems(old.get("predicate"))
    if not a or not b:
        return a == b
    return len(a & b) / min(len(a), len(b)) >= 0.5


def _content_stems(phrase: str | None) -> set[str]:
    # Chinese predicates are compared by character: 用 / 使用, 住 / 住在.
    words = text.stems(_NEGATION.sub(" ", phrase or ""))
    return {p for w in words for p in (list(w) if text.has_cjk(w) else [w]) if p not in _FUNCTION_STEMS}


def _statement_pair(new: dict, old: dict) -> bool:
    # Events happened and stay true; only a state (fact, preference, constraint) is replaced.
    return old["kind"] != "event"


def attribute_key(record: dict) -> str | None:
    """The single-valued attribute a record's predicate names ("moved to" → "location"), or None."""
    return _attribute_key((record.get("predicate") or "").strip(), record.get("subject") or "")


# Dedup asks this of the same few records once per candidate pair (a dozen pairs per atom):
# remembered by their predicate and subject, on which alone it depends.
@functools.lru_cache(maxsize=1 << 14)
def _attribute_key(predicate: str, subject: str) -> str | None:
    copula = predicate.lower() in _COPULAS
    favourite = _FAVOURITE.search(subject if copula else predicate)
    if favourite:  # "favorite dance style (is)": one value at a time, whatever the thing
        return "favorite " + " ".join(w for w in text.stems(favourite.group(1)) if w not in _COPULAS)
    if not predicate or copula:
        return None
    found = [key for key, phrases in ATTRIBUTE_KEYS.items() if any(_phrase_in(p, predicate) for p in phrases)]
    if len(found) == 1:
        return found[0]
    if found:  # several keys: the longest phrase that matched decides
        return max(found, key=lambda k: max(len(p) for p in ATTRIBUTE_KEYS[k] if _phrase_in(p, predicate)))
    return _key_by_words(predicate)


def _phrase_in(phrase: str, predicate: str) -> bool:
    if text.has_cjk(phrase):
        return phrase in predicate
    want, have = _stems(phrase), _stems(predicate)
    return any(have[i : i + len(want)] == want for i in range(len(have) - len(want) + 1))


@functools.lru_cache(maxsize=1 << 14)
def _stems(phrase: str) -> tuple[str, ...]:
    return tuple(text.stems(phrase))


def _key_by_words(predicate: str) -> str | None:
    # The fallback for wordings not listed: the key whose phrases' content words the predicate
    # covers best ("currently residing" → location through "resides"); a tie says nothing.
    # Short stems ("com" of "comes from") are too common to name an attribute on their own.
    words = {w for w in text.stems(predicate) if w not in _FUNCTION_STEMS}
    if not words:
        return None
    scores: dict[str, float] = {}
    for key, phrases in ATTRIBUTE_KEYS.items():
        for phrase in phrases:
            want = {w for w in text.stems(phrase) if w not in _FUNCTION_STEMS}
            if want and not text.has_cjk(phrase) and max(map(len, want)) > 3:
                scores[key] = max(scores.get(key, 0.0), len(want & words) / len(want))
    best = sorted(scores.items(), key=lambda kv: -kv[1])
    if best and best[0][1] >= 1.0 and (len(best) == 1 or best[1][1] < 1.0):
        return best[0][0]
    return None


def polarity(record: dict) -> int:
    """+1 or -1: a preference's sentiment, else whether the predicate, or the object's first
    words ("no dog", "不吃辣"), are negated. A negation deeper in the object is the object's
    own business ("encourages Ivo to keep pushing and not give up")."""
    sentiment = record.get("sentiment")
    if sentiment in ("like", "dislike"):
        return 1 if sentiment == "like" else -1
    negated = _NEGATION.search(record.get("predicate") or "")
    leading = _NEGATION.match((record.get("object") or "").lstrip())
    return -1 if negated or leading else 1


def value_overlap(new: dict, old: dict) -> float:
    """How much the two values (objects; the predicates when there is none) share: the
    overlap coefficient of their stemmed content terms, negations left out. Names and
    numbers must meet: "a cat named Oliver" and "a cat named Bailey" share nothing."""
    a, b = _value_terms(new), _value_terms(old)
    if not a or not b:  # no value words ("special" "to me"): only two bare predicates can agree
        return 1.0 if not a and not b and _norm(new.get("predicate")) == _norm(old.get("predicate")) else 0.0
    if names_clash(new, old):
        return 0.0
    return len(a & b) / min(len(a), len(b))


def names_clash(new: dict, old: dict) -> bool:
    """Both values carry names or numbers and share none ("Oliver" / "Bailey", "200 ms" / "500 ms")."""
    a, b = _names(new), _names(old)
    return bool(a and b and not a & b)


def _names(record: dict) -> set[str]:
    words = _WORD.findall(record.get("object") or "")
    return {text.stem(w.lower()) for w in words
            if w.isdigit() or w[:1].isupper() and w.lower() not in text.STOP_WORDS}


def _value_terms(record: dict) -> set[str]:
    value = record.get("object") or record.get("predicate") or ""
    value = _NEGATION.sub(" ", value)
    return {text.stem(t) for t in text.terms(value)}


def keyword_similarity(a: str, b: str) -> float:
    """Dice coefficient of the stemmed content terms of two lines (Chinese: bigrams)."""
    ta, tb = {text.stem(t) for t in text.terms(a)}, {text.stem(t) for t in text.terms(b)}
    if not ta or not tb:
        return 0.0
    return 2 * len(ta & tb) / (len(ta) + len(tb))


_FUNCTION_STEMS = frozenset(text.stem(w) for w in text.STOP_WORDS) | {"to", "in", "at", "for", "from", "by", "as"}


@functools.lru_cache(maxsize=1 << 14)  # a pure function of a field's value, called for each pair judged
def _norm(value: str | None) -> str:
    value = (value or "").casefold().strip()
    value = re.sub(r"^(the|a|an)\s+", "", value)
    return " ".join(_WORD.findall(value)) if not text.has_cjk(value) else "".join(value.split())
