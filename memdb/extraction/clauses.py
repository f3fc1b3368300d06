"""The extractive fallback: what the model left out, taken from the turn's own words.

A 0.5B model skips many facts a turn states plainly ("I'm allergic to shrimp", "她是我女儿，今年6岁").
After the model's notes, every sentence of the turn that states something about a person and
that no note covers becomes a note of its own: the sentence cut at its clauses, fillers and
interjections removed, "I", "my", "我" made the speaker's name, "she", "她" the person the turn
last named. Each such note then goes through the same grounding, gate and time resolution as
the model's, so it only fills gaps and never adds small talk.
"""

from __future__ import annotations

import functools
import re

from .. import text, timeparse
from . import lexicon, persons, slots
from .prefilter import FIRST_PERSON_WORDS, sentence_kind

_VOCATIVE = re.compile(r"^[A-Z][a-z]+,\s*|,\s*[A-Z][a-z]+$")  # "Bea, ..." / "..., Rosalind"
_CLAUSE = re.compile(r"\s*(?:;|:|—|–| - |, but |, and |, so |, which (?!I |we )| but | and then | and (?=it |it's |that |this )"
                     r"|\s[\U0001F300-\U0001FAFF\u2600-\u27BF]+\s"
                     r"|,\s+(?=(?:I|I'm|I've|I'll|I'd|my|My|we|We|we're|We're|please|Please)\b))\s*")
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
# "陪豆豆", "带老周", "叫汤圆": two characters after a verb that takes a person (or pet) are a name.
_ZH_PERSON = re.compile(r"(?:陪|带着?|叫|跟|和|给)([\u4e00-\u9fff]{2})(?=[，,。！？\s]|$)")
_PRONOUN = re.compile(r"\b(?:she|he|her|him|his)\b|[她他]", re.I)
MAX_CLAUSE_CHARS = {"en": 140, "zh": 48}


def notes(content: str, speaker: str, names: set[str], covered: set[str], ts: str) -> list[dict]:
    """Records ({"subject", "object"}) for the statements of content that no held note covers
    (covered: the content terms of the model's notes)."""
    zh = text.has_cjk(content)
    content = persons.corrected_zh(content) if zh else content
    found, covered = [], set(covered)
    person = None  # in Chinese, the last person a clause named: who a following "她" is
    thing = subject = None  # in English, what the clause before ended on and opened with: what "it" stands for
    for clause in _clauses(content, zh):
        if zh and person and re.match(r"[她他](?!们)", clause):
            clause = person + clause[1:]
        if not zh:
            clause, thing, subject = _it_named(clause, thing, subject)
        person = (_ZH_PERSON.findall(clause) or [person])[-1] if zh else None
        if sentence_kind(clause, names) != "content" or not _states_something(clause, zh, ts):
            continue
        terms = set(text.terms(clause))
        keys = {t for t in terms if re.search(r"[a-z0-9]", t)} if zh else set()
        if terms and len(terms & covered) >= len(terms) / 2 and keys <= covered:
            continue  # the model already said it (in Chinese, its names and numbers too)
        if found and not zh and _POINTS_BACK.match(clause):  # "… a half marathon. It's on the 21st.": extract.py
            found.append({"subject": speaker, "object": clause})  # lends its date to the note before
            continue
        record = _as_record(clause, speaker, names | ({person} if person else set()), zh, content)
        if record:
            found.append(record)
            covered |= terms
    return found


# The noun phrase a clause ends on ("…, like my hand-painted bowl") and the one it opens with
# before "is" ("Contemporary dance is so expressive"): what an "it" in the next clause stands for.
_LAST_THING = re.compile(r"(?<!\bin )(?<!\bat )(?<!\bas )(?<!\bof )(?<!\bto )(?<!\bon )(?<!\bby )(?<!\bfor )(?<!\bfrom )"
                         r"(?<!\bwith )(?<!\binto )\b((?:a|an|the|my|our)\s+(?:[\w'-]+\s+){0,3}[\w'-]+)\s*$", re.I)
_FIRST_THING = re.compile(r"^((?:(?:the|my|our)\s+)?[A-Za-z][\w'-]*(?:\s+[\w'-]+){0,2}?)\s+(?:is|was|are|were)\b", re.I)


def _it_named(clause: str, thing: str | None, subject: str | None) -> tuple[str, str | None, str | None]:
    """The clause with an "it" that stands for the clause before's thing written out ("A friend
    made it for my birthday" after "…, like my hand-painted bowl" → "made my hand-painted bowl"),
    and what the next clause's "it" may stand for."""
    opened = re.match(r"it\s+(?!(?:is|was|will|would|has|had|does|did|can|could|must|might|may)\b|['’])(?=[a-z])", clause, re.I)
    if opened and subject:  # "- it really speaks to me" after "Contemporary dance is so expressive"
        clause = subject + clause[opened.end() - 1:]
    elif thing and not opened and not re.match(r"(?:he|she|they|it|we)\b", clause, re.I):  # "She gave it to me": whose, unsure
        # only as the object of a verb of doing, at the end or before a preposition: "made it for my
        # birthday", "never forget it"; not "make it happen", "worth it", "those who need it"
        done = "|".join(map(re.escape, [*lexicon.words("en", "past_forms"), "forget", "remember"]))
        clause = re.sub(rf"^((?:\S+\s+){{0,4}}?(?:{done}|[a-z]+ed))\s+it(?=\s*$|\s*[,.!;]|\s+(?:to|for|at|in|on|with|from|"
                        rf"into|over|back|last|yesterday|today|this|every)\b)", rf"\1 {thing}", clause, count=1, flags=re.I)
    last = _LAST_THING.search(clause.rstrip(" .!"))
    first = _FIRST_THING.match(clause)
    nouns_only = lambda phrase: phrase and phrase.split()[-1].lower() not in lexicon.words("en", "not_a_thing") \
        and not timeparse.find(phrase, "2000-01-01")
    thing = last.group(1) if last and nouns_only(last.group(1)) and not re.search(r"[^s]s$", last.group(1)) else None
    topic = re.fullmatch(r"(?:the|my|our)\s+[\w'-]+(?:\s+[\w'-]+){0,3}", clause.strip(" .!:;"), re.I)
    if topic and nouns_only(topic.group(0)):
        return clause, thing, topic.group(0)  # "So, the pricing model: I added … and it jumped": what the talk is about
    if re.match(r"(?:i|we)\b", clause, re.I) and not first:
        return clause, thing, subject  # the speaker's doing in between ("I added …") leaves the topic standing
    subject = first.group(1) if first and nouns_only(first.group(1)) \
        and first.group(1).split()[0].lower() not in lexicon.words("en", "pronoun_subjects") and \
        first.group(1).split()[0].lower() not in ("i", "it", "this", "that", "there", "here", "what", "which", "who") else None
    return clause, thing, subject



# A clause that only dates the one before it ("It's on the 21st next month").
_POINTS_BACK = re.compile(r"^(?:it|that)(?:'s| is| was|'ll be| will be)\s+(?=(?:on|in|at|next|this|last|tomorrow)\b)", re.I)


def _clauses(content: str, zh: bool) -> list[str]:
    content = _BRACKETS.sub(" ", content)
    if zh:
        out = []
        for sentence in _ZH_SENTENCE.findall(content):
            sentence = _zh_opener_free(sentence.strip(" ，,"))
            out += _cut(sentence, MAX_CLAUSE_CHARS["zh"], "，")
        return [c for c in out if c]
    out = []
    for sentence in text.sentences(content):
        for part in _aside_kept(_and_i_split(_CLAUSE.split(sentence))):
            part = re.sub(r"^[\U0001F300-\U0001FAFF\u2600-\u27BF\uFE0F\s]+", "", part)  # "🎉 I signed …"
            part = persons.discourse_free(part.strip(" ,.!")).strip(" ,.!")  # "Yeah, so I …" → "I …"
            part = _VOCATIVE.sub("", part)
            out += _cut(part, MAX_CLAUSE_CHARS["en"], ", ")
    return [c for c in out if c]


def _and_i_split(parts: list[str]) -> list[str]:
    # "the offsite is Thursday and I got roped into ordering lunch": two statements, the second
    # the speaker's own; "my partner and I are moving" stays one (its first part has no verb).
    out: list[str] = []
    for part in parts:
        pieces = re.split(r"\s+and\s+(?=I\s|I['’])", part)
        merged = [pieces[0]]
        for piece in pieces[1:]:
            if re.search(rf"\s(?:{_verbs()})\b", f" {merged[-1]}", re.I):
                merged.append(piece)
            else:
                merged[-1] = f"{merged[-1]} and {piece}"
        out += merged
    return out


def _zh_opener_free(sentence: str) -> str:
    # "说实话，…", "还是老规矩—…": words that open a Chinese sentence and carry nothing (zh.toml: openers).
    openers = "|".join(map(re.escape, lexicon.words("zh", "openers")))
    answers = "|".join(map(re.escape, lexicon.words("zh", "answers")))
    return re.sub(rf"^(?:(?:{openers})[，,、：:—～~\s]*|(?:{answers})[，,～~]\s*)+", "", sentence)


def _aside_kept(parts: list[str]) -> list[str]:
    # "I'm carving out me-time - running, reading, or playing my violin": a part that opens
    # with an -ing word or a list is the clause before it, said again in detail.
    kept: list[str] = []
    for part in parts:
        if kept and re.match(r"[a-z]+ing\b(?!\s+(?:is|are|was)\b)", part.strip()):
            kept[-1] = f"{kept[-1]}: {part.strip()}"
        else:
            kept.append(part)
    return kept


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
        said = sum(text.is_cjk(ch) and ch not in text.ZH_STOP_CHARS for ch in clause) + 2 * len(_ENTITY.findall(clause))
        return said >= 4 or "我" in clause and bool(slots.read("", clause).get("attribute"))  # "我住在青岛"
    terms = text.terms(clause)
    if len(terms) < 2:
        return False
    opened = _subject_first(persons.discourse_free(clause))
    own = _OWN_SUBJECT.match(opened)
    if own and (len(terms) >= 3 or slots.read("", persons.drop_leading_i(opened)).get("attribute")):
        return True  # "I just launched an ad campaign for my store", "I'm vegetarian": the speaker's own
    if re.match(r"(?:he|she)\s", opened, re.I) and len(terms) >= 3:
        return True  # "He landed a job at a school": someone the turn named (_as_record says who, or nothing)
    if len(terms) >= 3 and re.search(r"\b(?:me|my|myself)\b", clause, re.I):
        return True  # "Contemporary dance really speaks to me": something that acts on the speaker
    return bool(_DURABLE.search(clause) or _ENTITY.search(clause) or timeparse.find(clause, ts))


_OWN_SUBJECT = re.compile(r"(?:i|i['’](?:m|ve|ll|d)|my|we|we['’](?:re|ve|ll)|our)\s", re.I)


def _as_record(clause: str, speaker: str, names: set[str], zh: bool, content: str = "") -> dict | None:
    """The clause as a note about its subject: the speaker unless it names someone else first."""
    others = [n for n in names if n and n != speaker]
    return _zh_record(clause, speaker, others) if zh else _en_record(clause, speaker, names, others, content)


# "猪肉我是不吃的", "青霉素我不能用": the thing said first, then the speaker and a negated verb;
# written as a note says it ("我不吃猪肉"), so a repeat reads as the note it repeats.
_ZH_TOPIC_FIRST = re.compile(r"^([^，,。！？我]{1,8}?)我(?:是)?((?:从来)?(?:不|没|从不)(?:能|会|太)?)([^，,。！？的了]{1,3}?)(的?)(?=$|[，,])")  # not before 了: "…我不去了" ends a plan, and says so there


def _zh_record(clause: str, speaker: str, others: list[str]) -> dict:
    # The subject opens the clause: 我 / 我们 / 我的 (the speaker: gate.repair_persons writes the
    # rest), a name the turn gives, or nobody (chat leaves the speaker out: "周末一般去爬山").
    clause = _ZH_TOPIC_FIRST.sub(lambda m: f"我{m.group(2)}{m.group(3)}{m.group(1)}{m.group(4).replace('的', '')}", clause, count=1)
    named = _last_named(clause, others)
    clause = re.sub(r"[她他](?=是|今年|这学期|天天|最近|突然|叫)", named or "\\g<0>", clause) if named else clause
    for name in others:
        if clause.startswith(name):
            return {"subject": name, "object": clause[len(name):].lstrip("，, ") or clause}
    called = re.match(rf"([老小][\u4e00-\u9fff])(?=(?:{lexicon.alternation('zh', 'subject_openers').pattern}))", clause)
    if called and "我" not in clause:  # "老周要走了，公司把他调去…": a person called by 老/小 and a surname
        return {"subject": called.group(1), "object": clause[called.end():]}
    if not named and re.search(r"(?:^|[，,\s\U0001F000-\U0001FAFF])[她他](?!们)", clause) and "我" in clause:
        # "他下个月交接，之后组里的事归我管": who 他 is, only the turns before say; the speaker's
        # part stands alone (zh.toml: after_words, the "之后" that pointed at the cut part, go too)
        parts = [p.strip() for p in re.split(r"[，,]\s*|\s*[\U0001F000-\U0001FAFF]+\s*", clause)
                 if len(p) > 1 and not re.match(r"[她他](?!们)", _zh_opener_free(p))]
        clause = re.sub(rf"^(?:{lexicon.alternation('zh', 'after_words').pattern})", "", "，".join(parts))
    if speaker_says_zh(clause):
        # Chat leaves the speaker out ("也觉得健身对我帮助很大", "天气不错，都出去逛了一圈"): 我 is
        # said back in, once, before the first comma-part that opens as the speaker's.
        parts = re.split(r"([，,]\s*)", clause)
        topic = re.match(r"(?:家里|我家|我的)?(?:那|这)(?:只|个|位|条|辆|套)", parts[0])
        if topic and len(parts) > 2 and "我" not in parts[0]:
            # "家里那只橘猫，三岁了，最近挑食": the first part names what the rest is about, the speaker's
            return {"subject": f"{speaker}的{parts[0][topic.end():]}", "object": "".join(parts[2:])}
        for i in range(0, len(parts), 2):
            if not parts[i].startswith("我") and _piece_is_the_speakers(parts[i], first=i == 0) \
                    and not re.match(r"[A-Za-z0-9]", parts[i]) and "我" not in "".join(parts[:i + 1]):
                if re.match(r"都|大家", _zh_opener_free(parts[i])):
                    return None  # "八个人，都是同事": 都 says a group (我们, 他们) the clause leaves out, not the speaker
                parts[i] = "我" + parts[i]
                break
            topic = re.match(r"[A-Za-z0-9_.-]+\s*(?=[\u4e00-\u9fff])", parts[i])
            if topic and i == 0 and "我" not in parts[i]:
                # "statement_timeout 事后已经加上了": a Latin topic first, the speaker after it
                parts[i] = f"{topic.group(0)}我{parts[i][topic.end():]}"
                break
            if "我" in parts[i]:
                break
        clause = "".join(parts)
        return {"subject": speaker, "object": clause}  # gate.repair_persons names 我 where it stands
    return None  # "才周四", "她又抱回来一张奖状": about something or someone the clause does not name


def speaker_says_zh(clause: str) -> bool:
    """Whether a Chinese clause is about its speaker: it says 我, or leaves the speaker out as
    chat does ("周末一般去爬山": one of its comma-parts opens on one of zh.toml's subject_openers
    once its time words are read past — "今晚红烧肉" and "下周四晚上豆豆有课" do not), or it ends or changes something
    ("西安不去了", "评审会改到周五了"). A clause that opens with a name of a thing
    ("statement_timeout 加上了") is the speaker's too."""
    if "我" in clause or slots.polarity(clause) == "ended" or lexicon.alternation("zh", "changes").search(clause):
        return True
    pieces = [p for p in re.split(r"[，,\s]+", clause) if p]
    return any(map(_piece_is_the_speakers, pieces[1:])) or bool(pieces) and _piece_is_the_speakers(pieces[0], first=True)


def _piece_is_the_speakers(rest: str, first: bool = False) -> bool:
    # One comma-part of a clause: past its time words, does it open as the speaker's own
    # (zh.toml: subject_openers)? A thing's name opening the whole clause counts too.
    opened_with_time = False
    while True:
        times = [p for p, _ in timeparse.find(rest, "2000-01-01") if rest.startswith(p)]
        part_of_day = re.match(lexicon.alternation("zh", "parts_of_day").pattern, rest)
        if not times and not part_of_day:
            break
        rest = rest[len(times[0]) if times else part_of_day.end():].lstrip("，, ")
        opened_with_time = True
    if opened_with_time and (not rest or rest.startswith("是")):
        return False  # "今天是我的生日": the day is the subject
    return rest.startswith(lexicon.words("zh", "subject_openers")) or bool(
        first and re.match(r"[A-Za-z0-9]", rest) and not opened_with_time)


def _en_record(clause: str, speaker: str, names: set[str], others: list[str], content: str) -> dict | None:
    clause = persons.discourse_free(clause)
    first = re.match(r"([A-Z][a-z]+)\s+(?!is\b|was\b)([a-z].*)", clause)
    if first and first.group(1) not in _NOT_NAMES and re.search(rf"[a-z,]\s+{first.group(1)}\b", content):
        # "Oh, and Anika told us she's leaving …": a name, capitalised mid-sentence, about Anika
        return {"subject": first.group(1), "object": first.group(2)}
    clause = _subject_first(clause)
    mine = _IS_MINE.match(clause)
    if mine:  # "Dance is pretty much my go-to for stress relief" → "Ana's go-to for stress relief | is | dance"
        return {"subject": f"{speaker}'s {mine.group(2)}", "predicate": "is", "object": mine.group(1)[:1].lower() + mine.group(1)[1:]}
    with_name = re.match(r"^([A-Z][a-z]+)\s+and\s+(?:I|me)\s+(.+)$", clause)
    if with_name and with_name.group(1) not in _NOT_NAMES:  # "Kai and I got married" → "Ana and Kai got married"
        return {"subject": speaker, "predicate": f"and {with_name.group(1)}", "object": with_name.group(2)}
    pair = _WITH_ME.match(clause)
    if pair:  # "my partner Emil and I are moving …" → "Ana and her partner Emil are moving …"
        return {"subject": speaker, "predicate": f"and my {pair.group(1)}", "object": pair.group(2)}
    modals = lexicon.alternation("en", "cheer_modals").pattern
    if re.match(rf"(?:we|let['’]?s)\s+(?:{modals})", clause, re.I) or re.match(rf"i\s+(?:{modals})", clause, re.I) and re.search(
            rf"\bI(?:['’]m| am) (?:sure|confident)\b[^.!?]*\b{re.escape(clause[:40])}", content):
        return None  # "we should plan a dance night", "I'm sure I can make it work": a proposal or cheer, no fact
    if re.match(r"i\b|i['’]", clause, re.I):
        return {"subject": speaker, **_verb_and_rest(persons.drop_leading_i(clause))}
    way = re.match(r"([A-Za-z]+ing(?:\s+[\w'-]+){0,3}?)(?:['’]s|\s+is)\s+(an?\s+(?:[\w-]+\s+){0,2}way to\b.*)$", clause)
    if way and re.search(r"\b(?:me|my|myself)\b", way.group(2), re.I):
        # "Knitting's a calm way to clear my head" → "Ana finds knitting a calm way to clear her head"
        return {"subject": speaker, "predicate": "finds", "object": f"{way.group(1).lower()} {way.group(2)}"}
    found = gerund_subject(clause)
    if found and (re.match(r"(?:is|was|been|can be|could be|will be|has been|had been)$", found.group(3), re.I)
                  or re.match(r"\s*sense\b", clause.strip()[found.end():], re.I)):  # "Doing research makes sense": a verdict
        return None  # "Taking risks is scary", "Drawing is my fave": an opinion, not what happened to the speaker
    if found:  # "Painting helps me unwind" → "Ana finds that painting helps her unwind"
        said = found.group(3).lower().split()[0]
        verb = "found that" if said in lexicon.words("en", "past_forms") or said.endswith("ed") or said in ("was", "had") \
            else "finds that"
        return {"subject": speaker, "predicate": verb, "object": clause[:1].lower() + clause[1:]}
    if re.match(r"we\b|we['’]", clause, re.I):  # "we use Go" → "Ana's team uses Go"
        group = persons.we_are(clause, speaker)
        if group == speaker and re.search(r"\b(?:each other|one another)\b", clause, re.I):
            return None  # "we … enjoy each other's company": a group the clause does not name, not one person
        rest = _we_verb(clause)
        if group != speaker:  # "our family camping trip" of "Ana's family" is theirs, not hers
            rest = re.sub(r"\b(our|us|ourselves)\b", lambda m: {"our": "their", "us": "them"}.get(m.group(1).lower(), "themselves"),
                          rest, flags=re.I)
        return {"subject": group, **_verb_and_rest(rest)}
    for name in others:
        if clause.startswith(name + " "):
            return {"subject": name, "object": clause[len(name) + 1:]}
    own = re.match(r"^(?:my|our)\s+((?:[\w'-]+,?\s+){0,4}?[\w'-]+)(?<!\band)(?<!\bor)\s+(?=(?:%s|[a-z]+(?<!s)s|[a-z]+ed)\b)(.+)$" % _verbs(),
                   clause, re.I)
    if own:  # "my sister's wedding is in June" → "Ana's sister's wedding | is in June"
        return {"subject": f"{speaker}'s {own.group(1)}", **_verb_and_rest(own.group(2))}
    person = _pronoun_person(clause, content, speaker, names)
    if person:  # "He landed a job there", the turn naming one other person: that person
        return {"subject": person, "object": re.sub(r"^\w+\s+", "", clause)}
    if _PRONOUN.match(clause) or lexicon.alternation("en", "pronoun_subjects").match(clause):
        return None  # about someone or something only a pronoun names
    rule = lexicon.alternation("en", "rule_openers").match(clause) or lexicon.alternation("en", "rule_words").search(clause)
    if rule and not persons.FIRST_PERSON.search(clause) and not re.search(r"\b(?:it|this|that|had|was)\b", clause, re.I) \
            and not re.search(r"(?:\b(?:is|are|were)\s+|['’]s\s+)\w+ing\b", clause):  # "All the work's paying off": news, no rule
        # "No hosted APIs, no pasting rows into web tools": a rule, and whose it is
        return {"subject": f"{speaker}'s rule:", "object": clause[:1].lower() + clause[1:]}
    thing = re.match(r"^((?:[\w'-]+\s+){0,4}?[\w'-]+)\s+(?=(?:%s|[a-z]+ed)\b)(.+)$" % _verbs(), clause, re.I)
    if thing and _no_thing(thing.group(1)):
        thing = None  # "Next Friday works", "Never had a chance": a time or an adverb, not a thing
    if thing and (rule or _ENTITY.search(clause) or timeparse.find(thing.group(2), "2000-01-01")
                  or slots.polarity(thing.group(2)) == "ended"
                  or re.match(r"(?!(?:is|are|was|were|like)\b)(?:[\w'-]+\s+){0,3}(?:me|myself)\b", thing.group(2), re.I)):
        # … or a thing of the speaker's that acts on them ("The support group has made me feel accepted")
        # "The offsite is on June 4", "The Crete trip is off", "Anything with client data stays
        # inside our VPC": a thing of the speaker's, with a name, number, time, rule or ending
        noun = re.sub(r"^(?:our|my|the)\s+(?!(?:%s)\b)" % "|".join(lexicon.words("en", "pronoun_subjects")),
                      f"{speaker}'s ", thing.group(1), flags=re.I)
        return {"subject": noun[:1].upper() + noun[1:], **_verb_and_rest(thing.group(2))}
    return None  # a remark without its own subject: the raw turn says it better than a note could


def gerund_subject(clause: str) -> re.Match[str] | None:
    """The clause's opening -ing phrase and its verb when that phrase is the clause's subject
    ("Painting helps me unwind", "Searching for a flat has been tough"; en.toml:
    gerund_subject_verbs), else None ("Researching flats near the park" says what the speaker does)."""
    verbs = lexicon.alternation("en", "gerund_subject_verbs").pattern
    found = re.match(rf"([A-Za-z]+ing)\b((?:,?\s+[\w'&-]+){{0,10}}?)(?:\s+(?:really\s+|truly\s+)?|['’]s\s+(?=been\b))({verbs}|been)(?![\w'-])",
                     clause.strip(), re.I) if re.match(r"[A-Za-z]+ing\b", clause.strip()) else None
    if found and re.search(r"(?:^|\s)(?!(?:at|to|for|with|of|on|in|about|from|by)\s)[\w'-]+\s+(?:i|we|you|they|he|she|it|who|that|which)$",
                           f" {found.group(1)}{found.group(2)}", re.I):
        return None  # "Working late and it makes me tired": the verb has its own subject ("at it brings": an object)
    return found


def _no_thing(noun: str) -> bool:
    # A time ("Next Friday") or a word that only modifies a verb ("Never", en.toml: auxiliaries)
    # in the place of a thing.
    said = [p for p, _ in timeparse.find(noun, "2000-01-01")]
    return any(p.lower() == noun.lower() for p in said) or noun.lower() in lexicon.words("en", "auxiliaries") \
        or re.fullmatch(r"[A-Za-z]+ly", noun) is not None  # "Really made me think"


# "X is my favourite Y": the speaker's Y is X.
_IS_MINE = re.compile(r"^((?:[\w'-]+\s+){0,3}?[\w'-]+)\s+(?:is|are)\s+(?:pretty much\s+|basically\s+|definitely\s+|really\s+)?my\s+(.+)$",
                      re.I)
# "my partner Emil and I are …": the speaker and someone of theirs, the speaker's name first.
_WITH_ME = re.compile(r"^(?:my|our)\s+((?:[\w'-]+\s+){0,3}?[\w'-]+)\s+and\s+(?:I|me)\s+(.+)$", re.I)


@functools.cache  # asked for every clause of every turn; the lists are read once
def _verbs() -> str:
    # The verbs that end a noun phrase at the front of a clause (en.toml: phrase_verbs, past_forms), as one alternation.
    return "|".join(map(re.escape, [*lexicon.words("en", "phrase_verbs"), *lexicon.words("en", "past_forms")]))


def _we_verb(clause: str) -> str:
    """"we use Go" said of a team: "uses Go"."""
    clause = re.sub(r"^(we(?:['’](?:re|ve|ll|d))?)\s+(?:all|both)\b", r"\1", clause, flags=re.I)
    rest = re.sub(r"^we(?:['’](re|ve|ll|d))?\s*", lambda m: {"re": "is ", "ve": "has ", "ll": "will ", "d": "would "}
                  .get(m.group(1) or "", ""), clause, flags=re.I)
    return persons.agree(rest) if not re.match(r"(?:is|has|will|would)\b", rest) else rest


def _pronoun_person(clause: str, content: str, speaker: str, names: set[str]) -> str | None:
    # "he"/"she" opening a clause, when the turn before it names exactly one other person.
    if not re.match(r"(?:he|she)\b", clause, re.I):
        return None
    before = content[: max(0, content.find(clause))] if clause in content else content
    relation = "|".join(lexicon.words("en", "relations"))
    found = {m for m in re.findall(rf"\b(?:{relation})\s+([A-Z][a-z]+)", before) if m not in _NOT_NAMES and m != speaker}
    found |= {n for n in names if n != speaker and re.search(rf"\b{re.escape(n)}\b", before)}
    return found.pop() if len(found) == 1 else None


# "Right now I'm setting up …": a time or place before the speaker, moved behind the statement.
def _lead(clause: str) -> re.Match[str] | None:
    # "Right now I'm setting up …", "On weekends I play tennis": a time or place before the
    # speaker (lexicon/en.toml: lead_time), moved behind the statement.
    times = "|".join(map(re.escape, lexicon.words("en", "lead_time")))
    said = "|".join(re.escape(p) for p, _ in timeparse.find(clause, "2000-01-01") if clause.lower().find(p.lower()) < 4)
    if said:  # "In May I went to Hanoi": any time phrase the clause opens with
        times = f"{times}|(?:in|on|at|during|by)?\\s*(?:{said})"
    return re.match(rf"^((?:{times}|since \w+|for (?:deployment|work))\s*,?\s+)(?=(?:i|we|my|our)\b)", clause, re.I)
# "Been training since March", "Thought about …": the speaker left out, as people do in chat.
_ELIDED = re.compile(r"^(gonna|wanna|been|thought|got|went|had|started|finished|spent|took|made|tried|found|bought|signed|lost|won|"
                     r"quit|left|met|saw|joined|moved|visited|adopted|decided|learned|loved)\b\s*",
                     re.I)


def _subject_first(clause: str) -> str:
    """The clause with the speaker's "I" first, where chat put something else first or left it out."""
    # "I'm off to go swimming" → "I'm going swimming"; "off to go do some research" → "going to do …"
    clause = re.sub(r"\b(I['’]m|I am|we['’]re|we are) off to go (?!\w+ing\b)", r"\1 going to ", clause, flags=re.I)
    clause = re.sub(r"\b(I['’]m|I am|we['’]re|we are) off to go ", r"\1 going ", clause, flags=re.I)
    lead = _lead(clause)
    if lead:
        moved = lead.group(1).strip(" ,")
        return f"{clause[lead.end():]} {moved[:1].lower()}{moved[1:]}"  # "… in May": a name keeps its capital
    doing = re.match(r"([A-Z][a-z]+ing)\s+(?!.*\b(?:is|are|was|were|isn't|aren't|wasn't|sounds|looks|seems)\b)", clause)
    if doing and doing.group(1) not in _NOT_NAMES and not gerund_subject(clause):  # "Researching adoption agencies": what the speaker is doing
        return f"I am {clause[:1].lower()}{clause[1:]}"
    elided = _ELIDED.match(clause)
    if elided and re.match(r"(?:gonna|going to) be\s+(?!\w+ing\b)", clause, re.I):
        return clause  # "Gonna be a big change": chat leaves out "it", not "I"
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


def _last_named(clause: str, others: list[str]) -> str | None:
    # The person a "她" stands for: a name the clause mentions before it.
    hits = [(clause.rfind(n), n) for n in others if n in clause]
    return max(hits)[1] if hits else None
