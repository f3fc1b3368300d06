"""The MCP server: one open memdb file served to an MCP client (Claude Desktop, Cursor, …) over
stdio, with the official `mcp` SDK (`pip install 'memdb-sqlite[mcp]'`), imported only here.

Tools only, no resources or prompts: an agent reaches memory by calling it, and every read
(recall, context, profile, persona, events, history, show) takes arguments that a fixed
resource URI could not carry.
A server started with a user serves that user alone; without one, every call names its user.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from . import __version__, privacy
from .errors import InvalidInput, MemdbError, NotFound
from .memory import Memory

INSTRUCTIONS = """Long-term memory of the user across conversations.
Call `context` with the user's message before you answer, and `remember` with the user's
message (and your reply) after; `recall` finds specific memories with their ids, `show` and
`history` explain where one came from and how it changed, `forget` deletes one on request."""


def build(mem: Memory, *, user: str | None = None) -> Any:
    """The MCP server for mem; user fixes whose memory it serves (None: each call names one)."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError as exc:
        raise MemdbError(f"the MCP server needs the mcp package (2.x): pip install 'memdb-sqlite[mcp]' ({exc})") from None

    server = MCPServer("memdb", instructions=INSTRUCTIONS, version=__version__)

    def whose(given: str | None) -> str:
        if user is not None and given not in (None, user):
            raise ToolError(f"this server serves user {user!r} only; leave user out")
        if user is None and given is None:
            raise ToolError("name the user: this server was started without --user")
        return user if user is not None else given

    def tool(fn: Any) -> Any:
        """Register fn as a tool; memdb's errors reach the model as readable tool errors."""
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except MemdbError as exc:
                raise ToolError(str(exc)) from exc

        server.add_tool(call)
        return fn

    @tool
    def remember(messages: list[dict[str, Any]], name: str | None = None, ts: str | None = None,
                 session: str = "mcp", user: str | None = None) -> dict[str, Any]:
        """Store messages of the conversation, e.g. [{"role": "user", "content": "I moved to Lisbon"}],
        and extract what is worth remembering from them. name: the user's name as they call
        themselves (default: the user this memory is for), so memories read "Ines moved to
        Lisbon" rather than "user moved"; ts: when it was said (ISO 8601, default now).
        Returns the stored turn ids."""
        who = whose(user)
        return {"turn_ids": mem.add(_named(messages, name or who), user=who, session=session, ts=ts)}

    @tool
    def recall(query: str, k: int = 5, user: str | None = None) -> list[dict[str, Any]]:
        """Search memory: the k memories that best match query, each with its id, text, date and
        the ids of the turns it came from."""
        return [_hit(h) for h in mem.search(query, user=whose(user), k=k)]

    @tool
    def context(query: str, budget: int = 400, user: str | None = None) -> str:
        """A prompt-ready block of what memory holds about query, under budget tokens."""
        return mem.context(query, user=whose(user), budget=budget) or "(nothing remembered about this)"

    @tool
    def profile(user: str | None = None) -> list[dict[str, Any]]:
        """The user's card: the facts, preferences and constraints memory holds."""
        return [_atom(a) for a in mem.profile(whose(user))]

    @tool
    def persona(budget: int = 200, user: str | None = None) -> str:
        """Who the user is, in about budget tokens: the facts, preferences and constraints most
        often and most recently confirmed, each line citing its memory id. For greetings and open questions."""
        return mem.persona(whose(user), budget=budget) or "(nothing remembered about this user yet)"

    @tool
    def events(since: str | None = None, until: str | None = None, user: str | None = None) -> list[dict[str, Any]]:
        """The user's events in time order; since and until are ISO dates (e.g. 2026-01-01)."""
        return [_atom(a) for a in mem.events(whose(user), since=since, until=until)]

    @tool
    def history(atom_id: int, user: str | None = None) -> list[dict[str, Any]]:
        """Every version of the memory atom_id belongs to, oldest first: what it was, what replaced
        it (superseded_by) and when (valid_to), each with the turns it came from. Explains why a
        memory changed."""
        return [_version(a) for a in mem.history(atom_id, user=whose(user))]

    @tool
    def show(atom_id: int | None = None, turn_id: int | None = None, user: str | None = None) -> dict[str, Any]:
        """One memory (atom_id, from recall) with its record and the turns it came from, or one
        stored turn (turn_id) as it was said. Explains where a memory came from."""
        return _show(mem, whose(user), atom_id=atom_id, turn_id=turn_id)

    @tool
    def forget(atom_id: int | None = None, turn_id: int | None = None, everything: bool = False,
               user: str | None = None) -> dict[str, int]:
        """Delete one memory (atom_id, from recall), one stored turn (turn_id) with what came only
        from it, or, with everything=true, all the user's memory. Cannot be undone."""
        return _forget(mem, whose(user), atom_id=atom_id, turn_id=turn_id, everything=everything)

    return server


def serve(mem: Memory, *, user: str | None = None) -> None:
    """Serve mem over stdio until the client closes the pipe."""
    build(mem, user=user).run("stdio")


def _forget(mem: Memory, user: str, *, atom_id: int | None, turn_id: int | None, everything: bool) -> dict[str, int]:
    if sum([atom_id is not None, turn_id is not None, everything]) != 1:
        raise InvalidInput("forget takes exactly one of atom_id, turn_id, everything=true")
    if everything:
        return mem.forget(user=user)
    # Scoped to the user: another user's id is NotFound, never deleted.
    return mem.forget(user=user, atom_id=atom_id, turn_id=turn_id)


def _named(messages: Any, name: str) -> Any:
    """The user's messages with the speaker's name where the agent sent none: an agent seldom
    sends one, and atoms then said "user ..." beside "Ines ..." for the same person."""
    if not isinstance(messages, list):
        return messages  # add() says what is wrong with it
    return [{**m, "name": name} if isinstance(m, dict) and m.get("role", "user") == "user" and not m.get("name")
            else m for m in messages]


def _show(mem: Memory, user: str, *, atom_id: int | None, turn_id: int | None) -> dict[str, Any]:
    if (atom_id is None) == (turn_id is None):
        raise InvalidInput("show takes exactly one of atom_id, turn_id")
    if atom_id is not None:  # scoped to the user: another user's id is NotFound
        atom = mem.get(atom_id, user=user)
        return {**_version(atom), "record": atom.record, "sources": mem.turns(atom.turn_ids, user=user)}
    turns = mem.turns([turn_id], user=user)
    if not turns:
        raise NotFound(f"no turn with id {turn_id} for user {user!r}")
    return turns[0]


def _version(atom: Any) -> dict[str, Any]:
    return {**_atom(atom), "confidence": atom.confidence, "seen": atom.seen, "first_seen": atom.first_seen,
            "last_seen": atom.last_seen, "valid_to": atom.valid_to, "superseded_by": atom.superseded_by}


def _hit(hit: Any) -> dict[str, Any]:
    # What recall returns goes into the model's prompt, as context() does: credentials withheld.
    found = {k: v for k, v in dataclasses.asdict(hit).items() if v not in (None, [])}
    found["text"] = privacy.redact(found.get("text", ""))
    return found


def _atom(atom: Any) -> dict[str, Any]:
    return {"id": atom.id, "kind": atom.kind, "text": atom.text, "date": atom.valid_from,
            "status": atom.status, "turn_ids": atom.turn_ids}

