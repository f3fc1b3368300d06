"""The model in a worker process: a crash, an abort, a hang or an exit in the model is a
ModelError in the caller, the turns stay pending and a later extract() finishes them; reads never
wait for a model call; the bundled model loads without llama.cpp's AMX kernels on a CPU with AMX."""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import memdb
from memdb.errors import InvalidInput, ModelError
from memdb.extractor import Extractor
from memdb.models import llama, worker
from tests.model_fakes import LINE, ControlledLLM, SlowLLM, SlowToBuild

ANNA = [{"role": "user", "name": "Anna", "content": LINE}]


@pytest.fixture
def control(tmp_path):
    """The control file the fake model obeys, and a function that sets what its next call does."""
    path = tmp_path / "control"
    path.write_text("ok")
    return path


@pytest.fixture
def controlled(control):
    made: list[worker.WorkerLLM] = []

    def make(timeout: float = 60.0) -> worker.WorkerLLM:
        made.append(worker.WorkerLLM(functools.partial(ControlledLLM, str(control)), timeout=timeout))
        return made[-1]

    yield make
    for w in made:
        w.close()


def calls(control) -> list[str]:
    path = control.parent / "control.calls"
    return path.read_text().split("\n")[:-1] if path.exists() else []


@pytest.mark.parametrize("mode, ending", [
    ("segfault", "SIGSEGV, a crash in native code"),
    ("abort", "SIGABRT, an abort in native code"),
    ("exit", "exit status 3"),
    ("kill", "SIGKILL, killed: out of memory, or by another process"),
])
def test_a_model_that_dies_leaves_the_turns_pending_and_a_later_extract_finishes_them(
        db_path, embedder, control, controlled, caplog, mode, ending):
    control.write_text(mode)
    model = controlled()
    with memdb.open(db_path, embedder=embedder, llm=model) as mem, caplog.at_level(logging.WARNING, "memdb"):
        ids = mem.add(ANNA, user="anna")  # extract="now": the model is asked, and dies
        assert {"pending": 1} == mem.stats()["turns_by_state"]
        assert [] == mem.profile("anna")
        warned = [r.getMessage() for r in caplog.records]
        assert 1 == len(warned) and f"extraction model (ControlledLLM) ended ({ending})" in warned[0]
        assert "the turns stay pending and the next call starts a new worker" in warned[0]
        with pytest.raises(ModelError, match=ending.split(",")[0]):
            mem.extract(user="anna")  # a new worker, which dies the same way
        control.write_text("ok")
        assert {"done": 1, "new": 1} == {k: v for k, v in mem.extract(user="anna").items() if v}
        assert ["Anna likes green tea"] == [a.text for a in mem.profile("anna")]
        assert ids == mem.search("green tea", user="anna", layer="turns")[0].turn_ids
    assert [mode, mode, "ok"] == [line.split()[1] for line in calls(control)]
    assert 3 == model.starts and 1 == model.calls


def test_a_hung_model_is_stopped_after_the_timeout(db_path, embedder, control, controlled):
    control.write_text("hang")
    model = controlled(timeout=1.0)
    with memdb.open(db_path, embedder=embedder, llm=model, extract="defer") as mem:
        mem.add(ANNA, user="anna")
        with pytest.raises(ModelError, match=r"did not answer within the model timeout \(1 s; Settings.model_timeout\)"):
            mem.extract()
        hung = int(calls(control)[0].split()[0])
        assert not _alive(hung)
        control.write_text("ok")
        assert 1 == mem.extract()["done"]


def test_an_exception_in_the_model_fails_those_turns_and_keeps_the_worker(db_path, embedder, control, controlled):
    control.write_text("raise")
    model = controlled()
    with memdb.open(db_path, embedder=embedder, llm=model, extract="defer") as mem:
        mem.add(ANNA, user="anna")
        assert 1 == mem.extract()["failed"]  # bad model output fails the turn, as in process
        reason = mem.conn.execute('select "reason" from "turns"').fetchone()[0]
        assert "ValueError: the fake model refused this prompt" in reason
        pid = model.pid
        control.write_text("ok")
        mem.add(ANNA, user="anna")
        assert 1 == mem.extract()["done"]
        assert pid == model.pid and 1 == model.starts  # one worker, loaded once, for every call


def test_a_worker_killed_between_calls_is_replaced(db_path, embedder, control, controlled, caplog):
    model = controlled()
    with memdb.open(db_path, embedder=embedder, llm=model) as mem:
        mem.add(ANNA, user="anna")
        first = model.pid
        os.kill(first, signal.SIGKILL)
        assert _wait_for(lambda: model._proc.poll() is not None)
        with caplog.at_level(logging.WARNING, "memdb"):
            mem.add([{**ANNA[0], "content": LINE + " Truly."}], user="anna")
        assert {"done": 2} == mem.stats()["turns_by_state"]
        assert first != model.pid and 2 == model.starts
        assert [f"memdb: the model worker {first} had exited (SIGKILL, killed: out of memory, or by another "
                f"process); starting a new one"] == [r.getMessage() for r in caplog.records]


def test_a_model_that_cannot_be_built_is_a_model_error(db_path, embedder):
    model = worker.WorkerLLM("tests.model_fakes:BrokenAtBuild")
    with memdb.open(db_path, embedder=embedder, llm=model, extract="defer") as mem:
        mem.add(ANNA, user="anna")
        with pytest.raises(ModelError, match="could not be built in its worker: FileNotFoundError: no weights"):
            mem.extract()
        assert {"pending": 1} == mem.stats()["turns_by_state"]
    assert "echo" == worker.WorkerLLM("tests.model_fakes:EchoLLM").name


def test_what_the_model_logs_in_its_worker_is_logged_here(caplog):
    model = worker.WorkerLLM("tests.model_fakes:ChattyLLM")
    try:
        with caplog.at_level(logging.DEBUG, "memdb"):
            model.complete([], schema={}, max_tokens=1)
        assert [(logging.WARNING, "memdb: the fake grammar failed; using free JSON")] == [
            (r.levelno, r.getMessage()) for r in caplog.records]
    finally:
        model.close()


def test_a_factory_the_worker_cannot_rebuild_is_refused_at_once():
    with pytest.raises(InvalidInput, match="cannot be sent to a worker process"):
        worker.WorkerLLM(lambda: ControlledLLM("x"))
    with pytest.raises(InvalidInput, match='looks like "package.module:name"'):
        worker.WorkerLLM("tests.model_fakes.EchoLLM")


def test_the_worker_ends_with_its_parent(tmp_path, control):
    # A parent killed in the middle of a model call: its worker notices and leaves.
    control.write_text("hang")
    script = ("import functools, sys, threading; from memdb.models import worker; "
              "from tests.model_fakes import ControlledLLM; "
              f"w = worker.WorkerLLM(functools.partial(ControlledLLM, {str(control)!r})); "
              "threading.Thread(target=w.complete, args=([],), kwargs=dict(schema={}, max_tokens=1), daemon=True).start(); "
              "import time; time.sleep(3600)")
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=os.getcwd(),
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        child = _wait_for(lambda: calls(control) and int(calls(control)[0].split()[0]))
        assert _alive(child)
    finally:
        parent.kill()
        parent.wait()
    assert _wait_for(lambda: not _alive(child))


def test_the_bundled_model_runs_in_a_shared_worker_with_the_settings(tmp_path, embedder):
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")  # never loaded here: making the worker does not start it
    settings = memdb.Settings(model_timeout=7.5, model_extra_buffers=False)
    with memdb.open(tmp_path / "a.db", embedder=embedder, llm=gguf, settings=settings) as a, \
            memdb.open(tmp_path / "b.db", embedder=embedder, llm=gguf, settings=settings) as b:
        made = a.extractor.make()
        assert isinstance(made, worker.WorkerLLM) and made is b.extractor.make()
        assert (7.5, "tiny", None) == (made.timeout, made.label, made.pid)
    with memdb.open(tmp_path / "c.db", embedder=embedder, llm=gguf,
                    settings=memdb.Settings(model_worker=False, model_extra_buffers=False)) as c:
        inline = c.extractor.make()
        assert isinstance(inline, llama.LlamaLLM) and inline.extra_bufts is False


@pytest.mark.parametrize("bad", [{"model_timeout": 0}, {"model_timeout": "10"}, {"model_worker": 1},
                                 {"model_extra_buffers": "auto"}])
def test_bad_model_settings_are_refused(bad):
    with pytest.raises(InvalidInput, match=f"Settings.{next(iter(bad))} must be"):
        memdb.Settings(**bad)


def test_the_mcp_server_keeps_serving_when_its_model_crashes(tmp_path, control):
    pytest.importorskip("mcp")
    import asyncio

    from mcp import ClientSession, StdioServerParameters, stdio_client

    control.write_text("segfault")
    db = str(tmp_path / "agent.db")
    code = ("import functools, memdb; from memdb.mcp_server import serve; from memdb.models.worker import WorkerLLM; "
            "from tests.model_fakes import ControlledLLM; "
            f"llm = WorkerLLM(functools.partial(ControlledLLM, {str(control)!r})); "
            f"serve(memdb.open({db!r}, embedder=None, llm=llm), user='anna')")
    server = StdioServerParameters(command=sys.executable, args=["-c", code], cwd=os.getcwd(),
                                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})

    async def session() -> list:
        async with stdio_client(server) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            crashed = await client.call_tool("remember", {"messages": ANNA})
            recalled = await client.call_tool("recall", {"query": "green tea"})
            control.write_text("ok")
            again = await client.call_tool("remember", {"messages": [{**ANNA[0], "content": LINE + " Truly."}]})
            return [crashed, recalled, again, await client.call_tool("profile", {})]

    crashed, recalled, again, profile = asyncio.run(asyncio.wait_for(session(), timeout=120))
    assert not crashed.is_error and not recalled.is_error and not again.is_error
    first = crashed.structured_content["turn_ids"]
    assert [first] == [hit["turn_ids"] for hit in recalled.structured_content["result"]][:1]
    assert ["Anna likes green tea"] == [a["text"] for a in profile.structured_content["result"]]
    with memdb.open(db, embedder=None, llm=ControlledLLM(str(control)), extract="defer") as mem:
        assert {"done": 1, "pending": 1} == mem.stats()["turns_by_state"]  # the crashed call's turn waits
        assert 1 == mem.extract()["done"]


# ------------------------------------------------------------ reads never wait for the model


def test_search_returns_while_the_model_is_still_answering(db_path, embedder):
    model = SlowLLM()
    with memdb.open(db_path, embedder=embedder, llm=model, extract="defer") as mem:
        mem.add([{"role": "user", "name": "Anna", "content": "Bees on the roof, two hives."}], user="anna")
        mem.add(ANNA, user="anna")
        extracting = threading.Thread(target=mem.extract)
        extracting.start()
        try:
            assert model.started.wait(30)
            found: list = []
            searched = threading.Event()

            def search() -> None:
                found.extend(mem.search("bees roof", user="anna", layer="turns"))
                found.append(mem.stats()["turns"])
                searched.set()

            threading.Thread(target=search, daemon=True).start()
            assert searched.wait(30), "search waited for the model call"
            assert not model.release.is_set() and extracting.is_alive()  # the model call is still going on
            assert ["Bees on the roof, two hives.", 2] == [found[0].text, found[-1]]
        finally:
            model.release.set()
            extracting.join(30)
        assert ["Anna likes green tea"] == [a.text for a in mem.profile("anna")]


def test_search_returns_while_the_model_is_still_loading(db_path, embedder, control, monkeypatch):
    # The Memory's own model (the bundled one, made on first use), here one slow to load.
    model = worker.WorkerLLM(functools.partial(SlowToBuild, str(control)))
    monkeypatch.setattr(Extractor, "make", lambda self: model)
    building, release = control.parent / "control.building", control.parent / "control.release"
    try:
        with memdb.open(db_path, embedder=embedder, extract="defer") as mem:
            mem.add([{"role": "user", "name": "Anna", "content": "Bees on the roof, two hives."}], user="anna")
            extracting = threading.Thread(target=mem.extract)
            extracting.start()
            try:
                assert _wait_for(building.exists)  # the worker is building the model (another process)
                assert ["Bees on the roof, two hives."] == [h.text for h in mem.search("bees", user="anna")]
                assert not release.exists() and extracting.is_alive()
            finally:
                release.write_text("go")
                extracting.join(60)
            assert {"done": 1} == mem.stats()["turns_by_state"]
    finally:
        model.close()


# ------------------------------------------------------------ AMX: the load parameters


CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
flags\t\t: fpu sse2 avx avx2 fma f16c bmi2 avx512f {extra}
"""


def test_cpu_flags_are_read_from_cpuinfo():
    assert {"avx2", "amx_tile", "amx_int8"} <= llama.cpu_flags(CPUINFO.format(extra="amx_tile amx_int8"))
    assert set() == llama.cpu_flags("processor : 0\n")


@pytest.mark.parametrize("setting, extra, info, expected", [
    (None, "amx_bf16 amx_tile amx_int8", "", False),
    (None, "", "CPU : AVX2 = 1 | AMX_INT8 = 1 |", False),  # no cpuinfo to ask: llama.cpp's build says it
    (None, "", "CPU : AVX2 = 1 | AVX512 = 1 |", True),
    (True, "amx_tile amx_int8", "", True),  # forced on by Settings.model_extra_buffers
    (False, "", "", False),
])
def test_extra_buffer_types_are_off_where_the_cpu_reports_amx(setting, extra, info, expected):
    use, why = llama.extra_buffers(setting, flags=llama.cpu_flags(CPUINFO.format(extra=extra)), info=info)
    assert expected == use
    assert ("the CPU reports AMX" in why) == (setting is None and not expected)


needs_llama = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                 reason="llama-cpp-python is not installed")


@needs_llama
@pytest.mark.parametrize("extra, setting, expected", [("amx_tile amx_int8", None, False), ("", None, True),
                                                      ("amx_int8", True, True)])
def test_the_model_params_llama_cpp_gets_carry_the_choice(monkeypatch, tmp_path, extra, setting, expected):
    # What llama.cpp itself receives: the llama_model_params Llama builds from its defaults.
    import llama_cpp

    seen = []

    class FakeLlama:
        def __init__(self, model_path, **params):
            seen.append(llama_cpp.llama_cpp.llama_model_default_params().use_extra_bufts)

        def close(self):
            pass

    flags = llama.cpu_flags(CPUINFO.format(extra=extra))
    monkeypatch.setattr(llama, "cpu_flags", lambda: flags)
    monkeypatch.setattr(llama, "system_info", lambda: "CPU : AVX2 = 1 |")
    monkeypatch.setattr(llama_cpp, "Llama", FakeLlama)
    made = llama.new_llama(tmp_path / "m.gguf", extra_bufts=setting, n_ctx=64)
    llama.close_llama(made)
    assert [expected] == seen
    assert llama_cpp.llama_cpp.llama_model_default_params().use_extra_bufts  # restored after the load


@pytest.mark.model
@needs_llama
def test_the_real_model_loads_and_answers_without_extra_buffers_on_an_amx_cpu(monkeypatch):
    flags = llama.cpu_flags(CPUINFO.format(extra="amx_tile amx_int8"))
    monkeypatch.setattr(llama, "cpu_flags", lambda: flags)
    model = llama.LlamaLLM(None, name="default", threads=2, n_ctx=512,
                           expected_sha256=llama.assets.DEFAULT_MODEL_SHA256)
    try:
        assert model.model().model_params.use_extra_bufts is False
        reply = model.complete([{"role": "user", "content": "Reply with the JSON {\"a\": [\"ok\"]}."}],
                               schema={"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}},
                                       "required": ["a"]}, max_tokens=16)
        assert reply.startswith("{")
    finally:
        model.close()


# ------------------------------------------------------------ helpers


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _wait_for(condition, deadline: float = 20.0):
    """condition()'s first true value, polled until the deadline (for other processes only)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    return condition()
