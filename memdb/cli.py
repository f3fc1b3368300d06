"""The `memdb` command: argument parsing and printing only; the work is the public API's."""

from __future__ import annotations

import argparse
import importlib.resources
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import memdb

from .errors import InvalidInput, MemdbError


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        return args.run(args) or 0
    except MemdbError as exc:
        print(f"memdb: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memdb", description="Long-term memory for AI agents in one SQLite file.")
    sub = parser.add_subparsers(required=True, metavar="command")

    def command(name: str, run, help: str, *, user: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("db", help="the memdb file")
        if user:
            p.add_argument("--user", "-u", required=True, help="whose memory")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.add_argument("--embedder", default="auto", help="'auto' (the file's own, else the default), 'default', 'minilm', a .gguf path, or 'none'")
        p.add_argument("--llm", default=None, help="extraction model: an instruct .gguf, or the URL of an OpenAI-compatible server")
        p.add_argument("--threads", type=int, default=None)
        p.set_defaults(run=run)
        return p

    p = command("add", _add, "store messages (JSON list or JSON Lines) and extract atoms")
    p.add_argument("file", nargs="?", default="-", help="messages file, or - for stdin")
    p.add_argument("--session", "-s", default="default")
    p.add_argument("--defer", action="store_true", help="store only; extract later")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")

    p = command("extract", _extract, "extract atoms from pending turns", user=False)
    p.add_argument("--user", "-u", default=None)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--quiet", "-q", action="store_true")

    for name, run, help in (("search", _search, "find what matters for a query"),
                            ("context", _context, "the prompt-ready memory block for a query")):
        p = command(name, run, help)
        p.add_argument("query")
        p.add_argument("-k", type=int, default=10)
        p.add_argument("--layer", default="both", choices=("atoms", "turns", "both"))
        p.add_argument("--budget", type=int, default=400)

    command("profile", _profile, "the user's attribute card")
    p = command("events", _events, "the user's events in time order")
    p.add_argument("--since")
    p.add_argument("--until")

    p = command("stats", _stats, "counts, sizes and token figures", user=False)
    p.add_argument("--user", "-u", default=None)

    p = command("show", _show, "an atom or a turn with its sources", user=False)
    p.add_argument("what", choices=("atom", "turn"))
    p.add_argument("id", type=int)

    p = command("forget", _forget, "delete a user, an atom or a turn, with what derives from it", user=False)
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--user", "-u")
    group.add_argument("--atom", type=int)
    group.add_argument("--turn", type=int)

    p = command("export", _export, "everything held for a user, as JSON Lines")
    p.add_argument("--pairs", action="store_true",
                   help="instead: (turn, preceding turns, the atoms kept from it), to train an extractor on")
    p = command("reembed", _reembed, "rebuild every vector with another embedder", user=False)
    p.add_argument("--to", required=True, help="'default' (multilingual-e5-small), 'minilm' or a .gguf embedding model")

    p = sub.add_parser("demo", help="build a demo file from the bundled sample conversation")
    p.add_argument("db", nargs="?", default="demo.db")
    p.add_argument("--llm", default=None)
    p.add_argument("--threads", type=int, default=None)
    p.set_defaults(run=_demo, json=False, embedder="auto")
    return parser


def _open(args: argparse.Namespace, **kw: Any) -> memdb.Memory:
    embedder = None if args.embedder == "none" else args.embedder
    # One command, one search: loading a large user's vectors into memory (cache.py) would
    # cost more than the one vec0 KNN it replaces.
    settings = memdb.Settings(vector_copy_mb=0)
    return memdb.open(args.db, embedder=embedder, llm=args.llm, threads=args.threads,
                      settings=settings, **kw)


def _out(args: argparse.Namespace, data: Any, human: str) -> None:
    print(json.dumps(data, ensure_ascii=False, default=str, indent=None) if args.json else human)


# ---------------------------------------------------------------- commands


def _add(args: argparse.Namespace) -> None:
    messages = _read_messages(args.file)
    with _open(args, extract="defer") as mem:
        ids = mem.add(messages, user=args.user, session=args.session)
        counts = {} if args.defer else mem.extract(turn_ids=ids, progress=_progress(args, "extract"))
    _out(args, {"turn_ids": ids, **counts},
         f"stored {len(ids)} turns ({ids[0]}..{ids[-1]})" + (f"; {_counts(counts)}" if counts else ""))


def _extract(args: argparse.Namespace) -> None:
    with _open(args, extract="defer") as mem:
        counts = mem.extract(user=args.user, limit=args.limit, progress=_progress(args, "extract"))
    _out(args, counts, _counts(counts))


def _search(args: argparse.Namespace) -> None:
    with _open(args) as mem:
        hits = mem.search(args.query, user=args.user, k=args.k, layer=args.layer)
    lines = [f"{h.score:6.3f}  {h.layer:4} #{h.id:<6} {(h.ts or '')[:10]}  {h.text[:120]}" for h in hits]
    _out(args, [h.__dict__ for h in hits], "\n".join(lines) or "(nothing found)")


def _context(args: argparse.Namespace) -> None:
    with _open(args) as mem:
        block = mem.context(args.query, user=args.user, budget=args.budget, layer=args.layer)
    _out(args, {"context": block}, block or "(nothing found)")


def _profile(args: argparse.Namespace) -> None:
    with _open(args) as mem:
        atoms = mem.profile(args.user)
    _out(args, [a.__dict__ for a in atoms], "\n".join(f"{a.kind:10} {a.text}" for a in atoms) or "(empty)")


def _events(args: argparse.Namespace) -> None:
    with _open(args) as mem:
        atoms = mem.events(args.user, since=args.since, until=args.until)
    _out(args, [a.__dict__ for a in atoms],
         "\n".join(f"{(a.valid_from or '')[:10]}  {a.text}" for a in atoms) or "(no events)")


def _stats(args: argparse.Namespace) -> None:
    with _open(args) as mem:
        stats = mem.stats(user=args.user)
    _out(args, stats, "\n".join(f"{k:18} {v}" for k, v in stats.items()))


def _show(args: argparse.Namespace) -> None:
    with _open(args) as mem:
        if args.what == "atom":
            atom = mem.get(args.id)
            turns = mem.turns(atom.turn_ids)
            data = {**atom.__dict__, "sources": turns}
            human = [f"atom #{atom.id} [{atom.kind}, {atom.status}] {atom.text}",
                     f"  confidence {atom.confidence:.2f}, seen {atom.seen}×, {atom.first_seen} … {atom.last_seen}",
                     f"  record {json.dumps(atom.record, ensure_ascii=False)}"]
            if atom.superseded_by:
                human.append(f"  superseded by #{atom.superseded_by}")
        else:
            turns = mem.turns([args.id])
            if not turns:
                raise memdb.NotFound(f"no turn with id {args.id}")
            data, human = turns[0], []
    human += [f"  turn #{t['id']} {t['ts']} {t['speaker'] or t['role']}: {t['content']}" for t in turns]
    _out(args, data, "\n".join(human))


def _forget(args: argparse.Namespace) -> None:
    with _open(args) as mem:
        removed = mem.forget(user=args.user, atom_id=args.atom, turn_id=args.turn)
    _out(args, removed, f"removed {removed['turns']} turns and {removed['atoms']} atoms")


def _export(args: argparse.Namespace) -> None:
    with _open(args) as mem:
        for row in (mem.pairs(args.user) if args.pairs else mem.export(args.user)):
            print(json.dumps(row, ensure_ascii=False, default=str))


def _reembed(args: argparse.Namespace) -> None:
    with memdb.open(args.db, embedder=None, extract="defer", threads=args.threads) as mem:
        n = mem.reembed(None if args.to == "none" else args.to)
    _out(args, {"vectors": n}, f"rebuilt {n} vectors with {args.to}")


def _demo(args: argparse.Namespace) -> None:
    path = Path(args.db)
    if path.exists():
        raise InvalidInput(f"{path} exists; remove it or name another file")
    sample = importlib.resources.files("memdb").joinpath("data/sample.json").read_text(encoding="utf-8")
    conversations = json.loads(sample)
    with memdb.open(path, llm=args.llm, threads=args.threads, extract="defer") as mem:
        for conv in conversations:
            mem.add(conv["messages"], user=conv["user"], session=conv["session"])
        print(f"stored {mem.stats()['turns']} turns in {path}; extracting with the local model…")
        counts = mem.extract(progress=_progress(args, "extract"))
        print(_counts(counts))
        for conv in conversations:
            for query in conv["queries"]:
                print(f"\n[{conv['user']}] search: {query}")
                for h in mem.search(query, user=conv["user"], k=3):
                    print(f"  {h.score:5.2f} {h.layer:4} {h.text[:100]}")
                print(f"[{conv['user']}] context(budget=120):")
                print("  " + mem.context(query, user=conv["user"], budget=120).replace("\n", "\n  "))
    print(f"\ninspect it: sqlite3 {path} 'select id, kind, status, text from atoms_v'")


# ---------------------------------------------------------------- helpers


def _read_messages(source: str) -> list[dict]:
    raw = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    raw = raw.strip()
    if not raw:
        raise InvalidInput(f"no messages in {source}")
    try:
        return json.loads(raw) if raw.startswith("[") else [json.loads(line) for line in raw.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{source} is neither a JSON list nor JSON Lines: {exc}") from None


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "nothing pending"


def _progress(args: argparse.Namespace, label: str):
    """A one-line progress bar with turns/s and ETA, only on a terminal and without --quiet."""
    if getattr(args, "quiet", False) or getattr(args, "json", False) or not sys.stderr.isatty():
        return None
    start = time.monotonic()

    def show(done: int, total: int) -> None:
        elapsed = time.monotonic() - start
        rate = done / elapsed if elapsed else 0.0
        eta = (total - done) / rate if rate else 0.0
        bar = "#" * int(30 * done / total)
        end = "\n" if done >= total else ""
        print(f"\r{label} [{bar:30}] {done}/{total} {rate:4.1f} turns/s ETA {eta:5.0f}s", end=end, file=sys.stderr)

    return show
