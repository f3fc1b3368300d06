"""Rule-based resolution of time expressions ("yesterday", "last Wednesday", "上周三") to ISO dates.

Extraction keeps an event's time twice: the expression as said (`when`) and an absolute date
(`date`) resolved against the timestamp of the turn that said it, so "yesterday" in a turn of
2023-05-08 becomes "2023-05-07" and stays right when it is read a year later.

The result is ISO 8601 at the precision the expression has: a day ("2023-05-07"), a month
("2023-04" for "last month") or a year ("2022" for "last year"). Such strings sort and compare
correctly against full dates. Expressions too vague to pin down ("recently", "the other day")
resolve to None and the caller keeps only the words.

No dependency: a table of regular expressions, each with a small handler.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from datetime import date, datetime, timedelta

__all__ = ["find", "resolve", "to_date", "zh_words", "en_words", "without_zh_dates"]

_WEEKDAYS = {
    "monday": 0, "mon": 0, "tuesday": 1, "tue": 1, "tues": 1, "wednesday": 2, "wed": 2,
    "thursday": 3, "thu": 3, "thur": 3, "thurs": 3, "friday": 4, "fri": 4,
    "saturday": 5, "sat": 5, "sunday": 6, "sun": 6,
}
_ZH_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6, "末": 5}
_MONTHS = {
    "january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "mar": 3, "april": 4, "apr": 4,
    "may": 5, "june": 6, "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8,
    "september": 9, "sep": 9, "sept": 9, "october": 10, "oct": 10, "november": 11, "nov": 11,
    "december": 12, "dec": 12,
}
_NUMBER_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "couple": 2, "a couple": 2,
    "a couple of": 2, "couple of": 2, "a few": 3, "few": 3, "several": 3,
}
_ZH_DIGITS = {"零": 0, "一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}

_WD = "|".join(sorted(_WEEKDAYS, key=len, reverse=True))
_MON = "|".join(sorted(_MONTHS, key=len, reverse=True))
_NUM = r"\d{1,3}|a couple of|a couple|couple of|a few|few|several|an|a|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
_ZH_NUM = r"[0-9]{1,3}|[零一两二三四五六七八九十几]{1,3}"
_UNIT = r"days?|weeks?|months?|years?"


class Ref(date):
    """The day a phrase is resolved from, and whether its sentence speaks of the future (True),
    the past (False) or does not say (None): "in August" said in June is this August in
    "we move in August" and last August in "we moved in August"."""

    future: bool | None = None


def _ref(ts: str | date | datetime, future: bool | None) -> Ref:
    day = to_date(ts)
    ref = Ref(day.year, day.month, day.day)
    ref.future = future
    return ref


def to_date(ts: str | date | datetime) -> date:
    """The calendar date of a turn timestamp ('YYYY-MM-DDTHH:MM:SS', a date or a datetime)."""
    if isinstance(ts, datetime):
        return ts.date()
    if isinstance(ts, date):
        return ts
    return date.fromisoformat(str(ts)[:10])


# --- helpers ---------------------------------------------------------------------------------

def _day(d: date) -> str:
    return d.isoformat()


def _month(year: int, month: int) -> str:
    if not 1 <= year <= 9999:  # "next month" seen from December 9999
        raise ValueError(f"year {year} is out of range")
    return f"{year:04d}-{month:02d}"


def _add_months(ref: date, months: int) -> tuple[int, int]:
    index = ref.year * 12 + (ref.month - 1) + months
    return index // 12, index % 12 + 1


def _valid_day(year: int, month: int, day: int) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]):
        return None
    return _day(date(year, month, day))


def _number(word: str) -> int | None:
    word = word.lower().strip()
    if word.isdigit():
        return int(word)
    return _NUMBER_WORDS.get(word)


def _zh_number(text: str) -> int | None:
    if text.isdigit():
        return int(text)
    if text == "几":
        return 3
    if "十" in text:  # 十 = 10, 十二 = 12, 二十 = 20, 二十三 = 23
        tens, _, ones = text.partition("十")
        t = _ZH_DIGITS.get(tens, 1) if tens else 1
        o = _ZH_DIGITS.get(ones, 0) if ones else 0
        return t * 10 + o
    if len(text) == 1 and text in _ZH_DIGITS:
        return _ZH_DIGITS[text]
    return None


def _shift(ref: date, n: int, unit: str) -> str | None:
    """ref moved by n units (negative: into the past), at the unit's precision."""
    unit = unit.rstrip("s")
    if unit == "day":
        return _day(ref + timedelta(days=n))
    if unit == "week":
        return _day(ref + timedelta(weeks=n))
    if unit == "month":
        return _month(*_add_months(ref, n))
    return f"{ref.year + n:04d}" if 1 <= ref.year + n <= 9999 else None


def _past_weekday(ref: date, weekday: int) -> date:
    """The most recent given weekday strictly before ref ("last Friday", "on Friday")."""
    back = (ref.weekday() - weekday) % 7 or 7
    return ref - timedelta(days=back)


def _next_weekday(ref: date, weekday: int) -> date:
    """The first given weekday strictly after ref ("next Friday")."""
    ahead = (weekday - ref.weekday()) % 7 or 7
    return ref + timedelta(days=ahead)


def _week_weekday(ref: date, weekday: int, weeks: int) -> date:
    """Weekday of the calendar week (Monday first) `weeks` away from ref's (上周三 = weeks -1)."""
    monday = ref - timedelta(days=ref.weekday())
    return monday + timedelta(weeks=weeks, days=weekday)


def _month_day_year(month: int, day: int, year: int | None, ref: date) -> str | None:
    if year is None:
        # A month and day without a year: the coming one when the sentence speaks of the future,
        # the last one when of the past; when it does not say, this year's unless that is more
        # than a month ahead (more often a memory than a plan).
        year = ref.year
        guess = _valid_day(year, month, day)
        if guess:
            ahead = date.fromisoformat(guess) > ref
            future = getattr(ref, "future", None)
            if future and not ahead and date.fromisoformat(guess) < ref:
                year += 1
            elif (future is False and ahead) or (future is None and date.fromisoformat(guess) > ref + timedelta(days=31)):
                year -= 1
    return _valid_day(year, month, day)


def _month_only(month: int, year: int | None, ref: date) -> str:
    if year is None:
        future = getattr(ref, "future", None)
        if future:
            year = ref.year if month >= ref.month else ref.year + 1
        elif future is False:
            year = ref.year if month <= ref.month else ref.year - 1
        else:  # a season ahead is a plan talked of in the present ("we get the keys mid-August")
            year = ref.year if month <= ref.month + 3 else ref.year - 1
    return _month(year, month)


# --- the rule table ----------------------------------------------------------------------------
# Each rule: a pattern (matched case-insensitively) and a handler (match, ref) -> ISO string|None.
# Longer, more specific patterns come first; find() keeps the earliest, longest non-overlapping hits.

Handler = Callable[[re.Match, date], "str | None"]
_RULES: list[tuple[re.Pattern, Handler]] = []


def _rule(pattern: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        _RULES.append((re.compile(pattern, re.IGNORECASE), handler))
        return handler
    return register


@_rule(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b|\b(\d{4})/(\d{1,2})/(\d{1,2})\b")
def _iso(m: re.Match, ref: date) -> str | None:
    y, mo, d = (m.group(1), m.group(2), m.group(3)) if m.group(1) else (m.group(4), m.group(5), m.group(6))
    return _valid_day(int(y), int(mo), int(d))


@_rule(r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]")
def _zh_full(m: re.Match, ref: date) -> str | None:
    return _valid_day(int(m.group(1)), int(m.group(2)), int(m.group(3)))


@_rule(r"(\d{4})\s*年\s*(\d{1,2})\s*月")
def _zh_year_month(m: re.Match, ref: date) -> str | None:
    month = int(m.group(2))
    return _month(int(m.group(1)), month) if 1 <= month <= 12 else None


@_rule(r"(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]")
def _zh_month_day(m: re.Match, ref: date) -> str | None:
    return _month_day_year(int(m.group(1)), int(m.group(2)), None, ref)


@_rule(rf"\b({_MON})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?(?:\s*,\s*|\s+)(\d{{4}})\b")
def _mdy(m: re.Match, ref: date) -> str | None:
    return _valid_day(int(m.group(3)), _MONTHS[m.group(1).lower()], int(m.group(2)))


@_rule(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MON})\.?,?\s+(\d{{4}})\b")
def _dmy(m: re.Match, ref: date) -> str | None:
    return _valid_day(int(m.group(3)), _MONTHS[m.group(2).lower()], int(m.group(1)))


@_rule(rf"\b({_MON})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?!\s*(?:,\s*)?\d)")
def _md(m: re.Match, ref: date) -> str | None:
    if m.group(1) == "may":  # lowercase "may 5" is the verb far more often than the month
        return None
    return _month_day_year(_MONTHS[m.group(1).lower()], int(m.group(2)), None, ref)


@_rule(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MON})\b(?!\.?,?\s+\d)")
def _dm(m: re.Match, ref: date) -> str | None:
    return _month_day_year(_MONTHS[m.group(2).lower()], int(m.group(1)), None, ref)


@_rule(rf"\b({_MON})\.?,?\s+(\d{{4}})\b")
def _month_year(m: re.Match, ref: date) -> str | None:
    return _month(int(m.group(2)), _MONTHS[m.group(1).lower()])


@_rule(r"前天|day before yesterday")
def _two_days_ago(m: re.Match, ref: date) -> str | None:
    return _day(ref - timedelta(days=2))


@_rule(r"后天|day after tomorrow")
def _in_two_days(m: re.Match, ref: date) -> str | None:
    return _day(ref + timedelta(days=2))


@_rule(r"\byesterday\b|\blast night\b|昨天|昨晚|昨日")
def _yesterday(m: re.Match, ref: date) -> str | None:
    return _day(ref - timedelta(days=1))


@_rule(r"\btoday\b|\btonight\b|\bthis (?:morning|afternoon|evening)\b|今天|今晚|今早|今日")
def _today(m: re.Match, ref: date) -> str | None:
    return _day(ref)


@_rule(r"\btomorrow\b|明天|明晚|明日")
def _tomorrow(m: re.Match, ref: date) -> str | None:
    return _day(ref + timedelta(days=1))


@_rule(rf"\b({_NUM})\s+({_UNIT})\s+(ago|back|before)\b")
def _units_ago(m: re.Match, ref: date) -> str | None:
    n = _number(m.group(1))
    return _shift(ref, -n, m.group(2).lower()) if n is not None else None


@_rule(rf"\bin\s+({_NUM})\s+({_UNIT})\b|\b({_NUM})\s+({_UNIT})\s+(?:from now|later)\b")
def _units_ahead(m: re.Match, ref: date) -> str | None:
    word, unit = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    n = _number(word)
    return _shift(ref, n, unit.lower()) if n is not None else None


@_rule(rf"({_ZH_NUM})\s*(?:个)?\s*(天|日|周|星期|礼拜|月|年)(?:以)?([前后])")
def _zh_units(m: re.Match, ref: date) -> str | None:
    n = _zh_number(m.group(1))
    if n is None:
        return None
    unit = {"天": "day", "日": "day", "周": "week", "星期": "week", "礼拜": "week", "月": "month", "年": "year"}[m.group(2)]
    return _shift(ref, -n if m.group(3) == "前" else n, unit)


@_rule(rf"\b(last|next|this|coming|past|on)\s+({_WD})\b\.?")
def _rel_weekday(m: re.Match, ref: date) -> str | None:
    which, weekday = m.group(1).lower(), _WEEKDAYS[m.group(2).lower()]
    if which == "on" and getattr(ref, "future", None):
        return _day(_next_weekday(ref, weekday))  # "the party is on Friday, can't wait"
    if which in ("last", "past", "on"):
        return _day(_past_weekday(ref, weekday))
    if which in ("next", "coming"):
        return _day(_next_weekday(ref, weekday))
    return _day(_week_weekday(ref, weekday, 0))  # "this Friday": in the current week


@_rule(rf"\b({_WD})\s+(next|this|last)\s+week\b")
def _weekday_of_week(m: re.Match, ref: date) -> str | None:
    # "Thursday next week": the Thursday of the next calendar week, not a week from today.
    weeks = {"last": -1, "this": 0, "next": 1}[m.group(2).lower()]
    return _day(_week_weekday(ref, _WEEKDAYS[m.group(1).lower()], weeks))


@_rule(r"\b(monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b(?!s)")  # not "sat", "sun", "wed"
def _bare_weekday(m: re.Match, ref: date) -> str | None:
    # "a long run Sunday": the last one in a sentence about the past, the next one in a plan;
    # a sentence that does not say gives no date.
    future = getattr(ref, "future", None)
    if future is None:
        return None
    weekday = _WEEKDAYS[m.group(1).lower()]
    return _day(_next_weekday(ref, weekday) if future else _past_weekday(ref, weekday))


@_rule(r"(上上|上|下下|下|这|本|这个|上个|下个)\s*(?:周|星期|礼拜)([一二三四五六日天末])")
def _zh_weekday(m: re.Match, ref: date) -> str | None:
    weeks = {"上上": -2, "上": -1, "上个": -1, "下下": 2, "下": 1, "下个": 1, "这": 0, "本": 0, "这个": 0}[m.group(1)]
    return _day(_week_weekday(ref, _ZH_WEEKDAYS[m.group(2)], weeks))


@_rule(r"\b(last|this|next|past|coming)\s+weekend\b")
def _weekend(m: re.Match, ref: date) -> str | None:
    which = m.group(1).lower()
    if which in ("last", "past"):
        return _day(_past_weekday(ref, 5) if ref.weekday() != 6 else ref - timedelta(days=8))
    if which == "next":
        return _day(_week_weekday(ref, 5, 1))
    return _day(_week_weekday(ref, 5, 0))


@_rule(r"\b(last|this|next|past|coming)\s+(week|month|year)\b")
def _rel_period(m: re.Match, ref: date) -> str | None:
    step = {"last": -1, "past": -1, "this": 0, "next": 1, "coming": 1}[m.group(1).lower()]
    return _shift(ref, step, m.group(2).lower())


@_rule(r"上上(?:个)?(?:周|星期|礼拜)|上(?:个)?(?:周|星期|礼拜)|这(?:个)?(?:周|星期|礼拜)|本周|下(?:个)?(?:周|星期|礼拜)|下下(?:个)?(?:周|星期|礼拜)")
def _zh_week(m: re.Match, ref: date) -> str | None:
    text = m.group()
    weeks = -2 if text.startswith("上上") else -1 if text.startswith("上") else 2 if text.startswith("下下") else 1 if text.startswith("下") else 0
    return _shift(ref, weeks, "week")


@_rule(r"上上个月|上个月|上月|这个月|本月|下个月|下月")
def _zh_month(m: re.Match, ref: date) -> str | None:
    text = m.group()
    months = -2 if text.startswith("上上") else -1 if text.startswith("上") else 1 if text.startswith("下") else 0
    return _shift(ref, months, "month")


@_rule(r"大前年|前年|去年|今年|明年|后年")
def _zh_year(m: re.Match, ref: date) -> str | None:
    years = {"大前年": -3, "前年": -2, "去年": -1, "今年": 0, "明年": 1, "后年": 2}[m.group()]
    return f"{ref.year + years:04d}"


@_rule(r"(?<![\d年])(\d{1,2})\s*月份?(?![\d日号])")
def _zh_month_only(m: re.Match, ref: date) -> str | None:
    month = int(m.group(1))
    return _month_only(month, None, ref) if 1 <= month <= 12 else None


@_rule(r"(?<!\d)((?:19|20)\d{2})\s*年(?!\s*\d)")
def _zh_year_only(m: re.Match, ref: date) -> str | None:
    return m.group(1)


@_rule(rf"\b(?:in|since|during|back in|early|late|mid)\s+((?:19|20)\d{{2}})\b")
def _year(m: re.Match, ref: date) -> str | None:
    return m.group(1)


@_rule(rf"\b(?:in|during|since|early|late|mid|(?:by )?(?:the )?(?:end|start|beginning|middle) of)[\s-]+(january|february|march|april|june|july|august|september|october|november|december|may)\b")
def _in_month(m: re.Match, ref: date) -> str | None:
    return _month_only(_MONTHS[m.group(1).lower()], None, ref)


_DAY_OF_MONTH = re.compile(r"(?:on )?the (\d{1,2})(?:st|nd|rd|th)", re.I)


@_rule(_DAY_OF_MONTH.pattern.join((r"\b", r"\b")))
def _day_of_month(m: re.Match, ref: date) -> str | None:
    # "the 14th": this month's, or next month's when the sentence speaks of the future and
    # the day has passed.
    day, year, month = int(m.group(1)), ref.year, ref.month
    if getattr(ref, "future", None) and day < ref.day:
        year, month = _add_months(ref, 1)
    return _valid_day(year, month, day)


@_rule(r"国庆|十一长假|(?:this |next |last )?(?:christmas|xmas)|圣诞")
def _holiday(m: re.Match, ref: date) -> str | None:
    # Fixed-date holidays: National Day (October) and Christmas, the coming one when the
    # sentence speaks of the future, else this year's.
    word = m.group().lower()
    if "国庆" in word or "十一" in word:
        return _month_only(10, None, ref)
    return _month_day_year(12, 25, None, ref)


def _scan(text: str, ref: date) -> list[tuple[int, int, str]]:
    """(start, end, resolved value) of every time phrase in text: earliest first, at one start
    the longest, never overlapping."""
    hits: list[tuple[int, int, str]] = []
    for pattern, handler in _RULES:
        for m in pattern.finditer(text):
            try:
                value = handler(m, ref)
            except (OverflowError, ValueError):  # "tomorrow" seen from 9999-12-31: no such day
                value = None
            if value is not None:
                hits.append((m.start(), m.end(), value))
    hits.sort(key=lambda hit: (hit[0], -(hit[1] - hit[0])))
    kept: list[tuple[int, int, str]] = []
    for hit in hits:
        if not kept or hit[0] >= kept[-1][1]:
            kept.append(hit)
    for i in range(1, len(kept)):
        start, end, value = kept[i]
        day = _DAY_OF_MONTH.fullmatch(text[start:end].strip())
        if day and len(kept[i - 1][2]) == 7:  # "mid-August, … on the 14th": the month just named
            kept[i] = (start, end, _valid_day(*map(int, kept[i - 1][2].split("-")), int(day.group(1))) or value)
    return kept


def find(text: str, ref: str | date | datetime, future: bool | None = None) -> list[tuple[str, str]]:
    """Time phrases in text with what they resolve to from ref, as (phrase, iso), in order.

    Only phrases that resolve are returned, so each one is usable as an event's `when`.
    future: whether the sentence speaks of the future (None: it does not say; see Ref).
    """
    return [(text[s:e].strip(" ."), value) for s, e, value in _scan(text, _ref(ref, future))]


def resolve(expression: str, ref: str | date | datetime, future: bool | None = None) -> str | None:
    """The ISO date (or month, or year) an expression names, seen from ref; None if it names none.

    When expression holds several time phrases the first (longest) one wins.
    """
    hits = _scan(expression or "", _ref(ref, future))
    return hits[0][2] if hits else None


# Chinese phrases whose meaning moves with the day they are said (上周三, 明年, 今晚): a note
# keeps them as the date they named. Phrases that name their date already (8月, 国庆) stay.
_ZH_RELATIVE = re.compile(r"^(?:上|下|这|本|今|明|昨|前|后|去|来|大前|大后)")
_ZH_PART_OF_DAY = {"晚": "晚上", "早": "早上"}


def zh_words(phrase: str, iso: str) -> str:
    """A relative Chinese time phrase written as the date it named ("上周三" said on 2026-09-30 →
    "2026年9月23日"); any other phrase as it is."""
    if not _ZH_RELATIVE.match(phrase) or not re.fullmatch(r"\d{4}(?:-\d{2}(?:-\d{2})?)?", iso):
        return phrase
    parts = [int(x) for x in iso.split("-")]
    written = "".join(f"{n}{unit}" for n, unit in zip(parts, "年月日"))
    return written + _ZH_PART_OF_DAY.get(phrase[-1], "")


_EN_RELATIVE = re.compile(r"(?:today|tonight|tomorrow|yesterday|(?:the )?day (?:before|after) \w+|(?:next|last|this|"
                          r"coming|past)\b.*|.*\b(?:ago|from now|later)|in (?:a|an|one|two|three|a few|a couple of) \w+)",
                          re.I)


def en_words(phrase: str, iso: str) -> str:
    """A relative English time phrase as the date it named, as a note says it to someone reading
    it later ("tomorrow" said on 2026-03-09 → "on 10 March 2026", "next month" → "in April
    2026"); any other phrase as it is."""
    if not _EN_RELATIVE.fullmatch(phrase.strip()) or not re.fullmatch(r"\d{4}(?:-\d{2}(?:-\d{2})?)?", iso):
        return phrase
    parts = [int(x) for x in iso.split("-")]
    if len(parts) == 3:
        return f"on {parts[2]} {calendar.month_name[parts[1]]} {parts[0]}"
    return f"in {calendar.month_name[parts[1]]} {parts[0]}" if len(parts) == 2 else f"in {parts[0]}"


_ZH_WRITTEN = re.compile(r"\d{4}年(?:\d{1,2}月(?:\d{1,2}日)?)?(?:晚上|早上)?")


def without_zh_dates(line: str) -> str:
    """line less the dates zh_words() wrote into it: what a note says, apart from when."""
    return _ZH_WRITTEN.sub("", line)

