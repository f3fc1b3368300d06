"""The pools a blind note rating samples from (issue 24): memdb's atoms and the reference notes.

    .venv/bin/python bench/rating_pool.py OUT_DIR --whole DIR --atoms-dir DIR [--memorybank DIR]

Writes OUT_DIR/en.jsonl and OUT_DIR/zh.jsonl (one {"text"} per distinct active atom) and
OUT_DIR/obs.json (the LoCoMo dev `observation` sentences of the sessions the atoms come from),
ready for `../shared/tools/note_rating.py prepare OUT --atoms en.jsonl --atoms-zh zh.jsonl
--observations obs.json`.
- English: the atoms of the dev gold files (`bench/atom_quality.py --atoms-dir DIR`:
  dev_locomo.jsonl, dev_dialogue_en.jsonl) and of the whole dev conversations
  (`bench/qa_prepare.py --db-dir DIR --build-only`: conv-*.db).
- Chinese: the zh dialogue's atoms (dev_dialogue_zh.jsonl) and as many of the MemoryBank-cn dev
  users' (`bench/memorybank_retrieval.py --built DIR`: *.db), drawn at random (--seed): the
  issue asks for the dialogue's notes, and the companion chats are what a held-out check reads.
- Reference: conv-26 sessions 1-4 and conv-30 sessions 1-3, the sessions the gold file labels.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import apsw

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
REFERENCE_SESSIONS = {"conv-26": range(1, 5), "conv-30": range(1, 4)}


def _db_texts(folder: Path) -> list[str]:
    texts = []
    for path in sorted(folder.glob("*.db")):
        db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        texts += [row[0] for row in db.execute("select text from atoms where status = 0 order by id")]
        db.close()
    return texts


def _jsonl_texts(path: Path) -> list[str]:
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [a["text"] for a in map(json.loads, filter(None, lines)) if a.get("status", "active") == "active"]


def _observations() -> list[str]:
    notes = []
    for conv in json.loads((DATA / "locomo_dev.json").read_text(encoding="utf-8")):
        for n in REFERENCE_SESSIONS.get(conv["sample_id"], ()):
            for said in conv["observation"].get(f"session_{n}_observation", {}).values():
                notes += [line[0] for line in said]
    return notes


def _write(path: Path, texts: list[str]) -> int:
    distinct = list(dict.fromkeys(t.strip() for t in texts if t.strip()))
    path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in distinct), encoding="utf-8")
    return len(distinct)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--whole", type=Path, required=True, help="folder of the whole dev conversations' files")
    parser.add_argument("--atoms-dir", type=Path, required=True, help="atoms written by bench/atom_quality.py")
    parser.add_argument("--memorybank", type=Path, default=None, help="folder of the MemoryBank-cn users' files")
    parser.add_argument("--seed", type=int, default=0, help="which MemoryBank-cn atoms join the Chinese pool")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    english = [*_jsonl_texts(args.atoms_dir / "dev_locomo.jsonl"),
               *_jsonl_texts(args.atoms_dir / "dev_dialogue_en.jsonl"), *_db_texts(args.whole)]
    dialogue = list(dict.fromkeys(_jsonl_texts(args.atoms_dir / "dev_dialogue_zh.jsonl")))
    companion = list(dict.fromkeys(_db_texts(args.memorybank))) if args.memorybank else []
    chinese = dialogue + random.Random(args.seed).sample(companion, min(len(dialogue), len(companion)))
    counts = {"en": _write(args.out / "en.jsonl", english), "zh": _write(args.out / "zh.jsonl", chinese)}
    (args.out / "obs.json").write_text(json.dumps(_observations(), ensure_ascii=False, indent=1), encoding="utf-8")
    print(json.dumps(counts | {"reference": len(_observations())}))


if __name__ == "__main__":
    main()
