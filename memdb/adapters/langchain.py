"""LangChain (and LangGraph, which shares its messages): memdb as a chat message history and a
retriever, the two interfaces long-term memories plug into there. `pip install 'memdb-sqlite[langchain]'`.

    from memdb.adapters.langchain import MemdbChatMessageHistory, MemdbRetriever
    history = MemdbChatMessageHistory(mem, user="alice", session="s1")   # what was said: L0 turns
    retriever = MemdbRetriever(mem=mem, user="alice", k=5)              # what matters: atoms and turns
    histories = history_factory(mem)     # (user_id, session_id) -> history, for RunnableWithMessageHistory

The history writes through add(), so what the user says is extracted into atoms like any turn,
and the retriever reads through search(). Tool results are stored (add()'s rule) but left out
of `messages`: their calls come back as text lines of the assistant's turn, and a chat model
refuses a tool message without its structured call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.documents import Document
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, convert_to_openai_messages
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import ConfigurableFieldSpec
    from pydantic import Field
except ImportError as exc:  # plain memdb does not need LangChain; say how to get it
    raise ImportError(f"memdb.adapters.langchain needs langchain-core: pip install 'memdb-sqlite[langchain]' ({exc})") from exc

from ..checks import check_name
from ..errors import InvalidInput
from ..memory import Memory

_MESSAGE_TYPES = {"user": HumanMessage, "assistant": AIMessage, "system": SystemMessage}


class MemdbChatMessageHistory(BaseChatMessageHistory):
    """One session of one user's turns, as LangChain messages (RunnableWithMessageHistory, …)."""

    def __init__(self, mem: Memory, *, user: str | None = None, session: str = "default") -> None:
        self.mem = mem
        if user is None and mem.user is None:
            raise InvalidInput("MemdbChatMessageHistory needs user=, or a Memory bound to one "
                               "(memdb.open(path, user=...)); history_factory(mem) builds one per user and session")
        self.user = check_name(user if user is not None else mem.user, "user")
        self.session = check_name(session, "session")

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's user, assistant and system turns, oldest first (this session's rows
        only: not the user's whole export)."""
        return [_MESSAGE_TYPES[t["role"]](content=t["content"], name=t["speaker"], id=str(t["id"]))
                for t in self._turns() if t["role"] in _MESSAGE_TYPES]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store the messages as turns of this session (one transaction), extracted as add() does."""
        self.mem.add(convert_to_openai_messages(list(messages)), user=self.user, session=self.session)

    def clear(self) -> None:
        """Forget every turn of this session, with the atoms that came only from them."""
        for turn in self._turns():
            self.mem.forget(user=self.user, turn_id=turn["id"])

    def _turns(self) -> list[dict]:
        return self.mem.session_turns(self.session, user=self.user)


def history_factory(mem: Memory) -> Callable[..., MemdbChatMessageHistory]:
    """get_session_history for RunnableWithMessageHistory: a memdb history is per user and per
    session, so it takes both, as `user_id` and `session_id` (see HISTORY_FIELDS), or only
    `session_id` when mem is bound to a user."""

    def get_session_history(session_id: str, user_id: str | None = None) -> MemdbChatMessageHistory:
        return MemdbChatMessageHistory(mem, user=user_id, session=session_id)

    return get_session_history


# history_factory_config for RunnableWithMessageHistory with a shared (unbound) Memory: invoke
# with config={"configurable": {"user_id": "alice", "session_id": "s1"}}.
HISTORY_FIELDS = [
    ConfigurableFieldSpec(id="user_id", annotation=str, name="User ID", description="whose memory",
                          default="", is_shared=True),
    ConfigurableFieldSpec(id="session_id", annotation=str, name="Session ID", description="the conversation",
                          default="", is_shared=True),
]

_SEARCH_ARGS = set(inspect.signature(Memory.search).parameters) - {"self", "query", "user"}


class MemdbRetriever(BaseRetriever):
    """search() as a LangChain retriever: each hit a Document, its text the page content.

    search_kwargs are passed to search() (k, layer, session, fusion, alpha, include_superseded);
    an unknown one is refused rather than ignored. The assistant's own turns are left out
    unless include_assistant=True: memory is about what the user said, and "Noted! Anything
    else?" is no memory."""

    mem: Any
    user: str
    k: int = 5
    layer: str = "both"
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    include_assistant: bool = False

    def model_post_init(self, context: Any) -> None:
        unknown = sorted(set(self.search_kwargs) - _SEARCH_ARGS)
        if unknown:
            raise InvalidInput(f"search_kwargs {', '.join(unknown)} not taken by search(); it takes "
                               f"{', '.join(sorted(_SEARCH_ARGS))}")

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        asked = {"k": self.k, "layer": self.layer, **self.search_kwargs}
        k = asked["k"]
        if not self.include_assistant and isinstance(k, int):  # room for the assistant turns left out
            asked["k"] = min(1000, 2 * k)
        hits = [h for h in self.mem.search(query, user=self.user, **asked)
                if self.include_assistant or h.role != "assistant"][:k]
        return [Document(page_content=h.text, id=f"{h.layer}:{h.id}",
                         metadata={"layer": h.layer, "id": h.id, "score": h.score, "ts": h.ts,
                                   "kind": h.kind, "turn_ids": h.turn_ids, "role": h.role})
                for h in hits]
