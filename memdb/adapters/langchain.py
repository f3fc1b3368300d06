"""LangChain (and LangGraph, which shares its messages): memdb as a chat message history and a
retriever, the two interfaces long-term memories plug into there. `pip install 'memdb[langchain]'`.

    from memdb.adapters.langchain import MemdbChatMessageHistory, MemdbRetriever
    history = MemdbChatMessageHistory(mem, user="alice", session="s1")   # what was said: L0 turns
    retriever = MemdbRetriever(mem=mem, user="alice", k=5)              # what matters: atoms and turns

The history writes through add(), so what the user says is extracted into atoms like any turn,
and the retriever reads through search(). Tool results are stored (add()'s rule) but left out
of `messages`: their calls come back as text lines of the assistant's turn, and a chat model
refuses a tool message without its structured call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.documents import Document
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, convert_to_openai_messages
    from langchain_core.retrievers import BaseRetriever
except ImportError as exc:  # plain memdb does not need LangChain; say how to get it
    raise ImportError(f"memdb.adapters.langchain needs langchain-core: pip install 'memdb[langchain]' ({exc})") from exc

from ..checks import check_name
from ..memory import Memory

_MESSAGE_TYPES = {"user": HumanMessage, "assistant": AIMessage, "system": SystemMessage}


class MemdbChatMessageHistory(BaseChatMessageHistory):
    """One session of one user's turns, as LangChain messages (RunnableWithMessageHistory, …)."""

    def __init__(self, mem: Memory, *, user: str, session: str = "default") -> None:
        self.mem = mem
        self.user = check_name(user, "user")
        self.session = check_name(session, "session")

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's user, assistant and system turns, oldest first."""
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
        turns = []
        for row in self.mem.export(self.user):  # turns come first, in id order
            if row["type"] != "turn":
                break
            if row["session"] == self.session:
                turns.append(row)
        return turns


class MemdbRetriever(BaseRetriever):
    """search() as a LangChain retriever: each hit a Document, its text the page content."""

    mem: Any
    user: str
    k: int = 5
    layer: str = "both"

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        hits = self.mem.search(query, user=self.user, k=self.k, layer=self.layer)
        return [Document(page_content=h.text, id=f"{h.layer}:{h.id}",
                         metadata={"layer": h.layer, "id": h.id, "score": h.score, "ts": h.ts,
                                   "kind": h.kind, "turn_ids": h.turn_ids})
                for h in hits]
