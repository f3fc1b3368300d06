"""The MCP server: one open memdb file served to an MCP client (Claude Desktop, Cursor, …) over
stdio, with the official `mcp` SDK (`pip install 'memdb[mcp]'`), imported only here.

Tools only, no resources or prompts: an agent reaches memory by calling it, and every read
(recall, context, profile, persona, events) takes arguments that a fixed resource URI could not carry.
A server started with a user serves that user alone; without one, every call names its user.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from . import __version__, privacy
from .errors import InvalidInput, MemdbError
from .memory import Memory

INSTRUCTIONS = """Long-term memory of the user across conversations.
Call `context` with the user's message before you answer, and `remember` with the user's
message (and your reply) after; `recall` finds specific memories with their ids, `forget`
deletes one on request."""


def build(mem: Memory, *, user: str | None = None) -> Any:
    """The MCP server for mem; user fixes whose memory it serves (None: each call names one)."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError as exc:
        raise MemdbError(f"the MCP server needs the mcp package (2.x): pip install 'memdb[mcp]' ({exc})") from None

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
    def remember(messages: list[dict[str, Any]], session: str = "mcp", user: str | None = None) -> dict[str, Any]:
        """Store messages of the conversation, e.g. [{"role": "user", "content": "I moved to Lisbon"}],
        and extract what is worth remembering from them. Returns the stored turn ids."""
        return {"turn_ids": mem.add(messages, user=whose(user), session=session)}

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


def _hit(hit: Any) -> dict[str, Any]:
    # What recall returns goes into the model's prompt, as context() does: credentials withheld.
    found = {k: v for k, v in dataclasses.asdict(hit).items() if v not in (None, [])}
    found["text"] = privacy.redact(found.get("text", ""))
    return found


def _atom(atom: Any) -> dict[str, Any]:
    return {"id": atom.id, "kind": atom.kind, "text": atom.text, "date": atom.valid_from,
            "status": atom.status, "turn_ids": atom.turn_ids}

