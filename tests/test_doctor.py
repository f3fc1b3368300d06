"""A first run that tells the truth: `memdb demo` sends turns through the model and says so
(and fails loudly when the model cannot run), `memdb doctor` loads each model, runs one
extraction and one embedding and reports the machine and what memdb chose for it."""

from __future__ import annotations

import functools
import importlib.util
import json

import pytest

import memdb
from memdb import cli, doctor
from memdb.extractor import Extractor
from memdb.models import embedders, llama, worker
from tests.conftest import HashEmbedder
from tests.model_fakes import ControlledLLM


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def model_is(monkeypatch):
    """Makes every Memory's own model (the bundled one) the given WorkerLLM."""
    made: list[worker.WorkerLLM] = []

    def use(factory) -> worker.WorkerLLM:
        made.append(worker.WorkerLLM(factory, timeout=60))
        monkeypatch.setattr(Extractor, "make", lambda self: made[-1])
        return made[-1]

    yield use
    for w in made:
        w.close()


def test_the_demo_sends_a_turn_through_the_model_and_says_so(tmp_path, capsys, model_is):
    model_is("tests.model_fakes:EchoLLM")
    code, out, _ = run(capsys, "demo", str(tmp_path / "demo.db"), "--embedder", "none")
    assert 0 == code
    # one turn the rules leave to the model; no pronoun question (Chinese notes repeat the name,
    # and Bob's notes need no pronoun)
    assert "the extraction model (echo) was asked 1 time(s) and answered; the rules took the other turns" in out
    model_is("tests.model_fakes:EchoLLM")
    code, out, _ = run(capsys, "demo", str(tmp_path / "demo2.db"), "--embedder", "none", "--json")
    shown = json.loads(out)
    # Bob's pronoun is known now (asked once per name and model in a process): one call
    assert (0, "echo", 1, 13) == (code, shown["model"], shown["model_calls"], shown["done"] + shown["skipped"])


def test_the_demo_fails_loudly_when_the_model_crashes(tmp_path, capsys, model_is):
    control = tmp_path / "control"
    control.write_text("segfault")
    model_is(functools.partial(ControlledLLM, str(control)))
    code, out, err = run(capsys, "demo", str(tmp_path / "demo.db"), "--embedder", "none")
    assert 2 == code and "answered" not in out
    assert "memdb: the extraction model (ControlledLLM) ended (SIGSEGV, a crash in native code)" in err
    with memdb.open(tmp_path / "demo.db", embedder=None, extract="defer") as mem:
        assert 1 == mem.stats()["turns_by_state"]["pending"]  # the model's turn waits for a later extract()


def test_doctor_reports_the_machine_the_choices_and_each_check(capsys, monkeypatch, model_is):
    model_is("tests.model_fakes:InesLLM")
    monkeypatch.setattr(embedders, "load", lambda name, threads=None: HashEmbedder(name=f"hash-{name}"))
    flags = llama.cpu_flags("flags : sse4_2 avx avx2 fma amx_tile amx_int8\n")
    monkeypatch.setattr(llama, "cpu_flags", lambda: flags)
    code, out, _ = run(capsys, "doctor", "--json", "--threads", "2")
    report = json.loads(out)
    assert 0 == code and report["ok"]
    assert ["sse4_2", "avx", "avx2", "fma", "amx_tile", "amx_int8"] == report["machine"]["features"]
    assert (2, False) == (report["choices"]["threads"], report["choices"]["extra_buffers"])
    assert "the CPU reports AMX (amx_int8, amx_tile)" in report["choices"]["extra_buffers_why"]
    found = report["checks"]["extraction"]
    assert ("ines", 1, 1, True) == (found["model"], found["model_calls"], found["turns_done"], found["in_worker"])
    assert ["Ines grows tomatoes at the allotment"] == found["atoms"] and "warning" not in found
    assert ("hash-default", 64) == (report["checks"]["embedder"]["model"], report["checks"]["embedder"]["dim"])
    code, out, _ = run(capsys, "doctor", "--threads", "2")
    lines = out.splitlines()
    assert "threads       2" in lines and "all good" == lines[-1]
    assert "chosen        extra buffer types off: the CPU reports AMX (amx_int8, amx_tile), whose llama.cpp kernels crash" in lines
    assert any(line.startswith("extraction    ines (in its worker): loaded in ")
               and "['Ines grows tomatoes at the allotment']" in line for line in lines)


def test_doctor_says_when_the_model_runs_but_its_answer_is_unusable(model_is):
    model_is("tests.model_fakes:GarbageLLM")
    found = doctor.check_extraction(None, 2, memdb.Settings())
    assert (2, 0, []) == (found["model_calls"], found["turns_done"], found["atoms"])  # the call and its retry
    assert found["warning"].startswith("the model ran but its answer was unusable: invalid output after retry")


def test_doctor_reports_a_failing_model_and_still_checks_the_rest(capsys, monkeypatch, model_is):
    model_is("tests.model_fakes:BrokenAtBuild")
    monkeypatch.setattr(embedders, "load", lambda name, threads=None: HashEmbedder())
    code, out, _ = run(capsys, "doctor")
    lines = out.splitlines()
    assert 1 == code and "some checks FAILED: see above" == lines[-1]
    assert any(line.startswith("extraction    FAILED: ModelError: the extraction model (tests.model_fakes:BrokenAtBuild) "
                               "could not be built in its worker: FileNotFoundError: no weights") for line in lines)
    assert any(line.startswith("embedder      hash-test (dim 64): loaded in ") for line in lines)


def test_a_check_that_raises_is_reported_not_raised():
    def broken() -> dict:
        raise RuntimeError("no such model")

    report = doctor.run(checks={"extraction": broken, "optional": lambda: {"skipped": "absent", "required": False}})
    assert {"error": "RuntimeError: no such model"} == report["checks"]["extraction"] and not report["ok"]


@pytest.mark.model
@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed")
def test_doctor_with_the_real_models(capsys):
    code, out, _ = run(capsys, "doctor", "--json", "--threads", "2")
    report = json.loads(out)
    assert 0 == code, report
    found = report["checks"]["extraction"]
    assert (1, True) == (found["model_calls"], found["in_worker"]) and found["generate_tokens_per_s"] > 0
    assert 384 == report["checks"]["embedder"]["dim"]
