"""memdb's greedy grammar sampler (memdb.models.llama._greedy: the grammar asked about the best
token only, through llama.cpp's C API and private attributes of llama-cpp-python) beside
llama-cpp-python's public one (create_completion with the grammar, temperature 0), on the
bundled extraction model: the same prompts, the same replies, seconds per generated token.

    flock /tmp/memdb-cpu.lock .venv/bin/python bench/llama_sampler.py   # -> bench/results/llama_sampler.json

Prompts: extraction prompts (memdb.extraction.prompt) of invented turns, without the reply's
prefill (the public API cannot feed forced tokens to the grammar), 2 threads. The two samplers
take turns block by block (every prompt once, in order, so each call reuses the fixed prompt
prefix of the one before, as in extraction), rounds repeated; medians over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memdb.extraction import prompt, records  # noqa: E402
from memdb.models import llama  # noqa: E402

OUT = ROOT / "bench" / "results" / "llama_sampler.json"
TURNS = [  # invented
    "I adopted a puppy last week, a beagle called Pepper.",
    "My sister moved to Denver in March and works at a bakery there.",
    "We switched the backend from Python to Rust in the spring.",
    "I can't eat shellfish, I found out I'm allergic last year.",
    "我下个月要去杭州开会，顺便看看老同学。",
    "Our team meets every Tuesday at ten to plan the sprint.",
    "I gave up coffee in January and drink green tea now.",
    "我女儿今年九月开始上小学了。",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    llm = llama.load_llm(threads=args.threads)
    model = llm.model()
    grammar = llm._grammar(prompt.output_schema(1))
    prompts = []
    for i, content in enumerate(TURNS):
        turn = records.Turn(id=i + 1, user="u", session="s", role="user", speaker="Ivo", content=content,
                            ts="2026-03-02T10:00:00")
        messages = prompt.build_messages([turn], [], [turn])[:-1]  # no prefill: both generate it all
        prompts.append(model.tokenize(llama._render_chatml(messages).encode(), add_bos=True, special=True))

    def ours(tokens: list[int]) -> tuple[str, int]:
        return llama._greedy(model, tokens, llama._grammar_text(grammar), args.max_tokens, 0)

    def public(tokens: list[int]) -> tuple[str, int]:
        out = model.create_completion(tokens, grammar=grammar, temperature=0.0, max_tokens=args.max_tokens,
                                      stop=["<|im_end|>"])
        return out["choices"][0]["text"], out["usage"]["completion_tokens"]

    samplers = {"memdb lazy grammar (private API)": ours, "create_completion (public API)": public}
    replies: dict[str, list[str]] = {name: [] for name in samplers}
    per_token: dict[str, list[float]] = {name: [] for name in samplers}
    per_call: dict[str, list[float]] = {name: [] for name in samplers}
    for tokens in prompts[:2]:  # warm up: the model's pages, the prompt prefix
        for fn in samplers.values():
            fn(tokens)
    for _ in range(args.rounds):
        for name, fn in samplers.items():
            seconds, generated = 0.0, 0
            replies[name] = []
            for tokens in prompts:
                start = time.perf_counter()
                text, n = fn(tokens)
                elapsed = time.perf_counter() - start
                seconds += elapsed
                generated += n
                per_call[name].append(elapsed)
                replies[name].append(text)
            per_token[name].append(seconds / max(generated, 1))
    names = list(samplers)
    result = {
        "command": "python " + " ".join(sys.argv), "threads": args.threads, "llama_cpp_python": _version(),
        "loadavg_at_end": os.getloadavg(), "prompts": len(prompts), "rounds": args.rounds,
        "ms_per_generated_token": {n: round(1000 * statistics.median(v), 2) for n, v in per_token.items()},
        "ms_per_call_p50": {n: round(1000 * statistics.median(v), 1) for n, v in per_call.items()},
        "public / private": round(statistics.median(per_token[names[1]]) / statistics.median(per_token[names[0]]), 3),
        "same_replies": sum(a == b for a, b in zip(replies[names[0]], replies[names[1]])),
    }
    print(json.dumps(result, indent=1))
    args.out.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def _version() -> str:
    import llama_cpp

    return str(getattr(llama_cpp, "__version__", "?"))


if __name__ == "__main__":
    main()
