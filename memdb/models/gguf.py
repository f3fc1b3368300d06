"""A GGUF v3 writer: enough of the format for memdb to hand an embedding model to llama.cpp.

memdb writes GGUF files from weights that packages ship in other layouts (the default
multilingual embedder; benches write MiniLM), so that llama.cpp's tuned kernels run them.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

ALIGN = 32
U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9  # metadata value types
GGML_F32, GGML_F16, GGML_Q4_0 = 0, 1, 2  # tensor types
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_UNUSED = 1, 2, 3, 5


def bert_metadata(name: str, *, file_type: int, context: int, hidden: int, ffn: int, layers: int, heads: int,
                  eps: float, tokenizer: str) -> list[tuple[str, int, Any]]:
    """The keys llama.cpp's BERT loader reads for a mean-pooled, non-causal encoder; the caller
    adds its vocabulary's."""
    arch = "bert"
    return [
        ("general.architecture", STR, arch),
        ("general.name", STR, name),
        ("general.file_type", U32, file_type),
        (f"{arch}.context_length", U32, context),
        (f"{arch}.embedding_length", U32, hidden),
        (f"{arch}.feed_forward_length", U32, ffn),
        (f"{arch}.block_count", U32, layers),
        (f"{arch}.attention.head_count", U32, heads),
        (f"{arch}.attention.layer_norm_epsilon", F32, eps),
        (f"{arch}.attention.causal", BOOL, False),
        (f"{arch}.pooling_type", U32, 1),  # mean
        ("tokenizer.ggml.model", STR, tokenizer),
    ]


class Raw:
    """A tensor already in a ggml layout (e.g. Q4_0 blocks): its type, numpy-order shape, bytes."""

    def __init__(self, ggml_type: int, shape: tuple[int, ...], data: bytes | np.ndarray) -> None:
        self.ggml_type, self.shape, self.data = ggml_type, shape, memoryview(data).cast("B")
        self.ndim, self.nbytes = len(shape), self.data.nbytes


def _str(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _value(kind: int, value: Any) -> bytes:
    if kind == U32:
        return struct.pack("<I", value)
    if kind == I32:
        return struct.pack("<i", value)
    if kind == F32:
        return struct.pack("<f", value)
    if kind == BOOL:
        return struct.pack("<?", value)
    if kind == STR:
        return _str(value)
    item_kind, items = value
    head = struct.pack("<IQ", item_kind, len(items))
    if item_kind == I32:
        return head + np.asarray(items, dtype="<i4").tobytes()
    if item_kind == F32:
        return head + np.asarray(items, dtype="<f4").tobytes()
    return head + b"".join(_value(item_kind, x) for x in items)


def _kind(t: np.ndarray | Raw) -> int:
    if isinstance(t, Raw):
        return t.ggml_type
    return GGML_F16 if t.dtype == np.float16 else GGML_F32


def _bytes(t: np.ndarray | Raw) -> bytes | memoryview:
    if isinstance(t, Raw):
        return t.data
    return np.ascontiguousarray(t, dtype=t.dtype.newbyteorder("<")).tobytes()


def write(path: Path, metadata: list[tuple[str, int, Any]], tensors: list[tuple[str, np.ndarray | Raw]]) -> None:
    """Write a GGUF v3 file: header, typed key/values, tensor infos, 32-byte aligned data.

    metadata holds (key, type, value), arrays as (key, ARR, (item type, items)); tensors are
    float32 or float16 arrays or Raw, their ggml shape being the numpy shape reversed. The file
    is written beside path and renamed into place, so no reader sees half of it.
    """
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata)))
    for key, kind, value in metadata:
        out += _str(key) + struct.pack("<I", kind) + _value(kind, value)
    offset = 0
    for name, t in tensors:
        out += _str(name) + struct.pack("<I", t.ndim) + struct.pack(f"<{t.ndim}Q", *t.shape[::-1])
        out += struct.pack("<IQ", _kind(t), offset)
        offset += -(-t.nbytes // ALIGN) * ALIGN
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(out + bytes(-len(out) % ALIGN))
            for _, t in tensors:
                data = _bytes(t)
                f.write(data)
                f.write(bytes(-len(data) % ALIGN))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
