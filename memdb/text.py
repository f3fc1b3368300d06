"""Language-aware text helpers shared by indexing and querying.

FTS5's unicode61 tokenizer keeps a run of Chinese characters as one token, so "咖啡" inside
"我喜欢喝咖啡" would never match. memdb therefore indexes a *segmented copy* of the text:
every CJK run is rewritten as its single characters plus its overlapping bigrams, separated
by spaces, and the same function segments queries. The copy is plain text in a plain FTS5
column, so a stock sqlite3 shell can search it too (segment the query the same way).
"""

from __future__ import annotations

import re

# memdb's one definition of a Chinese character (CJK unified ideographs, extension A, the
# compatibility block) and of a word: letters and digits, with one inner apostrophe ("don't").
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_TERM = re.compile(f"[{_CJK}]+|{WORD.pattern}")  # a CJK run is one match, cut into bigrams after

# Words that carry no meaning for retrieval. Kept short on purpose: a query word that is
# dropped can never match, so only words that appear in almost every turn belong here.
STOP_WORDS = frozenset(
    """a an the and or but if of to in on at by for with from as is am are was were be been being
    do does did done have has had having i me my mine we us our you your yours he him his she her
    it its they them their this that these those there here what which who whom whose when where
    why how can could would should will shall may might must not no so than then too very just
    about into over after before again also any some all each more most other such only own same
    s t don doesn didn isn aren wasn weren won wouldn ll re ve d m o y up out off down
    yeah yes oh ok okay hey hi hello wow really thanks thank lol""".split()
)
ZH_STOP_CHARS = frozenset("的了是在我你他她它们吗呢吧啊哦嗯和与就都也还这那有个")


def is_cjk(ch: str) -> bool:
    return bool(_CJK_RUN.fullmatch(ch))


def has_cjk(text: str) -> bool:
    return _CJK_RUN.search(text) is not None


def segment(text: str) -> str:
    """The copy of text that goes into an FTS5 column: CJK runs as unigrams plus bigrams."""
    return _CJK_RUN.sub(lambda m: f" {' '.join([*m.group(), *_bigrams(m.group())])} ", text)


def _bigrams(run: str) -> list[str]:
    """The overlapping bigrams of a CJK run, in order ([] for a lone character)."""
    return [run[i : i + 2] for i in range(len(run) - 1)]


def terms(text: str) -> list[str]:
    """Content terms of text in order, deduplicated: lowercased words without stop words,
    and for Chinese the bigrams of each run (a lone character when the run has one)."""
    seen: dict[str, None] = {}
    for match in _TERM.finditer(text):
        word = match.group()
        if _CJK_RUN.fullmatch(word):
            for gram in _bigrams(word) or [word]:
                if not all(ch in ZH_STOP_CHARS for ch in gram):
                    seen.setdefault(gram, None)
            continue
        word = _plain(word)
        if word and word not in STOP_WORDS and not word.isdigit() or (word.isdigit() and len(word) >= 2):
            seen.setdefault(word, None)
    return list(seen)


def _plain(word: str) -> str:
    """word lowercased, with a straight apostrophe and no possessive 's."""
    word = word.lower().replace("’", "'")
    return word[:-2] if word.endswith("'s") else word


def stem(word: str) -> str:
    """A crude stem, enough to make lives/living/lived, likes/liked, kids/kid and Bob's/Bob meet;
    not a real stemmer. memdb's only one: grounding and dedup must agree on what a word is."""
    word = _plain(word)
    if has_cjk(word) or len(word) <= 3:
        return word
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def stems(phrase: str) -> list[str]:
    """The stems of phrase's words, in order."""
    return [stem(w) for w in WORD.findall(phrase)]


def cjk_bigrams(value: str) -> set[str]:
    """The CJK bigrams of value (a lone character where a run has one)."""
    return {gram for run in _CJK_RUN.findall(value) for gram in _bigrams(run) or [run]}


_SENTENCE_END = re.compile(r"(?<=[。！？\n])|(?<=[.!?…])\s+|(?<=[.!?])(?=[^\w\s'\"’)\]])")


def sentences(text: str) -> list[str]:
    """The sentences of text: cut after 。！？ and line breaks, and after . ! ? followed by a
    space, so "0.71 AUC" and ".py scripts" stay whole."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def quote(term: str) -> str:
    """term as one FTS5 phrase: double-quoted, inner quotes doubled, unprintables dropped.

    Quoting makes every operator character (quotes, *, :, NEAR, parentheses) literal, so no
    user text can raise an FTS syntax error. "" when nothing printable is left."""
    term = "".join(ch for ch in term if ch.isprintable())
    return '"' + term.replace('"', '""') + '"' if term else ""


def approx_tokens(text: str) -> int:
    """A tokenizer-free token estimate: one per CJK character, about 4 characters per token
    otherwise. Used only when the extraction model's tokenizer is unavailable."""
    cjk = sum(len(m.group()) for m in _CJK_RUN.finditer(text))
    rest = len(text) - cjk
    return cjk + (rest + 3) // 4
