"""Texts in groups by their token counts: what one call of an embedding engine is given.

Every embedder runs texts in groups, and a group's cost grows with its tokens. Engines that pad
(onnxruntime, numpy) pay for the count times the longest text, so texts are taken shortest
first and a group closes before its padded size passes the budget; llama.cpp packs the texts of
a group one after another, so there a group pays for the sum of its lengths. A text over the
budget goes alone. The caller puts each group's answers back at the group's indices.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence


def by_tokens(lengths: Sequence[int], budget: int, *, packed: bool = False, most: int = 0,
              slack: tuple[float, int] | None = None) -> Iterator[list[int]]:
    """Indices of lengths, shortest first, in consecutive groups that fit budget tokens: padded
    (count x the longest) or packed (the sum). most > 0 also bounds a group's count; slack
    (ratio, extra) also closes a padded group before it would exceed ratio x its real tokens
    plus extra (mixed lengths: the short texts are not padded to a long one's width)."""
    group: list[int] = []
    real = 0
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        n = lengths[i]
        size = real + n if packed else (len(group) + 1) * n
        if group and (size > budget or 0 < most <= len(group)
                      or slack is not None and size > slack[0] * (real + n) + slack[1]):
            yield group
            group, real = [], 0
        group.append(i)
        real += n
    if group:
        yield group
