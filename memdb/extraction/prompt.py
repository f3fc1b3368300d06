"""The prompt: a fixed prefix (instructions and one example per language, byte-identical so
llama.cpp keeps it in its KV cache), the turn to extract from marked "*", context lines marked
"-", a reply prefill, and the JSON schema that constrains the reply.
"""

from __future__ import annotations

import re

from .. import text
from .records import Turn

SYSTEM_PROMPT = """You write memory notes about people from a chat: facts, preferences, rules and events worth remembering weeks later.
Extract only from the line starting with "*"; lines starting with "-" are earlier lines, there to tell who "you", "she" or "it" is.
Reply with JSON {"a":["subject | predicate | object | when", ...]}, one fact per note:
subject: a name, never I, you, he, she or it (I = the "*" speaker, you = the person they talk to).
predicate and object: the fact in a few words of the line's language, keeping what makes it matter (allergic to, never, wants to, loves).
when: a time the line says (yesterday, next month, 上周三), as said; else leave it out.
Skip greetings, thanks, praise, questions, advice and feelings about the chat: {"a":[]} when the line holds no such fact."""

# Few-shot examples per language, each one call as it really comes (context lines, then the
# "*" line), one that holds facts and one that holds none. About things that never occur in real
# data, so that grounding can recognise an atom copied from them (see FEWSHOT_MARKERS); a Chinese
# example in an English prompt made the model answer in Chinese.
_EXAMPLES = {
    "en": [("- Rowan: Morning Tansy! How was the weekend?\n"
            "* Tansy: Great! I adopted a ferret named Biscuit last Sunday. I'm allergic to cats though, "
            "and my brother Ellis is moving to Oslo next month.",
            '{"a":["Tansy | adopted | a ferret named Biscuit | last Sunday","Tansy | is allergic to | cats",'
            '"Tansy\'s brother Ellis | is moving to | Oslo | next month"]}'),
           ("- Tansy: I finally finished the pottery course.\n"
            "* Rowan: That's amazing, you must be so proud! What will you make next?",
            '{"a":[]}')],
    "zh": [("- 阿青: 早啊小林，周末过得怎么样？\n"
            "* 小林: 挺好！我对花生过敏，周末一般去爬山。前天刚换了新工作，下个月要去厦门出差。",
            '{"a":["小林 | 对花生过敏， | 不能吃花生","小林 | 周末常去 | 爬山","小林 | 换了 | 新工作 | 前天",'
            '"小林 | 要去厦门 | 出差 | 下个月"]}'),
           ("- 小林: 我们组规定不许用 Quokka 框架。\n"
            "* 阿青: 好的，记住了！还有什么需要帮忙的吗？",
            '{"a":[]}')],
}
FEWSHOT_MARKERS = frozenset({
    "rowan", "tansy", "ferret", "biscuit", "ellis", "oslo", "pottery", "quokka",
    "小林", "阿青", "花生", "爬山", "新工", "厦门", "quokka",
})

MAX_ATOMS_PER_TURN = 4
MAX_TURN_CHARS = 700       # a turn longer than this is cut in the prompt (the atom stays grounded)
MAX_CONTEXT_CHARS = 160    # context lines are cut shorter: they are read, not extracted from


def prompt_prefix(lang: str = "en") -> list[dict[str, str]]:
    """The fixed opening of every prompt (system + the language's example), byte-identical
    between calls in one language, so llama.cpp evaluates it once and reuses it."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    for user, assistant in _EXAMPLES["zh" if lang == "zh" else "en"]:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return messages


def output_schema(n_turns: int) -> dict:
    """The JSON schema of one reply for a call with n_turns lines to extract from.

    Terse on purpose: every generated token costs tens of milliseconds, so an atom is one string
    "subject | predicate | object | when" (about half the tokens of an object with keys). The kind
    and sentiment are decided by rules afterwards, and so is provenance: the model does not name
    the source line, the words each atom shares with each line do (a 0.5B model numbers lines
    unreliably; the words do not lie).
    """
    word = r"[^|\"\\\n ]+"  # a word; Chinese runs have no spaces and count as one

    def words(most: int) -> str:  # a bound on words keeps atoms terse; too tight a bound made the
        # model glue words together ("liftothersup") rather than stop
        return f"{word}( {word}){{0,{most - 1}}}"

    atom = {"type": "string",
            "pattern": f"^{words(4)} [|] {words(6)} [|] {words(12)}( [|] {words(6)})?$"}
    return {"type": "object", "properties": {"a": {"type": "array", "items": atom, "maxItems": MAX_ATOMS_PER_TURN * n_turns}},
            "required": ["a"], "additionalProperties": False}


def _label(turn: Turn) -> str:
    return turn.speaker or ("用户" if text.has_cjk(turn.content) else "User")


def _clip(content: str, limit: int) -> str:
    # A bracketed aside ("[shares a photo: a dog on a beach]") is a caption, not the speaker's
    # words: a small model reads its words as said ("Ana was welcome to stage"). The raw turn keeps it.
    content = " ".join(re.sub(r"\[[^\]]*\]", " ", content).split())
    return content if len(content) <= limit else content[:limit].rstrip() + "…"


REPLY_PREFILL = '{"a":['


def build_messages(numbered: list[Turn], context: list[Turn], batch: list[Turn]) -> list[dict[str, str]]:
    """The prompt: the fixed prefix, then this call's lines in order — history and skipped turns
    marked "-" (context only), the turns to extract from marked "*"."""
    sources = {t.id for t in numbered}
    lines = [f"- {_label(t)}: {_clip(t.content, MAX_CONTEXT_CHARS)}" for t in context]
    for t in batch:
        if t.id in sources:
            lines.append(f"* {_label(t)}: {_clip(t.content, MAX_TURN_CHARS)}")
        else:
            lines.append(f"- {_label(t)}: {_clip(t.content, MAX_CONTEXT_CHARS)}")
    lang = "zh" if any(text.has_cjk(t.content) for t in numbered) else "en"
    # The reply always opens with '{"a":[': given as a prefill, those tokens are read, not generated.
    return prompt_prefix(lang) + [{"role": "user", "content": "\n".join(lines)},
                                  {"role": "assistant", "content": REPLY_PREFILL}]


def max_tokens_for(n_turns: int) -> int:
    # About 28 tokens a note; the grammar closes the list sooner when the line holds fewer.
    return 16 + 28 * MAX_ATOMS_PER_TURN * n_turns
