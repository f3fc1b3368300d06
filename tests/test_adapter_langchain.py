"""The LangChain adapter against the real langchain-core: a chat history that RunnableWithMessageHistory
drives, and a retriever whose documents are memdb's hits."""

from __future__ import annotations

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory
import pytest

import memdb
from memdb.adapters.langchain import MemdbChatMessageHistory, MemdbRetriever
from tests.conftest import ScriptedLLM


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # langchain-core 1 points new code at LangGraph
def test_a_runnable_with_message_history_keeps_its_conversation_in_memdb(db_path, embedder):
    model = FakeListChatModel(responses=["Bees, nice!", "You keep bees."])
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{input}")])
    with memdb.open(db_path, embedder=embedder, extract="defer") as mem:
        agent = RunnableWithMessageHistory(
            prompt | model, lambda session_id: MemdbChatMessageHistory(mem, user="ana", session=session_id),
            input_messages_key="input", history_messages_key="history")
        config = {"configurable": {"session_id": "s1"}}
        agent.invoke({"input": "I keep bees on the roof."}, config=config)
        answer = agent.invoke({"input": "What do I keep?"}, config=config)
    assert "You keep bees." == answer.content
    with memdb.open(db_path, embedder=embedder, extract="defer") as mem:  # another process, later
        history = MemdbChatMessageHistory(mem, user="ana", session="s1").messages
        other = MemdbChatMessageHistory(mem, user="ana", session="s2").messages
    assert [("human", "I keep bees on the roof."), ("ai", "Bees, nice!"), ("human", "What do I keep?"),
            ("ai", "You keep bees.")] == [(m.type, m.content) for m in history]
    assert [] == other


def test_tool_messages_are_stored_but_only_chat_turns_come_back(mem):
    history = MemdbChatMessageHistory(mem, user="ana", session="s1")
    history.add_messages([
        SystemMessage("Be brief."), HumanMessage("Weather in Lisbon?", name="Ana"),
        AIMessage("", tool_calls=[{"id": "c1", "name": "weather", "args": {"city": "Lisbon"}}]),
        ToolMessage("21C clear", tool_call_id="c1"), AIMessage("21°C and clear."),
    ])
    assert [("system", None, "Be brief."), ("human", "Ana", "Weather in Lisbon?"),
            ("ai", None, 'tool call: weather({"city": "Lisbon"})'), ("ai", None, "21°C and clear.")] == [
        (m.type, m.name, m.content) for m in history.messages]
    assert ["tool"] == [t["role"] for t in mem.export("ana") if t["type"] == "turn" and t["speaker"] == "weather"]


def test_clear_forgets_the_session_and_nothing_else(mem):
    kept = MemdbChatMessageHistory(mem, user="ana", session="keep")
    gone = MemdbChatMessageHistory(mem, user="ana", session="gone")
    kept.add_user_message("I keep bees.")
    gone.add_user_message("My locker code is 4711.")
    gone.clear()
    assert [] == gone.messages
    assert ["I keep bees."] == [m.content for m in kept.messages]
    assert [] == [h for h in mem.search("locker code 4711", user="ana") if "4711" in h.text]


def test_the_retriever_returns_atoms_and_turns_as_documents(db_path, embedder):
    with memdb.open(db_path, embedder=embedder, llm=ScriptedLLM('{"a":["Ana | keeps | bees on the roof"]}'), settings=memdb.Settings(extract_fill=False)) as mem:
        mem.add([{"role": "user", "name": "Ana", "content": "I keep bees on the roof."}], user="ana")
        mem.add([{"role": "user", "content": "I keep bees too."}], user="bob")
        docs = MemdbRetriever(mem=mem, user="ana", k=5).invoke("who keeps bees?")
    # the atom stands for its turn, and bob's turn is never ana's
    assert [("Ana keeps bees on the roof", "atom:1", [1])] == [
        (d.page_content, d.id, d.metadata["turn_ids"]) for d in docs]


# ---------------------------------------------------------------- issue 26: what a new user ran into


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_two_key_config_drives_a_shared_memory_and_the_one_key_pattern_works_when_bound(db_path, embedder):
    from memdb.adapters.langchain import HISTORY_FIELDS, history_factory

    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{input}")])
    with memdb.open(db_path, embedder=embedder, extract="defer") as mem:
        agent = RunnableWithMessageHistory(
            prompt | FakeListChatModel(responses=["Hi Ana.", "Hi Ben."]), history_factory(mem),
            input_messages_key="input", history_messages_key="history", history_factory_config=HISTORY_FIELDS)
        agent.invoke({"input": "I'm Ana."}, config={"configurable": {"user_id": "ana", "session_id": "s1"}})
        agent.invoke({"input": "I'm Ben."}, config={"configurable": {"user_id": "ben", "session_id": "s1"}})
        assert [("human", "I'm Ana."), ("ai", "Hi Ana.")] == [
            (m.type, m.content) for m in MemdbChatMessageHistory(mem, user="ana", session="s1").messages]
    with memdb.open(db_path, embedder=embedder, extract="defer", user="ben") as bound:
        single = RunnableWithMessageHistory(prompt | FakeListChatModel(responses=["Again, Ben."]),
                                            history_factory(bound), input_messages_key="input",
                                            history_messages_key="history")
        single.invoke({"input": "Me again."}, config={"configurable": {"session_id": "s1"}})
        assert ["I'm Ben.", "Hi Ben.", "Me again.", "Again, Ben."] == [
            m.content for m in MemdbChatMessageHistory(bound, session="s1").messages]
    with memdb.open(db_path, embedder=embedder, extract="defer") as shared:
        with pytest.raises(memdb.InvalidInput, match="needs user="):
            history_factory(shared)("s1")


def test_messages_read_the_session_not_the_users_whole_export(mem, monkeypatch):
    history = MemdbChatMessageHistory(mem, user="ana", session="s1")
    history.add_user_message("I keep bees.")
    MemdbChatMessageHistory(mem, user="ana", session="s2").add_user_message("Other talk.")
    monkeypatch.setattr(memdb.Memory, "export", lambda *a, **k: pytest.fail("read the whole export"))
    assert ["I keep bees."] == [m.content for m in history.messages]


def test_the_retriever_applies_search_kwargs_refuses_unknown_ones_and_leaves_the_assistant_out(mem):
    mem.add([{"role": "user", "content": "I keep bees on the roof.", "ts": "2026-03-01T09:00:00"},
             {"role": "assistant", "content": "Bees on the roof sound like a lot of honey work.",
              "ts": "2026-03-01T09:00:05"}], user="ana", session="s1")
    mem.add([{"role": "user", "content": "The bees swarmed today.", "ts": "2026-03-02T09:00:00"}], user="ana",
            session="s2")
    docs = MemdbRetriever(mem=mem, user="ana", k=5).invoke("bees roof")
    assert {"user"} == {d.metadata["role"] for d in docs}
    both = MemdbRetriever(mem=mem, user="ana", k=5, include_assistant=True).invoke("bees roof")
    assert "assistant" in {d.metadata["role"] for d in both}
    only_s2 = MemdbRetriever(mem=mem, user="ana", search_kwargs={"session": "s2", "k": 1, "layer": "turns"})
    assert ["The bees swarmed today."] == [d.page_content for d in only_s2.invoke("bees")]
    with pytest.raises(ValueError, match="search_kwargs score_threshold not taken by search"):  # pydantic wraps it
        MemdbRetriever(mem=mem, user="ana", search_kwargs={"score_threshold": 0.5})
