"""Write the bundled MiniLM as a GGUF BERT model that llama.cpp loads: test_embed checks the
GGUF embedder against the reference vectors with it, and bench/embed_speed.py compares memdb's
MiniLM with llama.cpp running the same weights.

    .venv/bin/python -m tests.minilm_gguf /tmp/minilm.gguf [--f16]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from memdb.models import assets, gguf, minilm


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
    metadata = gguf.bert_metadata(
        assets.MINILM_NAME, file_type=1 if f16 else 0, context=model.max_tokens, hidden=config["hidden_size"],
        ffn=config["intermediate_size"], layers=config["num_hidden_layers"], heads=config["num_attention_heads"],
        eps=config["layer_norm_eps"], tokenizer="bert",
    ) + [
        ("tokenizer.ggml.tokens", gguf.ARR, (gguf.STR, tokens)),
        ("tokenizer.ggml.token_type", gguf.ARR,
         (gguf.I32, [gguf.TOKEN_CONTROL if i in specials else gguf.TOKEN_NORMAL for i in range(len(tokens))])),
        ("tokenizer.ggml.token_type_count", gguf.U32, config["type_vocab_size"]),
        ("tokenizer.ggml.normalizer.lowercase", gguf.BOOL, tok.lower),
        ("tokenizer.ggml.normalizer.strip_accents", gguf.BOOL, tok.strip),
        ("tokenizer.ggml.unknown_token_id", gguf.U32, tok.unk),
        ("tokenizer.ggml.cls_token_id", gguf.U32, tok.cls),
        ("tokenizer.ggml.bos_token_id", gguf.U32, tok.cls),
        ("tokenizer.ggml.seperator_token_id", gguf.U32, tok.sep),  # sic: llama.cpp's spelling
        ("tokenizer.ggml.padding_token_id", gguf.U32, tok.vocab["[PAD]"]),
        ("tokenizer.ggml.mask_token_id", gguf.U32, tok.vocab["[MASK]"]),
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
    gguf.write(out, metadata, tensors)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--f16", action="store_true", help="2-D weights as float16")
    args = parser.parse_args()
    print(convert_to_gguf(args.out, f16=args.f16))
