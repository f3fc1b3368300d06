"""The README's sample of atoms and of a context block, regenerated from the bundled sample
conversation with the bundled models (what `memdb demo` builds), so the README shows what this
code makes, not what someone once pasted.

    flock /tmp/memdb-cpu.lock .venv/bin/python bench/readme_sample.py           # print the block
    flock /tmp/memdb-cpu.lock .venv/bin/python bench/readme_sample.py --write   # replace it in README.md

The block sits between the markers START and END below; everything between them is rewritten.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402

START = "<!-- sample: written by bench/readme_sample.py; edit that script, not this block -->"
END = "<!-- /sample -->"
USER, QUERY, BUDGET = "bob", "What should I avoid when cooking for Bob?", 150


def block() -> str:
    sample = json.loads((ROOT / "memdb" / "data" / "sample.json").read_text(encoding="utf-8"))
    conv = next(c for c in sample if c["user"] == USER)
    with tempfile.TemporaryDirectory() as folder, memdb.open(Path(folder) / "sample.db", user=USER) as mem:
        mem.add(conv["messages"], session=conv["session"])
        atoms = [a for a in mem.export() if a["type"] == "atom" and a["status"] != "superseded"]
        context = mem.context(QUERY, budget=BUDGET)
        llm = mem.stats()["llm"]
    said = "\n".join(f"{m['role']:9}  {m['content']}" for m in conv["messages"])
    rows = "\n".join(f"{a['kind']:10}  {a['text']:60}  turns {','.join(map(str, a['turn_ids']))}" for a in atoms)
    return "\n".join([
        START,
        f"What {USER} said (the bundled sample, `memdb/data/sample.json`):",
        "", "```text", said, "```", "",
        f"The atoms memdb kept ({len(atoms)}, extracted by {llm}; `select kind, text, turn_ids from atoms_v`):",
        "", "```text", rows, "```", "",
        f"`mem.context({QUERY!r}, budget={BUDGET})`:",
        "", "```text", context, "```",
        END,
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="replace the block in README.md")
    args = parser.parse_args()
    text = block()
    if not args.write:
        print(text)
        return
    readme = ROOT / "README.md"
    current = readme.read_text(encoding="utf-8")
    if START not in current or END not in current:
        raise SystemExit(f"README.md has no block between {START!r} and {END!r}")
    head, rest = current.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(head + text + tail, encoding="utf-8")
    print(f"wrote the sample block into {readme}")


if __name__ == "__main__":
    main()
