"""Write the bundled MiniLM as a GGUF BERT model that llama.cpp loads (tests and benches use it
to compare memdb's numpy MiniLM with llama.cpp running the same weights).

    .venv/bin/python bench/minilm_gguf.py /tmp/minilm.gguf [--f16]
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memdb.models import assets, minilm  # noqa: E402

_GGUF_ALIGN = 32
_GGUF_U32, _GGUF_I32, _GGUF_F32, _GGUF_BOOL, _GGUF_STR, _GGUF_ARR = 4, 5, 6, 7, 8, 9
_GGML_F32, _GGML_F16 = 0, 1
_TOKEN_NORMAL, _TOKEN_CONTROL = 1, 3


def _gguf_str(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _gguf_value(kind: int, value: Any) -> bytes:
    if kind == _GGUF_U32:
        return struct.pack("<I", value)
    if kind == _GGUF_I32:
        return struct.pack("<i", value)
    if kind == _GGUF_F32:
        return struct.pack("<f", value)
    if kind == _GGUF_BOOL:
        return struct.pack("<?", value)
    if kind == _GGUF_STR:
        return _gguf_str(value)
    item_kind, items = value
    head = struct.pack("<IQ", item_kind, len(items))
    if item_kind == _GGUF_I32:
        return head + np.asarray(items, dtype="<i4").tobytes()
    return head + b"".join(_gguf_value(item_kind, x) for x in items)


def write_gguf(path: Path, metadata: list[tuple[str, int, Any]], tensors: list[tuple[str, np.ndarray]]) -> None:
    """Write a GGUF v3 file: header, typed key/values, tensor infos, 32-byte aligned data.

    metadata holds (key, gguf type, value), arrays as (key, _GGUF_ARR, (item type, items));
    tensors are float32 or float16 numpy arrays, their ggml shape being the numpy shape reversed.
    """
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata)))
    for key, kind, value in metadata:
        out += _gguf_str(key) + struct.pack("<I", kind) + _gguf_value(kind, value)
    offset = 0
    for name, arr in tensors:
        kind = _GGML_F16 if arr.dtype == np.float16 else _GGML_F32
        out += _gguf_str(name) + struct.pack("<I", arr.ndim) + struct.pack(f"<{arr.ndim}Q", *arr.shape[::-1])
        out += struct.pack("<IQ", kind, offset)
        offset += -(-arr.nbytes // _GGUF_ALIGN) * _GGUF_ALIGN
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(out + bytes(-len(out) % _GGUF_ALIGN))
        for _, arr in tensors:
            data = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
            f.write(data + bytes(-len(data) % _GGUF_ALIGN))
    os.replace(tmp, path)


def convert_to_gguf(out_path: str | os.PathLike[str], *, f16: bool = False) -> Path:
    """Write the bundled MiniLM as a GGUF BERT model (mean pooling) that llama.cpp loads.

    Names and keys follow llama.cpp's BERT loader; vocab entries use its "phantom space"
    convention (word starts get U+2581, "##" continuations lose the prefix). The position
    table is cut to max_seq_length (256) so llama.cpp truncates where sentence-transformers does.
    """
    folder = assets.model_dir()
    model = minilm.bert_model()
    config = json.loads((folder / "config.json").read_text())
    t = {k.removeprefix("bert."): v for k, v in minilm.read_safetensors(folder / "model.safetensors").items()}
    tok = model.tokenizer
    specials = tok.special_ids
    tokens = [s if i in specials else (s[2:] if s.startswith("##") else "\u2581" + s) for i, s in enumerate(tok.id_to_token)]
    arch = "bert"
    metadata: list[tuple[str, int, Any]] = [
        ("general.architecture", _GGUF_STR, arch),
        ("general.name", _GGUF_STR, assets.MINILM_NAME),
        ("general.file_type", _GGUF_U32, 1 if f16 else 0),
        (f"{arch}.context_length", _GGUF_U32, model.max_tokens),
        (f"{arch}.embedding_length", _GGUF_U32, config["hidden_size"]),
        (f"{arch}.feed_forward_length", _GGUF_U32, config["intermediate_size"]),
        (f"{arch}.block_count", _GGUF_U32, config["num_hidden_layers"]),
        (f"{arch}.attention.head_count", _GGUF_U32, config["num_attention_heads"]),
        (f"{arch}.attention.layer_norm_epsilon", _GGUF_F32, config["layer_norm_eps"]),
        (f"{arch}.attention.causal", _GGUF_BOOL, False),
        (f"{arch}.pooling_type", _GGUF_U32, 1),  # mean
        ("tokenizer.ggml.model", _GGUF_STR, "bert"),
        ("tokenizer.ggml.tokens", _GGUF_ARR, (_GGUF_STR, tokens)),
        ("tokenizer.ggml.token_type", _GGUF_ARR,
         (_GGUF_I32, [_TOKEN_CONTROL if i in specials else _TOKEN_NORMAL for i in range(len(tokens))])),
        ("tokenizer.ggml.token_type_count", _GGUF_U32, config["type_vocab_size"]),
        ("tokenizer.ggml.normalizer.lowercase", _GGUF_BOOL, tok.lower),
        ("tokenizer.ggml.normalizer.strip_accents", _GGUF_BOOL, tok.strip),
        ("tokenizer.ggml.unknown_token_id", _GGUF_U32, tok.unk),
        ("tokenizer.ggml.cls_token_id", _GGUF_U32, tok.cls),
        ("tokenizer.ggml.bos_token_id", _GGUF_U32, tok.cls),
        ("tokenizer.ggml.seperator_token_id", _GGUF_U32, tok.sep),  # sic: llama.cpp's spelling
        ("tokenizer.ggml.padding_token_id", _GGUF_U32, tok.vocab["[PAD]"]),
        ("tokenizer.ggml.mask_token_id", _GGUF_U32, tok.vocab["[MASK]"]),
    ]  # fmt: skip

    def mat(a: np.ndarray) -> np.ndarray:  # 2-D weights may be f16; norms and biases stay f32
        return np.asarray(a, dtype=np.float16 if f16 else np.float32)

    def f32(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.float32)

    tensors = [
        ("token_embd.weight", mat(t["embeddings.word_embeddings.weight"])),
        ("token_types.weight", f32(t["embeddings.token_type_embeddings.weight"])),
        ("position_embd.weight", f32(t["embeddings.position_embeddings.weight"][: model.max_tokens])),
        ("token_embd_norm.weight", f32(t["embeddings.LayerNorm.weight"])),
        ("token_embd_norm.bias", f32(t["embeddings.LayerNorm.bias"])),
    ]
    names = {
        "attn_q": "attention.self.query", "attn_k": "attention.self.key", "attn_v": "attention.self.value",
        "attn_output": "attention.output.dense", "attn_output_norm": "attention.output.LayerNorm",
        "ffn_up": "intermediate.dense", "ffn_down": "output.dense", "layer_output_norm": "output.LayerNorm",
    }  # fmt: skip
    for i in range(config["num_hidden_layers"]):
        for gg, hf in names.items():
            w, b = t[f"encoder.layer.{i}.{hf}.weight"], t[f"encoder.layer.{i}.{hf}.bias"]
            tensors.append((f"blk.{i}.{gg}.weight", mat(w) if w.ndim == 2 else f32(w)))
            tensors.append((f"blk.{i}.{gg}.bias", f32(b)))
    out = Path(out_path)
    write_gguf(out, metadata, tensors)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--f16", action="store_true", help="2-D weights as float16")
    args = parser.parse_args()
    print(convert_to_gguf(args.out, f16=args.f16))
