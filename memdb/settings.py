"""Tunable numbers in one place: thresholds, weights and half-lives, with the defaults chosen
on the LoCoMo dev split (see bench/). Pass `memdb.open(..., settings=Settings(...))` to change them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Settings:
    # Extraction: consecutive turns per model call, and earlier turns shown for context only.
    extract_batch: int = 6
    extract_history: int = 3

    # Dedup: an atom merges into an existing one of the same user when their vectors are at
    # least this similar and the fields agree (lifecycle.py); nearest candidates examined.
    merge_similarity: float = 0.86
    merge_similarity_same_key: float = 0.72
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
        default_factory=lambda: {"lookup": 0.6, "time": 0.6, "preference": 0.4, "open": 0.5}
    )
    rrf_k: int = 60
    candidate_pool: int = 60  # candidates per side before fusion
    atom_weight: float = 1.0  # atoms vs raw turns in layer="both"
