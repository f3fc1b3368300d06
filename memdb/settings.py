"""Tunable numbers in one place: thresholds, weights and half-lives, with the defaults chosen
on the LoCoMo dev split (see bench/). Pass `memdb.open(..., settings=Settings(...))` to change them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Settings:
    # Extraction: consecutive turns per model call, and earlier turns shown for context only.
    extract_batch: int = 6
    extract_history: int = 3

    # Dedup (lifecycle.py; tuned with bench/dedup.py on bench/dedup_pairs.json, favouring
    # precision: a wrong merge loses a fact, a missed one only spends budget). A new atom
    # merges into one of the same user, subject, kind and polarity when either
    # - they fill the same slot (attribute key, preference target, or predicate + object, the
    #   values sharing at least merge_value_overlap of their terms) and the lines are at least
    #   merge_similarity_same_key similar (cosine or keyword overlap, the larger; without
    #   vectors merge_min_overlap of keyword overlap is enough), or
    # - the lines are at least merge_similarity similar by vector and share merge_min_overlap
    #   of their terms; without vectors, or for Chinese lines (MiniLM reads them as [UNK]),
    #   merge_keyword_overlap of their terms instead.
    # dedup_candidates nearest atoms are examined, by vector and by keywords each.
    merge_similarity: float = 0.9
    merge_similarity_same_key: float = 0.66
    merge_value_overlap: float = 0.75
    merge_keyword_overlap: float = 0.8
    merge_min_overlap: float = 0.3
    dedup_candidates: int = 8

    # Conflicts: statements on the same subject and key count as comparable evidence (both
    # kept active, marked conflicting) when made this close in time with this close confidence.
    comparable_hours: float = 1.0
    comparable_confidence: float = 0.2

    # Freshness: half-life in days per kind (None: does not fade) and the floor it fades to.
    half_life_days: dict[str, float | None] = field(
        default_factory=lambda: {"fact": None, "constraint": None, "preference": 365.0, "event": 180.0}
    )
    freshness_floor: float = 0.6

    # Search: "weighted" (alpha * keyword + (1 - alpha) * vector, each normalised) or "rrf".
    fusion: str = "weighted"
    alpha: dict[str, float] = field(
        # From the per-intent alpha sweep on the LoCoMo dev split (bench/results/locomo_retrieval.png):
        # lookups, open and time questions peak at 0.5-0.8 (names and dates are exact words),
        # preference questions at 0.2-0.4 ("space opera" must find "sci-fi").
        default_factory=lambda: {"lookup": 0.7, "time": 0.6, "preference": 0.3, "open": 0.7}
    )
    rrf_k: int = 60
    candidate_pool: int = 60  # candidates per side before fusion
    # Atoms vs raw turns in layer="both": atoms say the same in fewer tokens, so at equal
    # relevance they win the slot (LoCoMo dev: same MRR with ~40% fewer tokens at 1.5).
    atom_weight: float = 1.5
    skipped_turn_weight: float = 0.5  # turns the extraction pre-filter found nothing durable in
    # Large users (cache.py): in a file with one user, bm25 scores at most this many postings
    # of the rarest query terms (0: all terms; bench/results/scale_postings.json has the cost
    # and recall of each budget at 100k atoms); users with at least vector_copy_min vectors
    # in a layer have them ranked in memory, loaded on their first search (~14 us per
    # vector), up to vector_copy_mb in all (0 disables it).
    keyword_postings: int = 20_000
    vector_copy_min: int = 500
    vector_copy_mb: float = 1024.0
