"""The notes extraction takes from lines of your own, one turn a line, and why it dropped the rest:
a quick look at what a rule change does to a sentence, without a model or a file.

    printf 'I quit smoking last spring.\\n我下周去杭州出差。\\n' | .venv/bin/python bench/notes_of.py --speaker Wren

Each line is a turn of --speaker (a user) at --ts, read alone. With --model the bundled model
writes its notes too (slow: load it once per run); without it, the rules alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memdb import codec  # noqa: E402
from memdb.extraction.extract import extract  # noqa: E402
from memdb.extraction.records import Turn  # noqa: E402
from memdb.settings import Settings  # noqa: E402


class NoModel:
    """A model that writes no note: the rules' notes alone."""

    name, sha256 = "no-model", "0" * 64

    def complete(self, *args, **kwargs) -> str:
        return '{"a": []}'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--speaker", default="Wren")
    parser.add_argument("--ts", default="2026-06-10T10:00:00")
    parser.add_argument("--model", action="store_true", help="the bundled model writes notes too")
    args = parser.parse_args()
    llm = NoModel()
    if args.model:
        from memdb.models import llama

        llm = llama.load_llm(None, threads=2)
    for i, line in enumerate(filter(None, (raw.strip() for raw in sys.stdin)), start=1):
        turn = Turn(id=i, user="u", session="s", role="user", speaker=args.speaker, content=line, ts=args.ts)
        candidates, outcomes = extract([turn], llm, settings=Settings())
        outcome = outcomes[i]
        print(line)
        for cand in candidates:
            print(f"  {cand.record['kind']:10} {codec.canonical_text(cand.record)}")
        if outcome.reason or outcome.dropped:
            print(f"  ({outcome.state}: {outcome.reason or ''} {dict(outcome.dropped) or ''})".replace("  )", ")"))


if __name__ == "__main__":
    main()
