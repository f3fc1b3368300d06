"""llama.cpp in this process: the one adapter memdb runs GGUF models through.

`LlamaLLM` is the extraction model: ChatML rendered by hand so identical prompt prefixes stay
byte-identical (llama.cpp keeps them in the KV cache), greedy decoding under a GBNF grammar
checked lazily, and llama.cpp's own counters for measurement. One model call at a time per
process (`_CALL_LOCK`): two llama.cpp contexts on 2 cores ran more than 10x slower than one.
`import_llama` is the one place llama_cpp is imported, so its thread policy and log routing
are set once for every model, extraction and embedding alike; `new_llama` the one place a model
is loaded, so every load gets the same model parameters (`extra_buffers`).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import text
from ..errors import ModelError
from . import assets, loaded

log = logging.getLogger("memdb")

_CALL_LOCK = threading.Lock()      # one model call at a time in this process
_LOAD_LOCK = threading.Lock()
_PARAMS_LOCK = threading.Lock()    # one load at a time while the default parameters are changed
_LOG_CALLBACK: Any = None          # kept referenced: llama.cpp calls it from C


def _route_llama_logs(llama_cpp: Any) -> None:
    """Send llama.cpp's own log lines to the "memdb" logger at debug level, not the terminal
    (verbose=False alone misses some). Process-wide, so installed once for every model."""
    global _LOG_CALLBACK
    if _LOG_CALLBACK is not None:
        return

    @llama_cpp.llama_log_callback
    def to_logging(level: int, message: bytes, user_data: ctypes.c_void_p) -> None:
        log.debug("llama.cpp: %s", message.decode("utf-8", "replace").rstrip())

    llama_cpp.llama_log_set(to_logging, ctypes.c_void_p(0))
    _LOG_CALLBACK = to_logging


def import_llama() -> Any:
    """llama_cpp, imported once with memdb's thread policy and log routing (ModelError if missing)."""
    # llama.cpp's OpenMP threads spin while waiting by default; on a small machine shared with the
    # caller's own work that spinning made generation 3-5x slower in our measurements. Passive
    # waiting costs little when the machine is idle. Only effective before the library loads.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import llama_cpp
    except ImportError as exc:
        raise ModelError(f"llama-cpp-python is not installed ({exc}); install it with: "
                         f"pip install llama-cpp-python==0.3.36") from exc
    _route_llama_logs(llama_cpp)
    return llama_cpp


_OPENED: list[Any] = []  # every Llama made here, closed at exit

# CPU flags (Linux /proc/cpuinfo names) and llama.cpp system-info features that mean Intel AMX.
# A llama.cpp built with GGML_NATIVE on such a CPU puts weights in its AMX buffer type, and its
# AMX matmul segfaults on Q4_K_M models (ggml-org/llama.cpp issue 20824): memdb's own model.
AMX_CPU_FLAGS = ("amx_tile", "amx_int8", "amx_bf16")
AMX_SYSTEM_INFO = ("AMX_INT8 = 1",)


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU's feature flags as the kernel names them (empty where /proc/cpuinfo is absent)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def system_info() -> str:
    """What llama.cpp says it was built with ("AVX2 = 1 | AMX_INT8 = 1 | ..."), "" if unknown."""
    try:
        info = import_llama().llama_print_system_info()
        return info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    except Exception:  # only a hint: the CPU flags decide too
        return ""


def extra_buffers(setting: bool | None = None, *, flags: set[str] | None = None,
                  info: str | None = None) -> tuple[bool, str]:
    """Whether llama.cpp may use its extra buffer types (weight repacking, AMX), and why.

    setting (Settings.model_extra_buffers) forces it; None decides: off where the CPU reports
    AMX or llama.cpp was built with it (a Windows machine has no /proc/cpuinfo to ask), on
    elsewhere. Not off everywhere: on an AVX-512 CPU without AMX llama.cpp repacks 28 MiB of the
    bundled model (its Q4_K layers), and prompt evaluation measured 143 vs 132 tokens/s with and
    without (medians of 3 alternating rounds on a shared, noisy machine; extraction per turn
    within the noise): no loss was shown for turning it off, nor the absence of one
    (bench/results/extra_buffers.json, model_worker.json)."""
    if setting is not None:
        return bool(setting), f"extra buffer types {'on' if setting else 'off'} (set in Settings)"
    flags = cpu_flags() if flags is None else flags
    found = sorted(flags & set(AMX_CPU_FLAGS))
    if not found:
        info = system_info() if info is None else info
        found = [f for f in AMX_SYSTEM_INFO if f in info]
    if found:
        return False, f"extra buffer types off: the CPU reports AMX ({', '.join(found)}), whose llama.cpp kernels crash"
    return True, "extra buffer types on (no AMX)"


@contextlib.contextmanager
def _model_params(**fields: Any) -> Iterator[None]:
    """llama-cpp-python's Llama takes no argument for some llama_model_params fields
    (use_extra_bufts): while a model loads, its default parameters carry them. Only new_llama
    loads, one load at a time (_PARAMS_LOCK)."""
    from llama_cpp import llama_cpp as capi

    original = capi.llama_model_default_params

    def defaults() -> Any:
        params = original()
        for name, value in fields.items():
            setattr(params, name, value)
        return params

    capi.llama_model_default_params = defaults
    try:
        yield
    finally:
        capi.llama_model_default_params = original


def new_llama(path: Path, *, extra_bufts: bool | None = None, **params: Any) -> Any:
    """A llama_cpp.Llama for the GGUF at path (raises what llama_cpp raises), closed at
    interpreter exit: freed during teardown instead, llama-cpp-python prints a traceback.
    extra_bufts: Settings.model_extra_buffers (None: off where the CPU has AMX, see extra_buffers)."""
    llama_cpp = import_llama()
    use, why = extra_buffers(extra_bufts)
    log.debug("memdb: loading %s: %s", Path(path).name, why)
    with _PARAMS_LOCK, _model_params(use_extra_bufts=use):
        llama = llama_cpp.Llama(model_path=str(path), verbose=False, **params)
    _OPENED.append(llama)
    return llama


def close_llama(llama: Any) -> None:
    """Free a Llama made by new_llama now; freeing never fails the caller."""
    if llama in _OPENED:
        _OPENED.remove(llama)
    try:
        llama.close()
    except Exception as exc:
        log.debug("memdb: closing a llama.cpp model: %s", exc)


@atexit.register
def _close_all() -> None:
    while _OPENED:
        close_llama(_OPENED[-1])


class LlamaLLM:
    """A GGUF run by llama-cpp-python in this process, loaded on first use.

    The Llama object is kept for the life of the process, and with it the KV cache of the last
    prompt: each call keeps the longest token prefix it shares with the previous one, so the fixed
    system prompt and example that open every extraction prompt are evaluated once, not once per
    call. `stats` counts prompt tokens, how many of them were reused, and llama.cpp's own
    counters of tokens actually evaluated (prompt_eval_tokens), which is how reuse is verified.
    """

    def __init__(self, path: Path | None, *, name: str, threads: int, n_ctx: int = 4096,
                 expected_sha256: str | None = None, extra_bufts: bool | None = None) -> None:
        self.path = path                 # None: the default model, assembled on first load
        self.name = name
        self.threads = threads
        self.extra_bufts = extra_bufts   # Settings.model_extra_buffers (None: decided by the CPU)
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
            self.path = assets.default_model_path()
        if not self.path.is_file():
            raise ModelError(f"extraction model {self.path} does not exist; pass the path of an instruct "
                             f"GGUF (load_llm('/path/model.gguf') or MEMDB_LLM) or unset it for the default")
        if self._sha256 is None:
            if self._expected:
                assets.verify_default(self.path)
                self._sha256 = self._expected
            else:
                self._sha256 = assets.file_sha256(self.path)
        return self.path, self._sha256

    def load(self) -> None:
        """Load the weights now (raises ModelError): a model that cannot run fails early."""
        self.model()

    def model(self) -> Any:
        """The loaded llama_cpp.Llama (loads it on the first call; raises ModelError)."""
        with _LOAD_LOCK:
            if self._llama is None:
                path, _ = self._resolve_file()
                started = time.perf_counter()
                try:
                    self._llama = new_llama(path, n_ctx=self.n_ctx, n_threads=self.threads,
                                            n_threads_batch=self.threads, n_batch=512,
                                            extra_bufts=self.extra_bufts)
                except ModelError:
                    raise
                except Exception as exc:
                    raise ModelError(f"cannot load extraction model {path}: {exc}") from exc
                log.info("memdb: loaded %s in %.1fs", path.name, time.perf_counter() - started)
            return self._llama

    def close(self) -> None:
        """Free the model now (it loads again on the next call)."""
        for attr in ("_llama", "_vocab"):
            model = getattr(self, attr)
            setattr(self, attr, None)
            if model is not None:
                close_llama(model)

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
                try:
                    inside = _internals(llama)
                    self.stats["reused_tokens"] += _common_prefix(inside.held(), tokens)
                    reply, generated = _greedy(llama, tokens, _grammar_text(grammar), max_tokens, len(forced), inside)
                    reply = prefill + reply
                except _GrammarUnavailable as exc:  # llama-cpp-python's own sampler, without the prefill
                    log.debug("memdb: own sampler unavailable (%s); using create_completion", exc)
                    out = llama.create_completion(prompt=base, grammar=grammar, temperature=0.0,
                                                  max_tokens=max_tokens, stop=["<|im_end|>"])
                    reply, generated = out["choices"][0]["text"], out["usage"]["completion_tokens"]
                self.stats["prompt_tokens"] += len(tokens)
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
                    self._vocab = new_llama(self._resolve_file()[0], vocab_only=True)
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
    """memdb's sampler cannot run on this llama-cpp-python (a private attribute it reads is gone,
    or llama.cpp refused the grammar): the caller falls back to create_completion."""


@dataclass(frozen=True)
class _Internals:
    """What memdb's sampler needs of a llama_cpp.Llama that llama-cpp-python keeps private."""

    model: Any  # the llama_model pointer, for its vocabulary
    ctx: Any  # the llama_context pointer, for the logits and llama.cpp's counters
    held: Callable[[], list[int]]  # the tokens the KV cache holds now
    forget_after: Callable[[int], bool]  # drop the KV cache past a position (False: it could not)


def _internals(llama: Any) -> _Internals:
    """The one place memdb reads llama-cpp-python's private attributes (_model, _ctx,
    _input_ids): the version pinned in pyproject has them, and tests/test_llama_sampler.py pins
    what they give. Raises _GrammarUnavailable when they are gone, and the caller falls back to
    the public API (create_completion with the grammar)."""
    try:
        model, context = llama._model.model, llama._ctx
        if not hasattr(llama, "_input_ids"):  # a property cut at the tokens held: read at each held()
            raise AttributeError("_input_ids", name="_input_ids")
        return _Internals(model=model, ctx=context.ctx, held=lambda: list(llama._input_ids[: llama.n_tokens]),
                          forget_after=lambda keep: bool(context.kv_cache_seq_rm(-1, keep, -1)))
    except AttributeError as exc:
        raise _GrammarUnavailable(f"llama-cpp-python {_version()} has no {exc.name or exc}") from exc


def _grammar_text(grammar: Any) -> str:
    """A LlamaGrammar's GBNF text (kept private too; _GrammarUnavailable when gone)."""
    text = getattr(grammar, "_grammar", None)
    if not isinstance(text, str):
        raise _GrammarUnavailable(f"llama-cpp-python {_version()}'s LlamaGrammar keeps no GBNF text")
    return text


def _version() -> str:
    import llama_cpp

    return str(getattr(llama_cpp, "__version__", "?"))


def _greedy(llama: Any, tokens: list[int], grammar: str, max_tokens: int, forced: int,
            inside: _Internals | None = None) -> tuple[str, int]:
    """Greedy decoding under a GBNF grammar, checking the grammar lazily.

    llama-cpp-python's sampler runs the grammar over the whole 152k-token vocabulary at every
    step (bench/results/llama_sampler.json). Like llama.cpp's own common sampler, this takes
    the unconstrained best token, asks the grammar about that one token only, and runs the
    grammar over the whole vocabulary only when it is refused: the same tokens, far fewer
    checks. The last `forced` prompt tokens (an assistant prefill) are fed to the grammar first.
    The longest prefix shared with the previous call is kept in the KV cache, not re-read.
    """
    import llama_cpp
    import numpy as np

    inside = inside or _internals(llama)
    vocab = llama_cpp.llama_model_get_vocab(inside.model)
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
    if not sampler:
        raise _GrammarUnavailable("llama_sampler_init_grammar returned NULL")
    try:
        for token in tokens[len(tokens) - forced :] if forced else ():
            llama_cpp.llama_sampler_accept(sampler, token)
        keep = _common_prefix(inside.held(), tokens)
        if keep > 0 and inside.forget_after(keep):
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
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(inside.ctx, -1), shape=(n_vocab,))
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

        data = llama_cpp.llama_perf_context(_internals(llama).ctx)
        return {"prompt_eval_ms": data.t_p_eval_ms, "prompt_eval_tokens": data.n_p_eval,
                "eval_ms": data.t_eval_ms, "eval_tokens": data.n_eval}
    except Exception:  # counters are for measurement only
        return {}


def _common_prefix(held: list[int], tokens: list[int]) -> int:
    """How many leading tokens the previous evaluation already holds (what llama.cpp reuses)."""
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

def default_threads() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def load_llm(spec: str | None = None, *, threads: int | None = None,
             extra_bufts: bool | None = None) -> LlamaLLM:
    """The extraction model named by spec (a GGUF path), else $MEMDB_LLM, else the bundled default.

    Returns one wrapper per (model, threads, extra_bufts) per process; the weights load on the
    first call (extra_bufts: Settings.model_extra_buffers).
    Raises ModelError when the model cannot be found (the default's packages missing, a path that
    does not exist) — checked here, cheaply, so a misconfiguration shows up early.
    """
    spec = spec or os.environ.get("MEMDB_LLM") or None
    threads = threads or default_threads()

    def make() -> LlamaLLM:
        if spec is None:
            target = assets.cache_dir() / f"{assets.DEFAULT_MODEL_NAME}.gguf"
            if not target.is_file():
                assets.part_files()  # raises a clear ModelError when a part is missing
            return LlamaLLM(None, name=assets.DEFAULT_MODEL_NAME, threads=threads,
                            expected_sha256=assets.DEFAULT_MODEL_SHA256, extra_bufts=extra_bufts)
        path = Path(spec).expanduser()
        if not path.is_file():
            raise ModelError(f"extraction model {path} does not exist; pass the path of an instruct GGUF")
        return LlamaLLM(path, name=path.stem, threads=threads, extra_bufts=extra_bufts)

    return loaded.once("llama", (spec or "", threads, extra_bufts), make)


def _loaded_for(spec: str | None) -> LlamaLLM:
    """The wrapper already made for spec with any thread count (its tokenizer is the same), else a new one."""
    spec = spec or os.environ.get("MEMDB_LLM") or None
    for (known, _, _), llm in loaded.made("llama"):
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
