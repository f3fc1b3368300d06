"""What a query asks: a rule-based intent that picks the keyword/vector balance."""

from __future__ import annotations

import re

_TIME = re.compile(
    r"\b(when|what (time|date|day|year|month)|how long (ago|since)|which (day|year|month|week))\b"
    r"|什么时候|哪天|哪一天|几号|哪年|哪一年|多久|何时|几月",
    re.I,
)
_PREFERENCE = re.compile(
    r"\b(like|likes|liked|prefer\w*|favou?rite|enjoy\w*|love\w*|hate\w*|dislike\w*|recommend\w*|"
    r"into|fan of|taste|hobby|hobbies|interested)\b|喜欢|偏好|爱好|讨厌|推荐|口味|兴趣",
    re.I,
)
_LOOKUP = re.compile(
    r"^\s*(what|which|who|whom|where|how (many|much|old))\b|\d|\"|“|谁|哪里|哪个|多少|什么|是否",
    re.I,
)


def intent(query: str) -> str:
    """A rule-based guess at what the query asks: "time", "preference", "lookup" or "open"."""
    if _TIME.search(query):
        return "time"
    if _PREFERENCE.search(query):
        return "preference"
    if _LOOKUP.search(query):
        return "lookup"
    return "open"
