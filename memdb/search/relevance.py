"""What counts as relevant at all: the vector side's baseline for one query, and the
assistant's pleasantries, which are never a memory.

The baseline. The relevance floor measures a cosine from the cosine of unrelated texts. One
constant per embedder (0.75 for e5) was too low for some queries and too high for others: e5
puts a string of nonsense ("zzzz qqq") at 0.80-0.83 from everything, so every row passed, while
a real but loose match ("what orchestration tool do we use?" and "we are migrating our
pipelines from Airflow to Dagster", 0.78) fell below it. So the baseline is the query's own:
its mean cosine to a fixed set of everyday statements about nothing in particular (GENERIC),
which is the dot product with their mean vector, computed once per embedder and cached; never
below the embedder's constant (embedding.py). What it changes for related, loose and unrelated
questions: bench/context_floor.py and its results/context_floor.json.

The pleasantries. "Nice to meet you!", "Noted! Anything else?", "加油！" sit close to every
query in e5's space and came back as hits for unrelated questions. An assistant turn that holds
fewer than PLEASANTRY_TERMS content terms once the words below are taken out is left out of
search and context; its row stays in the file.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import threading
from typing import Any

import numpy as np

from .. import text
from ..models import assets

log = logging.getLogger("memdb")

# Everyday statements about nothing in particular, English and Chinese, embedded as stored text.
GENERIC = (
    "I went to the store today.", "We had a meeting this morning.", "The weather was nice.",
    "I am reading a book.", "My friend called me.", "It was a long day at work.",
    "I need to finish this by Friday.", "We talked about the plan.", "I like it a lot.",
    "That sounds good to me.", "I will be there soon.", "The project is going well.",
    "I saw a movie last night.", "She sent me a message.", "We are thinking about it.",
    "今天去了一趟超市。", "我们早上开了个会。", "天气还不错。", "我在看一本书。", "周五之前要做完。",
)

# Words an assistant says to be polite, beyond the small talk the extraction pre-filter knows.
PLEASANTRY_WORDS = frozenset("""noted note got it sure anything else let know help helpful happy glad meet nice
    welcome great question understood understand will remember remembered keep mind sounds good
    course problem pleasure here always ask feel free hope day luck enjoy fun wonderful awesome
    cool perfect absolutely certainly okay ok thanks thank you your yours me my i i'll i've i'm
    we we'll that's it's there's what's else more something anytime talk soon later bye""".split())
PLEASANTRY_ZH = ("加油", "好的", "收到", "没问题", "明白", "了解", "不客气", "记住了", "记下了", "还有什么", "需要",
                 "帮忙", "随时", "太棒了", "祝你", "谢谢", "你好", "很高兴", "认识你", "棒", "好")
PLEASANTRY_TERMS = 2

_CENTROIDS: dict[tuple[int, str, int], np.ndarray] = {}
_LOCK = threading.Lock()
_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def baseline(embedder: Any, query_vector: np.ndarray) -> float:
    """The cosine of unrelated texts for this query: its mean cosine to GENERIC."""
    return float(query_vector @ centroid(embedder))


def centroid(embedder: Any) -> np.ndarray:
    """The mean of GENERIC's vectors for this embedder: in the process, and for memdb's own
    embedders (whose name says which weights) in memdb's cache too (embedding them cost a tenth
    of a second of every CLI call). An embedder object of the caller's is never cached on disk:
    its name need not change with its model."""
    own = type(embedder).__module__.startswith("memdb.models.")
    key = (id(embedder), str(getattr(embedder, "name", "")) if own else "", int(embedder.dim))
    with _LOCK:
        if key in _CENTROIDS:
            return _CENTROIDS[key]
    stamp = hashlib.sha256("\n".join(GENERIC).encode()).hexdigest()[:12]
    path = assets.cache_dir() / f"generic-{_NAME.sub('_', key[1])[:80]}-{key[2]}-{stamp}.npy"
    found = _read(path, key[2]) if key[1] else None
    if found is None:
        found = np.asarray(embedder.embed(list(GENERIC)), np.float32).mean(axis=0)
        if key[1]:
            out = io.BytesIO()
            np.save(out, found)
            try:
                assets.write_atomically(path, out.getvalue())
            except OSError as e:  # a read-only cache: embed them again next time
                log.info("memdb: cannot cache %s: %s", path, e)
    with _LOCK:
        _CENTROIDS[key] = found
    return found


def _read(path: Any, dim: int) -> np.ndarray | None:
    try:
        found = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    return found.astype(np.float32) if found.shape == (dim,) and np.isfinite(found).all() else None


def pleasantry(role: str | None, content: str) -> bool:
    """Whether a turn is the assistant being polite ("Noted! Anything else?") rather than saying
    something a later question could need."""
    if role != "assistant":
        return False
    for phrase in PLEASANTRY_ZH:
        content = content.replace(phrase, " ")
    from ..extraction.prefilter import PHATIC_WORDS  # the user's small talk: the assistant's too

    left = [t for t in text.terms(content) if t not in PLEASANTRY_WORDS and t not in PHATIC_WORDS]
    return len(left) < PLEASANTRY_TERMS  # a name or one word left: "Nice to meet you, Ines!"
