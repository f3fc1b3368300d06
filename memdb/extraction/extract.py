"""One turn at a time: prefilter → rules or prompt → the model → parse → normalize → ground.

The rules go first: the notes taken from the turn's own clauses (clauses.py) are kept without a
model call when they hold at least `Settings.extract_rules_cover` of the turn's content terms
(dev gold, bench/atom_quality.py: 104 model calls instead of 163 at 0.5, with recall unchanged and
precision, strict recall and compression up; the model adds nothing a clause does not say
plainly, and most of what it adds on such turns is a second wording of the same fact).

Each remaining turn goes to the model in its own call (a 0.5B model mixes lines up when given
several: LoCoMo recall 0.77 with 1 line per call, 0.59 with 2, 0.27 with 6), with the turns
before it shown as context when asked for. Unusable output gets one retry, then the turn is
marked failed with the reason, and so is the rest of the batch (a broken model or template,
far more often than a hard turn). Bad model output never raises.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from .. import codec, text
from ..errors import InvalidInput, ModelError
from ..models.protocols import LLM
from ..settings import Settings
from . import clauses, gate, lexicon, normalize, persons, slots
from .ground import ground
from .parse import parse_output
from .prefilter import FIRST_PERSON_WORDS, SECOND_PERSON, prefilter
from .prompt import MAX_ATOMS_PER_TURN, build_messages, max_tokens_for, output_schema
from .records import Candidate, Outcome, Turn

log = logging.getLogger("memdb")

Pronouns_of = Callable[[str], persons.Pronouns]

MAX_FILLED_PER_TURN = 3  # notes taken from the turn's words where the model wrote none
MAX_NOTES_PER_TURN = 5  # the model's and those together


def extract(turns: list[Turn], llm: LLM, *, history: Sequence[Turn] = (), context: int = 0,
            settings: Settings | None = None) -> tuple[list[Candidate], dict[int, Outcome]]:
    """Atoms from consecutive turns of one session, and an Outcome for every turn.

    history: the turns just before (never a source); context: how many preceding turns the
    model sees with each turn. A ModelError (the model cannot load) propagates, so the caller
    can keep the turns pending.
    """
    settings = settings or Settings()
    names = {t.speaker for t in [*history, *turns] if t.speaker}
    pronouns = functools.partial(persons.Pronouns.ask, llm=llm)
    outcomes: dict[int, Outcome] = {}
    sources: list[Turn] = []
    for turn in turns:
        reason = prefilter(turn, names)
        if reason:
            outcomes[turn.id] = Outcome("skipped", reason)
        else:
            sources.append(turn)
    candidates: list[Candidate] = []
    sequence = [*history, *turns]
    for i, turn in enumerate(sources):
        at = sequence.index(turn)
        shown = sequence[max(0, at - context) : at] if context else []
        found, outcome = _extract_turn(turn, shown, llm, names, _listener(sequence, at), settings, pronouns)
        candidates += found
        outcomes[turn.id] = outcome
        if outcome.state == "failed":
            for rest in sources[i + 1 :]:
                outcomes[rest.id] = Outcome("failed", outcome.reason)
            break
    return _merge_duplicates(candidates, outcomes), outcomes


def _listener(sequence: list[Turn], at: int) -> str | None:
    """Who "you" is in sequence[at]: the nearest other speaker before it (else after it),
    gate.ASSISTANT when that is an assistant, None when nobody else speaks."""
    speaker = sequence[at].speaker
    for other in [*reversed(sequence[:at]), *sequence[at + 1 :]]:
        if other.speaker != speaker or other.role != sequence[at].role:
            return gate.ASSISTANT if other.role == "assistant" else other.speaker
    return None


def _extract_turn(turn: Turn, shown: list[Turn], llm: LLM, names: set[str], listener: str | None,
                  settings: Settings, pronouns: Pronouns_of) -> tuple[list[Candidate], Outcome]:
    """The notes the rules take from the turn when they cover enough of what it says (no model
    call); else one model call (plus at most one retry) and the rules' notes for what it left out."""
    if settings.extract_fill and settings.extract_rules_cover < 1:
        outcome = Outcome("done")
        ruled = _fill_gaps(turn, [], names, listener, settings, outcome, pronouns)
        if ruled and _coverage(turn, ruled, names) >= settings.extract_rules_cover:
            return _lend_dates(ruled, outcome), outcome
    messages = build_messages([turn], shown, [turn])
    schema, budget = output_schema(1), max_tokens_for(1)
    atoms, error = _call(llm, messages, schema, budget)
    if error:
        log.info("memdb: extraction output unusable (%s); retrying once", error)
        retry = messages[:-2] + [{"role": "user", "content": messages[-2]["content"] + "\nReply with the JSON only."},
                                 messages[-1]]
        atoms, error2 = _call(llm, retry, schema, budget * 2)
        if error2:
            reason = f"invalid output after retry: {error2}"
            log.warning("memdb: extraction of turn %s failed: %s", turn.id, reason)
            return [], Outcome("failed", reason)
    outcome = Outcome("done")
    candidates = []
    for atom in atoms:
        outcome.proposed += 1
        if "_invalid" in atom:
            _count(outcome, "invalid atom")
            continue
        candidate, why = _candidate(atom, turn, names, listener, settings, pronouns)
        if candidate is None:
            _count(outcome, why or "invalid")
            log.debug("memdb: dropped atom %s from turn %s: %s", atom, turn.id, why)
            continue
        if len(candidates) >= MAX_ATOMS_PER_TURN:
            _count(outcome, "over the per-turn cap")
            continue
        candidates.append(candidate)
    if settings.extract_fill:
        candidates += _fill_gaps(turn, candidates, names, listener, settings, outcome, pronouns)
    return _lend_dates(candidates, outcome), outcome


def _coverage(turn: Turn, notes: list[Candidate], names: set[str]) -> float:
    """The share of the turn's content terms (names aside) that the notes hold."""
    said = set(text.terms(turn.content)) - {w.lower() for n in names for w in text.WORD.findall(n)}
    held = {t for c in notes for t in text.terms(codec.canonical_text(c.record))}
    return len(said & held) / len(said) if said else 1.0


def _fill_gaps(turn: Turn, found: list[Candidate], names: set[str], listener: str | None,
               settings: Settings, outcome: Outcome, pronouns: Pronouns_of) -> list[Candidate]:
    """Notes taken from the turn's own statements that the model's notes do not cover."""
    speaker = turn.speaker or ("用户" if text.has_cjk(turn.content) else "user")
    covered = {t for c in found for t in text.terms(codec.canonical_text(c.record))}
    filled = []
    room = min(MAX_FILLED_PER_TURN, MAX_NOTES_PER_TURN - len(found))
    for record in clauses.notes(turn.content, speaker, names | {speaker}, covered, turn.ts):
        candidate, why = _candidate(record, turn, names, listener, settings, pronouns, extractive=True)
        if candidate is None:
            _count(outcome, f"gap note: {why}")
            continue
        filled.append(candidate)
    # With more statements than room, those that name something (a place, a person, a number, a
    # date) go first: "I've been to Paris yesterday" before "I even found a place with nice light".
    ranked = sorted(range(len(filled)), key=lambda i: (not _names_something(filled[i].record, speaker), i))
    return [filled[i] for i in sorted(ranked[:max(0, room)])]


def _names_something(record: dict, speaker: str) -> bool:
    said = " ".join(record.get(f, "") for f in ("predicate", "object"))
    return bool(record.get("date") or re.search(r"\d", said)
                or any(w != speaker for w in re.findall(r"(?<!^)\b[A-Z][a-z]+", said)))


_POINTS_BACK = re.compile(r"^(?:it|that)(?:'s| is| was|'ll be| will be)\b[\s,]*", re.I)


def _lend_dates(candidates: list[Candidate], outcome: Outcome) -> list[Candidate]:
    """"I signed up for a half marathon. It's on the 21st next month.": the second note only
    dates the first, so the undated event before it takes its date and the second goes."""
    kept: list[Candidate] = []
    for cand in candidates:
        before = kept[-1].record if kept else None
        if (before and before["kind"] == "event" and "date" not in before and cand.record.get("date")
                and _POINTS_BACK.match(cand.record.get("object", ""))):
            before["date"], before["when"] = cand.record["date"], cand.record.get("when", cand.record["date"])
            _count(outcome, "dates the note before")
            continue
        if _POINTS_BACK.match(cand.record.get("object", "")) and not cand.record.get("predicate"):
            _count(outcome, "only a date")  # a date with nothing before it to date
            continue
        kept.append(cand)
    return kept


def _call(llm: LLM, messages: list[dict[str, str]], schema: dict,
          max_tokens: int) -> tuple[list[dict[str, Any]], str | None]:
    try:
        reply = llm.complete(messages, schema=schema, max_tokens=max_tokens)
    except ModelError:
        raise
    except Exception as exc:  # a crash inside the model call fails these turns, not the caller
        return [], f"model error: {type(exc).__name__}: {exc}"[:200]
    return parse_output(reply, 1)


def _count(outcome: Outcome, why: str) -> None:
    key = why.split(":")[0]  # "entity not in source: 'Paris'" counts as "entity not in source"
    outcome.dropped[key] = outcome.dropped.get(key, 0) + 1


# What a reporting verb reports when it is a clause ("says | I sold my car", "说 | 我下周去杭州"), not a
# thing ("added | seasonality features", "wrote | a novel").
_SAID_CLAUSE = re.compile(r"that\b|(?:i|he|she|they|we|it|you|[A-Z][a-z]+)(?:['’]\w+)?\s+(?:[a-z]+ed|is|are|was|were|am|has|have|"
                          r"had|will|would|can|could|should|must|do|does|did|don['’]t|doesn['’]t|didn['’]t|[a-z]+s)\b"
                          r"|[\u4e00-\u9fff]")


def _candidate(atom: dict[str, Any], turn: Turn, names: set[str], listener: str | None,
               settings: Settings, pronouns: Pronouns_of, *,
               extractive: bool = False) -> tuple[Candidate | None, str | None]:
    """Normalise, ground, gate, time-stamp and validate one raw atom from `turn`, written as a
    note (persons.py) with its slots (slots.py)."""
    zh = text.has_cjk(turn.content)
    speaker = turn.speaker or ("用户" if zh else "user")
    record: dict[str, Any] = {}
    for part in ("subject", "predicate", "object", "outcome"):
        if atom.get(part):
            record[part] = atom[part]
    reporting = {*lexicon.words("en", "reporting_verbs"), *lexicon.words("zh", "reporting_verbs")}
    if record.get("predicate", "").strip().lower() in reporting and _SAID_CLAUSE.match(record.get("object", "")):
        # "Ana | says | I sold my car": what was said is the note, not that it was said.
        del record["predicate"]
        said = re.sub(r"^that\s+", "", persons.discourse_free(record["object"]), flags=re.I)
        record["object"] = persons.drop_leading_i(said)
    record["subject"] = normalize.person(record.get("subject", speaker), speaker, zh, names)
    when = atom.get("when")
    if when and not normalize.is_time(when, turn.ts):
        # Not a time: the model split a long object over the last slot ("… with | the kids").
        record["object"] = f"{record.get('object', '')} {when}".strip()
        when = None
    # A note taken from the turn has no predicate of its own: its words say how it is meant.
    stance = record.get("predicate", "")
    if extractive:  # its verb, and the object's first words ("says | I can't stand heavy metal")
        stance = " ".join([stance, *record.get("object", "").split()[:6]]).strip()
    sentiment = normalize.sentiment(atom, stance)
    record["kind"] = normalize.kind(atom.get("kind"), {**record, "when": when}, sentiment)
    if sentiment != "neutral":
        record["sentiment"] = sentiment
        if record["kind"] == "fact":
            record["kind"] = "preference"
    sentence = normalize.best_sentence(record, turn.content)
    if (record["subject"] != speaker and record["subject"] in names and FIRST_PERSON_WORDS.search(sentence)
            and record["subject"].lower() not in sentence.lower()):
        # The model put the other speaker's name on a first-person statement ("I went…" → them).
        record["subject"] = speaker
    if gate.instructs(turn.content):
        return None, "an instruction to the memory"
    if (not extractive and listener and record["subject"] == listener and not SECOND_PERSON.search(turn.content)
            and not re.search(rf"\b{re.escape(listener[:3])}\w*\s+[a-z]", turn.content)):
        # "Ana | has been married | 5 years" from Ben's "5 years already! Thanks, Ana!": a speaker
        # speaks of the listener as "you", or by name in a sentence ("Ana moved to Oslo"), not
        # only when calling them; otherwise the name is a small model's slip.
        return None, "the listener's name on the speaker's words"
    if gate.addressed(record, listener):
        return None, "addressed to the listener"
    if not zh and listener and record["subject"] == listener and lexicon.alternation("en", "encouragements").match(
            " ".join(record.get(f, "") for f in ("predicate", "object")).strip()):
        return None, "advice to the listener"  # "you should plan a dance night": the speaker's view of the listener
    why = ground(record, turn.content, names | {speaker}, extractive=extractive)
    if why:
        return None, why
    if zh and record.get("object"):  # small talk is cut in the speaker's own words, before 我 is rewritten
        trimmed = gate.trim_zh(record["object"], speaker)
        if not trimmed:
            return None, "small talk"
        if extractive and record["subject"] == speaker and trimmed != record["object"] and not clauses.speaker_says_zh(trimmed):
            asked = lexicon.alternation("zh", "remember_requests")
            if not (asked.search(record["object"]) and not asked.search(trimmed)):  # the request is what trim_zh cut
                return None, "not about the speaker"  # "帮我写个查询，数据量几千万行" less its request
            trimmed = f"{speaker}记下：{trimmed}"  # "帮我记一下：周六小满有游泳课": what the speaker asked to keep
        record["object"] = trimmed
    if not zh:  # chat words spelled out before persons are named ("me-time" → "time for myself" → "… herself")
        split = re.match(r"(['’](?:t|s|re|ve|ll|d|m))\s+(.*)", record.get("object", ""))
        if split and record.get("predicate"):  # "won | 't let it go": the contraction split over two slots
            record["predicate"], record["object"] = record["predicate"] + split.group(1), split.group(2)
        for part in ("predicate", "object"):
            if record.get(part):
                record[part] = persons.spelled_out(record[part])
        if record.get("object"):
            record["object"] = persons.without_tail(record["object"])
    record = gate.repair_persons(record, speaker, listener, zh, pronouns)
    if not zh and record.get("object"):
        # "she hopes Bea do too": a name later in the note takes its verb as one person does
        record["object"] = re.sub(
            rf"\b({'|'.join(map(re.escape, sorted(n for n in names | {speaker} if n)))})\s+(do|have|want|need|go|know|like|love)\b(?!['’])",
            lambda m: f"{m.group(1)} {persons.agree(m.group(2))}", record["object"])
        record["object"] = persons.indefinite(record.get("predicate", ""), record["object"])
        record["object"] = persons.with_article(record.get("predicate", ""), record["object"])
    if zh and not extractive and record.get("object") and gate.pieced_together(record, turn.content, speaker, listener, turn.ts):
        return None, "not the turn's words"
    why = gate.judge(record, sentence, names | {speaker}, they=lambda: not zh and pronouns(speaker).plural)
    if why:
        return None, why
    if not extractive and not zh:
        why = gate.model_fragment(record, turn.content)
        if why:
            return None, why
        predicate = record["predicate"].strip()
        if record["subject"] in names | {speaker} and re.fullmatch(
                r"[a-z]+(?:\s+(?:to|a|an|the|his|her|their|in|on|at|for|with|about|up|out|into|that|this|these|those|"
                r"it|them|my|our|every|all|some)\b.*)?", predicate):
            record["predicate"] = persons.agree(predicate)  # "Ana | need to" → "needs to" ("gate code is" stays)
        if re.fullmatch(r"[a-z]+ed by", predicate):
            record["predicate"] = f"is {predicate}"  # "Ana | inspired by | autumn": a passive without its "is"
    if not zh:  # after the gate, which reads "is so proud" as a pep talk
        predicate, obj = persons.plain_parts(record.pop("predicate", ""), record.pop("object", ""))
        record |= {part: words for part, words in (("predicate", predicate), ("object", obj)) if words}
    record = normalize.attach_time(record, when, turn, sentence)
    said = " ".join(record.get(f, "") for f in ("predicate", "object"))
    if not zh and gate.glued(said):
        return None, "two clauses glued"  # the time cut out left two sentences run together
    if not zh and gate.cut_short(said):
        return None, "cut off"  # "the offsite is and he got roped into …": the time was all it said
    record["lang"] = "zh" if zh else "en"
    record |= slots.read(record["subject"], " ".join(record.get(f, "") for f in ("predicate", "object")).strip())
    try:
        clean = codec.validate(record)
    except InvalidInput as exc:
        return None, f"invalid record: {exc}"[:80]
    return Candidate(clean, normalize.confidence(clean, sentence, speaker, settings), [turn.id]), None


def _merge_duplicates(candidates: list[Candidate], outcomes: dict[int, Outcome]) -> list[Candidate]:
    """One candidate per distinct statement in this call: repeats merge their turn ids."""
    kept: dict[str, Candidate] = {}
    for cand in candidates:
        line = codec.canonical_text(cand.record)
        # terms() drops one-digit numbers (noise for search), but "2 kids" and "3 kids" differ.
        key = " ".join(text.terms(line) + re.findall(r"\d+", line)) or line.lower()
        if key in kept:
            first = kept[key]
            first.turn_ids = sorted(set(first.turn_ids) | set(cand.turn_ids))
            first.confidence = max(first.confidence, cand.confidence)
            for field_name in ("date", "when"):
                if field_name in cand.record and field_name not in first.record:
                    first.record[field_name] = cand.record[field_name]
            _count(outcomes[cand.turn_ids[0]], "duplicate")
            continue
        kept[key] = cand
    return list(kept.values())

