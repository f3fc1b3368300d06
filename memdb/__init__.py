"""memdb: an embedded long-term memory for AI agents, in one SQLite file.

    import memdb
    with memdb.open("agent.db") as mem:
        mem.add([{"role": "user", "content": "We use PostgreSQL, no ORM."}], user="alice")
        print(mem.context("what database do we use?", user="alice", budget=400))
"""

from .layers.store import Scenario
from .db.rows import Atom, Hit
from .errors import (
    EmbedderMismatch,
    EmbedderUnavailable,
    InvalidInput,
    MemdbError,
    ModelError,
    NotFound,
    SchemaError,
    SearchError,
)
from .memory import Memory, open
from .pool import Pool
from .settings import Settings

__all__ = [
    "open", "Memory", "Pool", "Hit", "Atom", "Scenario", "Settings", "MemdbError", "InvalidInput", "SchemaError",
    "EmbedderMismatch", "EmbedderUnavailable", "ModelError", "NotFound", "SearchError",
]
__version__ = "0.1.0"
