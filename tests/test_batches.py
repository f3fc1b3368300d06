"""Texts in groups by their token counts (memdb.models.batches), as every embedder runs them."""

from __future__ import annotations

from memdb.models import batches


def test_padded_groups_take_the_shortest_first_and_fit_the_budget_padded():
    # Padded, a group costs its count times its longest: 3 x 4 = 12 fits, 4 x 4 = 16 does not.
    assert [[1, 3, 0], [2, 4]] == list(batches.by_tokens([4, 2, 5, 3, 6], 12))


def test_a_text_over_the_budget_goes_alone():
    assert [[0, 2], [1]] == list(batches.by_tokens([2, 50, 3], 10))


def test_packed_groups_fit_the_budget_by_their_sum():
    # Packed (llama.cpp), a group costs the sum of its lengths: 2 + 3 + 4 = 9 fits 11, 5 more
    # does not; then 5 + 6 = 11.
    assert [[1, 3, 0], [2, 4]] == list(batches.by_tokens([4, 2, 5, 3, 6], 11, packed=True))


def test_most_bounds_the_count_and_slack_keeps_short_texts_off_a_long_ones_width():
    lengths = [3, 256, 5, 12, 10, 8] + [30] * 100
    groups = list(batches.by_tokens(lengths, 4096, most=64, slack=(1.25, 64)))
    assert sorted(range(len(lengths))) == sorted(i for g in groups for i in g)
    assert [0, 2, 5, 4, 3] == groups[0]  # the short ones together, sorted by length
    assert [[1]] == [g for g in groups if 1 in g]  # the long one is not padding the others
    assert [5, 64, 36, 1] == [len(g) for g in groups]


def test_no_texts_no_groups():
    assert [] == list(batches.by_tokens([], 512))
