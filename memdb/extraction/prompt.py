"""The prompt: a fixed prefix (instructions and one example per language, byte-identical so
llama.cpp keeps it in its KV cache), the turn to extract from marked "*", context lines marked
"-", a reply prefill, and the JSON schema that constrains the reply.
"""

from __future__ import annotations

from .. import text
from .records import Turn

SYSTEM_PROMPT = """You turn chat lines into memory atoms: short facts, preferences, constraints and events about people that stay useful after the chat.
Lines starting with "*" are the ones to extract from; lines starting with "-" are context only.
Reply with JSON {"a":["subject | predicate | object | when", ...]}.
subject: who it is about: the speaker's name instead of I or me.
predicate, object: a few words from the line, in the line's language.
when: only if the line says a time (yesterday, 上周三), as said; else leave it out.
Skip greetings, questions, compliments and feelings about the chat. At most 3 atoms per line, usually fewer; {"a":[]} if nothing lasting."""

# Few-shot examples, one per language (a Chinese example in an English prompt made the model
# answer in Chinese). Short, and about things that never occur in real data, so that grounding
# can recognise an atom copied from them (see FEWSHOT_MARKERS).
_EXAMPLES = {
    "en": ("- Rowan: Morning Tansy! How was the weekend?\n"
           "* Tansy: Great! I adopted a ferret named Biscuit last Sunday. I can't stand loud music though.\n"
           "* Rowan: That is so sweet, you will be a great owner.\n"
           "* Tansy: I work night shifts at a bakery, so I'm not allowed to have coffee after noon.",
           '{"a":["Tansy | adopted | a ferret named Biscuit | last Sunday","Tansy | can\'t stand | loud music",'
           '"Tansy | works | night shifts at a bakery","Tansy | not allowed | coffee after noon"]}'),
    "zh": ("- 阿青: 早啊小林，周末过得怎么样？\n"
           "* 小林: 我对花生过敏，周末一般去爬山。前天刚换了新工作。\n"
           "* 阿青: 太棒了，你真厉害！",
           '{"a":["小林 | 过敏 | 花生","小林 | 周末常去 | 爬山","小林 | 换了 | 新工作 | 前天"]}'),
}
FEWSHOT_MARKERS = frozenset({
    "rowan", "tansy", "ferret", "biscuit", "bakery", "shifts", "loud", "noon", "owner",
    "小林", "阿青", "花生", "爬山", "新工",
})

MAX_ATOMS_PER_TURN = 3
MAX_TURN_CHARS = 700       # a turn longer than this is cut in the prompt (the atom stays grounded)
MAX_CONTEXT_CHARS = 160    # context lines are cut shorter: they are read, not extracted from


def prompt_prefix(lang: str = "en") -> list[dict[str, str]]:
    """The fixed opening of every prompt (system + the language's example), byte-identical
    between calls in one language, so llama.cpp evaluates it once and reuses it."""
    user, assistant = _EXAMPLES["zh" if lang == "zh" else "en"]
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user},
            {"role": "assistant", "content": assistant}]


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
    return {"type": "object", "properties": {"a": {"type": "array", "items": atom, "maxItems": n_turns + 1}},
            "required": ["a"], "additionalProperties": False}


def _label(turn: Turn) -> str:
    return turn.speaker or ("用户" if text.has_cjk(turn.content) else "User")


def _clip(content: str, limit: int) -> str:
    content = " ".join(content.split())
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
    return 16 + 40 * n_turns
