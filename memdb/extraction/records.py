"""What extraction passes along: the turn it reads, the candidate atoms it proposes, and the
outcome of each turn."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Turn:
    """An L0 row handed to extraction."""
    id: int
    user: str
    session: str
    role: str
    speaker: str | None
    content: str
    ts: str  # ISO 'YYYY-MM-DDTHH:MM:SS'


@dataclass
class Candidate:
    """One extracted atom, not yet deduplicated against the store."""
    record: dict          # passes codec.validate; 'date' is an absolute ISO date when resolvable
    confidence: float     # 0..1, how explicit the statement was
    turn_ids: list[int]


@dataclass
class Outcome:
    """What happened to one turn. `proposed`/`dropped` count the model's atoms for the turn and
    why post-processing dropped some (grounding, validation, duplicates), for measurement."""
    state: str            # "done" | "skipped" | "failed"
    reason: str | None = None
    proposed: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
