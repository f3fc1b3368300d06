"""The `memdb` command: argument parsing and printing only; the work is the public API's."""

from __future__ import annotations

import argparse
import errno
import importlib.resources
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import memdb

from .db.connection import NeedsUpgrade
from .errors import InvalidInput, MemdbError

MAX_ID = 2**63 - 1  # SQLite's largest rowid: a larger id names no row and cannot be bound
MAX_JSON_BYTES = 1 << 30
# Commands that may create their file; for every other one a missing file is a mistake (a typo
# in the path), not a new memory: `forget nope.db` reporting "removed 0 turns" looked like success.
CREATES = ("add", "mcp", "demo")
# Commands that only read: their file is opened read-only, so they write nothing to it.
READ_ONLY = ("search", "context", "profile", "persona", "scenarios", "events", "show", "stats", "export", "users")
SIGPIPE_EXIT = 128 + 13  # what a shell reports for a writer killed by SIGPIPE


def main(argv: list[str] | None = None) -> int:
    _printable_streams()
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        code = args.run(args) or 0
        sys.stdout.flush()  # a write error shows here, not in Python's flush at exit
        return code
    except MemdbError as exc:
        print(f"memdb: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `memdb export ... | head`: the reader has all it wanted
        _silence_stdout()
        return SIGPIPE_EXIT
    except OSError as exc:  # stdout on a full disk (`> /dev/full`), a closed terminal
        writing = exc.errno in (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG, errno.EBADF)
        if writing:
            _silence_stdout()
        print(f"memdb: {'cannot write the output: ' if writing else ''}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _printable_streams() -> None:
    """Output in any terminal encoding: a character the encoding cannot show (PYTHONIOENCODING=
    ascii, a Windows code page) is written as an escape instead of raising mid-output."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (OSError, ValueError):
                pass


def _silence_stdout() -> None:
    # Python flushes stdout again at exit and would print a second BrokenPipeError there.
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # stdout is not a real file (a test's capture)
        pass


# ---------------------------------------------------------------- arguments


def _count(most: int) -> Callable[[str], int]:
    """An argparse type: an integer from 1 to most, refused with a usage error otherwise."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
        if not 1 <= number <= most:
            raise argparse.ArgumentTypeError(f"{value} is not from 1 to {most}")
        return number

    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse


ROW_ID = _count(MAX_ID)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memdb", description="Long-term memory for AI agents in one SQLite file.")
    parser.add_argument("--version", action="version", version=f"memdb {memdb.__version__}")
    parser.epilog = ("Bigger models: add, extract, context, persona, demo and mcp take --llm with an instruct .gguf "
                     "or the URL of an OpenAI-compatible server (llama-server, Ollama, LM Studio), and --llm-model "
                     "to name the server's model; $MEMDB_LLM and $MEMDB_LLM_MODEL do the same.")
    sub = parser.add_subparsers(required=True, metavar="command")

    def command(name: str, run: Callable, help: str, *, user: bool = True, embedder: bool = False,
                llm: bool = False, new_db: str | None = None, json_out: bool = True) -> argparse.ArgumentParser:
        """A subcommand; only the options that change what it does (the embedder for
        commands that embed, the model for those that extract or count its tokens)."""
        p = sub.add_parser(name, help=help, description=help)
        if new_db:  # a command that makes a new file names it, or takes this name
            p.add_argument("db", nargs="?", default=new_db, help=f"the file to create (default {new_db})")
        else:
            p.add_argument("db", help="the memdb file")
        if user:
            p.add_argument("--user", "-u", required=True, help="whose memory")
        if json_out:  # not mcp: it speaks JSON-RPC on stdout whatever --json says
            p.add_argument("--json", action="store_true", help="machine-readable output")
        if embedder:
            p.add_argument("--embedder", default="auto",
                           help="'auto' (the file's own, else the default), 'default', 'minilm', a .gguf path, or 'none'")
        if llm:
            p.add_argument("--llm", default=None,
                           help="extraction model: an instruct .gguf, or the URL of an OpenAI-compatible server")
            p.add_argument("--llm-model", default=os.environ.get("MEMDB_LLM_MODEL") or None,
                           help="the model to use on the --llm server (default $MEMDB_LLM_MODEL, else the "
                                "first the server lists), e.g. qwen2.5:7b")
        if embedder or llm:
            p.add_argument("--threads", type=_count(1024), default=None, help="CPU threads for the models")
        # (set_defaults would override the options' own defaults, so only for absent options)
        absent = {"embedder": not embedder, "llm": not llm, "llm_model": not llm, "threads": not (embedder or llm)}
        p.set_defaults(run=run, creates=name in CREATES, read_only=name in READ_ONLY, **{k: None for k, off in absent.items() if off})
        return p

    p = command("add", _add, "store messages (JSON list or JSON Lines) and extract atoms", embedder=True, llm=True)
    p.add_argument("file", nargs="?", default="-", help="messages file, or - for stdin")
    p.add_argument("--session", "-s", default="default", help="the conversation these messages belong to")
    p.add_argument("--defer", action="store_true", help="store only; extract later")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")

    p = command("extract", _extract, "extract atoms from pending turns", user=False, embedder=True, llm=True)
    p.add_argument("--user", "-u", default=None, help="only this user's turns")
    p.add_argument("--limit", type=_count(MAX_ID), default=None, help="extract at most this many turns")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")

    p = command("search", _search, "find what matters for a query", embedder=True)
    p.add_argument("query")
    p.add_argument("-k", type=_count(1000), default=10, help="how many hits at most (default 10)")
    p.add_argument("--layer", default="both", choices=("atoms", "turns", "both", "scenarios"), help="what to search")

    p = command("context", _context, "the prompt-ready memory block for a query", embedder=True, llm=True)
    p.add_argument("query")
    p.add_argument("-k", type=_count(1000), default=20, help="hits considered before the budget cuts (default 20)")
    p.add_argument("--layer", default="both", choices=("atoms", "turns", "both"), help="what to search")
    p.add_argument("--budget", type=_count(1_000_000), default=400, help="tokens at most (default 400)")
    p.add_argument("--scenarios", action="store_true", help="show a scenario the hits fall in as one block")
    p.add_argument("--persona", action="store_true", help="put the user's persona card first")

    command("profile", _profile, "the user's attribute card")
    p = command("persona", _persona, "the user's persona card: who the user is, each line citing its atom", llm=True)
    p.add_argument("--budget", type=_count(1_000_000), default=None, help="tokens at most (default 200)")
    p = command("scenarios", _scenarios, "the user's scenarios, hottest first: title, state line, member atoms",
                embedder=True)
    p.add_argument("--limit", type=_count(MAX_ID), default=20, help="how many at most (default 20)")
    p.add_argument("--build", action="store_true",
                   help="first place the atoms in no scenario yet (a file made before scenarios existed)")
    p = command("events", _events, "the user's events in time order")
    p.add_argument("--since", help="from this date or time on (ISO 8601, e.g. 2026-01-01)")
    p.add_argument("--until", help="up to this date or time (ISO 8601)")

    p = command("stats", _stats, "what the file holds: counts by state, sizes, its embedder and model",
                user=False)
    p.add_argument("--user", "-u", default=None, help="only this user's figures")
    p.add_argument("--embedder", help=argparse.SUPPRESS)  # taken and ignored: stats loads no embedder

    command("users", _users, "the file's users, with their turns, atoms and last turn", user=False)

    p = command("show", _show, "one of the user's atoms or turns, with its sources")
    p.add_argument("what", choices=("atom", "turn"))
    p.add_argument("id", type=ROW_ID)

    p = command("forget", _forget, "delete a user, or one of the user's atoms or turns, with what derives from it")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--atom", type=ROW_ID, help="only this atom of the user's")
    group.add_argument("--turn", type=ROW_ID, help="only this turn of the user's, and the atoms only it supports")

    p = command("export", _export, "everything held for a user, as JSON Lines")
    p.add_argument("--pairs", action="store_true",
                   help="instead: (turn, preceding turns, the atoms kept from it), to train an extractor on")
    p = command("reembed", _reembed, "rebuild every vector with another embedder", user=False)
    p.add_argument("--to", required=True, help="'default' (multilingual-e5-small), 'minilm' or a .gguf embedding model")
    p.add_argument("--threads", type=_count(1024), default=None, help="CPU threads for the embedder")

    p = command("mcp", _mcp, "serve the memory to an MCP client (Claude Desktop, Cursor, ...) over stdio; "
                "needs pip install 'memdb-sqlite[mcp]'", user=False, embedder=True, llm=True, json_out=False)
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", "-u", default=None, help="serve this user only")
    who.add_argument("--all-users", action="store_true",
                     help="serve every user of the file: each tool call names its user, and any client can read "
                          "and delete any user's memory")
    p.add_argument("--defer", action="store_true", help="remember stores only; run `memdb extract` later")

    p = sub.add_parser("browse", help="read, search and follow a file's memories in the browser (Datasette, "
                       "read-only); needs pip install 'memdb-sqlite[browse]'",
                       description="Serve the file read-only with Datasette on 127.0.0.1: atoms, turns and "
                                   "their sources, searchable, with canned queries for an atom's history, a "
                                   "user's card, the week's changes and events. Needs pip install 'memdb-sqlite[browse]'.")
    p.add_argument("db", help="the memdb file")
    p.add_argument("--user", "-u", default=None, help="show only this user's rows")
    p.add_argument("--port", "-p", type=_count(65535), default=8001, help="the port on 127.0.0.1 (default 8001)")
    p.set_defaults(run=_browse)

    demo = ("build a demo file from the bundled sample conversation (two users, a dozen turns), extract "
            "atoms with the local model, and show search and context for the sample's questions")
    command("demo", _demo, demo, user=False, embedder=True, llm=True, new_db="demo.db")

    doctor = ("check that memdb works on this machine: load each bundled model, run one extraction and "
              "one embedding, and show the CPU's features, threads, speed, memory and the settings memdb chose")
    p = sub.add_parser("doctor", help=doctor, description=doctor)
    p.add_argument("--llm", default=None, help="extraction model to check instead of the bundled one (.gguf or URL)")
    p.add_argument("--threads", type=_count(1024), default=None, help="CPU threads for the models")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=_doctor)
    return parser


def _check_path(args: argparse.Namespace) -> None:
    """Refuse a file that is not there (a typo) or empty (`touch x.db`) unless the command
    creates files: SQLite would make either a new memdb file and the command would answer
    from nothing, or delete from nothing, as if all were well."""
    if args.creates or args.db == ":memory:":
        return
    path = Path(args.db)
    if not path.exists():
        raise InvalidInput(f"{args.db} does not exist; check the path (only add, mcp and demo create a file)")
    if path.is_file() and path.stat().st_size == 0:
        raise InvalidInput(f"{args.db} is empty (0 bytes), not a memdb file; check the path, or remove it "
                           "and let add create it")


def _llm(args: argparse.Namespace) -> Any:
    """What --llm and --llm-model name: a GGUF path, or a server with its model, checked now
    (before anything is stored): a bad --llm used to fail after add had stored the turns, so
    running the fixed command stored them twice."""
    spec = args.llm or os.environ.get("MEMDB_LLM") or None
    if spec is None:
        if args.llm_model:
            raise InvalidInput("--llm-model names a model on a server: give the server with --llm URL")
        return None
    if spec.startswith(("http://", "https://")):
        from .models.endpoint import EndpointLLM

        llm = EndpointLLM(spec, model=args.llm_model)
        llm.check()
        return llm
    if args.llm_model:
        raise InvalidInput(f"--llm-model names a model on a server, but --llm {spec!r} is not an http(s) URL")
    if not Path(spec).is_file():
        raise InvalidInput(f"--llm {spec!r} is neither a .gguf file nor an http(s) URL; to use a model a "
                           f"server has (Ollama, llama-server), pass --llm URL --llm-model {spec}")
    return spec


def _open(args: argparse.Namespace, **kw: Any) -> memdb.Memory:
    _check_path(args)
    embedder = None if args.embedder in (None, "none") else args.embedder
    # One command, one search: loading a large user's vectors into memory (index/copies.py) would
    # cost more than the one vec0 KNN it replaces.
    settings = memdb.Settings(vector_copy_mb=0, keyword_copy_mb=0)
    llm = _llm(args) if args.llm is not None or args.llm_model else None
    # A command that only reads writes nothing to the file: no vector tables bound to e5 for a
    # keyword-only file, no migration; a file on a read-only disk is read as it is.
    read_only = args.read_only and args.db != ":memory:" and not getattr(args, "build", False)
    try:
        return memdb.open(args.db, embedder=embedder, llm=llm, threads=args.threads,
                          settings=settings, read_only=read_only, **kw)
    except NeedsUpgrade:  # a file from an older memdb: any open migrates it, as it always did
        return memdb.open(args.db, embedder=embedder, llm=llm, threads=args.threads, settings=settings, **kw)


def _ready(mem: memdb.Memory) -> None:
    """Load the extraction model now (weights and all), so one that cannot load fails before
    anything is stored rather than after (the turns stayed, and the fixed command stored them twice)."""
    llm = mem.llm()
    load = getattr(llm, "load", None) or getattr(llm, "model", None)
    if callable(load):
        load()


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _out(args: argparse.Namespace, data: Any, human: str) -> None:
    print(_json(data) if args.json else human)


def _json(data: Any) -> str:
    # Plain UTF-8 where stdout takes it; \u escapes (still the same JSON) where it does not.
    encoding = (getattr(sys.stdout, "encoding", None) or "utf-8").lower().replace("-", "").replace("_", "")
    return json.dumps(data, ensure_ascii=encoding not in ("utf8", "utf8sig"), default=str)


# ---------------------------------------------------------------- commands


def _add(args: argparse.Namespace) -> None:
    messages = _read_messages(args.file)
    with _open(args, extract="defer") as mem:
        if not args.defer:
            _ready(mem)
        ids = mem.add(messages, user=args.user, session=args.session)
        counts = {} if args.defer or not ids else mem.extract(turn_ids=ids, progress=_progress(args, "extract"))
    span = "" if not ids else f" ({ids[0]})" if len(ids) == 1 else f" ({ids[0]}..{ids[-1]})"
    _out(args, {"turn_ids": ids, **counts},
         f"stored {_plural(len(ids), 'turn')}{span}" + (f"; {_counts(counts)}" if counts else ""))


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
        block = mem.context(args.query, user=args.user, budget=args.budget, k=args.k, layer=args.layer,
                            scenarios=args.scenarios, persona=args.persona)
    _out(args, {"context": block}, block or "(nothing found)")


def _profile(args: argparse.Namespace) -> None:
    with _open(args) as mem:
        atoms = mem.profile(args.user)
    _out(args, [a.__dict__ for a in atoms], "\n".join(f"{a.kind:10} {a.text}" for a in atoms) or "(empty)")


def _persona(args: argparse.Namespace) -> None:
    with _open(args) as mem:
        card = mem.persona(args.user, budget=args.budget)
    _out(args, {"persona": card}, card or "(empty)")


def _scenarios(args: argparse.Namespace) -> None:
    with _open(args) as mem:
        built = mem.build_layers(args.user) if args.build else None
        found = mem.scenarios(args.user, limit=args.limit)
    lines = [f"#{s.id:<5} heat {s.heat:5.1f}  {s.held:3} atoms  {s.first_seen[:10]}..{s.last_seen[:10]}  {s.title}"
             + (f"\n       now: {s.state}" if s.state else "") for s in found]
    head = [f"placed {built['atoms_placed']} atoms"] if built else []
    _out(args, {"built": built, "scenarios": [s.__dict__ for s in found]},
         "\n".join(head + lines) or "(no scenarios)")


def _events(args: argparse.Namespace) -> None:
    with _open(args) as mem:
        atoms = mem.events(args.user, since=args.since, until=args.until)
    _out(args, [a.__dict__ for a in atoms],
         "\n".join(f"{(a.valid_from or '')[:10]}  {a.text}" for a in atoms) or "(no events)")


def _stats(args: argparse.Namespace) -> None:
    # No embedder: stats describes the file (its recorded embedder, its pending turns), not
    # this process, and starts in a fraction of the time (bench/cli_latency.py).
    args.embedder = None
    with _open(args, extract="defer") as mem:
        stats = mem.stats(user=args.user)
    for opener in ("keyword_only", "embedder_error"):  # about this process, which loaded none
        stats.pop(opener, None)
    _out(args, stats, _stats_text(stats))


def _users(args: argparse.Namespace) -> None:
    with _open(args, extract="defer") as mem:
        found = mem.users()
    lines = [f"{u['user']:24} {_plural(u['turns'], 'turn'):>11} {_plural(u['atoms'], 'atom'):>11}  "
             f"last {(u['last_ts'] or '-')[:19]}" for u in found]
    _out(args, found, "\n".join(lines) or "(no users)")


def _stats_text(stats: dict[str, Any]) -> str:
    """stats() as aligned lines: counts with their breakdown, sizes in readable units."""
    lines = []
    for key, value in stats.items():
        if isinstance(value, dict):
            continue  # shown after its total
        shown = _size(value) if key.endswith("_bytes") else "-" if value is None else value
        breakdown = stats.get(f"{key}_by_state") or stats.get(f"{key}_by_status")
        if breakdown:
            shown = f"{value} ({', '.join(f'{name} {n}' for name, n in breakdown.items())})"
        lines.append(f"{key.replace('_', ' '):18} {shown}")
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit in ("bytes", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def _show(args: argparse.Namespace) -> None:
    with _open(args) as mem:
        if args.what == "atom":
            atom = mem.get(args.id, user=args.user)
            turns = mem.turns(atom.turn_ids, user=args.user)
            data = {**atom.__dict__, "sources": turns}
            human = [f"atom #{atom.id} [{atom.kind}, {atom.status}] {atom.text}",
                     f"  confidence {atom.confidence:.2f}, seen {atom.seen}×, {atom.first_seen} … {atom.last_seen}",
                     f"  record {json.dumps(atom.record, ensure_ascii=False)}"]
            if atom.superseded_by:
                human.append(f"  superseded by #{atom.superseded_by}")
        else:
            turns = mem.turns([args.id], user=args.user)
            if not turns:
                raise memdb.NotFound(f"no turn with id {args.id} for user {args.user!r}")
            data, human = turns[0], []
    human += [f"  turn #{t['id']} {t['ts']} {t['speaker'] or t['role']}: {t['content']}" for t in turns]
    _out(args, data, "\n".join(human))


def _forget(args: argparse.Namespace) -> None:
    with _open(args, extract="defer") as mem:
        removed = mem.forget(user=args.user, atom_id=args.atom, turn_id=args.turn)
    _out(args, removed, f"removed {_plural(removed['turns'], 'turn')} and {_plural(removed['atoms'], 'atom')}")


def _export(args: argparse.Namespace) -> None:
    with _open(args) as mem:
        for row in (mem.pairs(args.user) if args.pairs else mem.export(args.user)):
            print(_json(row))


def _reembed(args: argparse.Namespace) -> None:
    if args.to.lower() == "none":
        # Dropping the vectors would not make the file keyword-only for good: the next writer
        # with an embedder adds vectors again. Opening with --embedder none is the way.
        raise InvalidInput("reembed --to none is not supported: to search by keywords only, open the file "
                           "with --embedder none (the vectors stay, unused)")
    _check_path(args)
    with memdb.open(args.db, embedder=None, extract="defer", threads=args.threads) as mem:
        n = mem.reembed(args.to)
        name = mem.stats()["embedder"]
    _out(args, {"vectors": n, "embedder": name}, f"rebuilt {n} vectors with {name}")


def _mcp(args: argparse.Namespace) -> None:
    from .mcp_server import serve

    embedder = None if args.embedder == "none" else args.embedder
    if args.all_users:  # the unsafe form is never the silent one
        print(f"memdb: WARNING: serving every user of {args.db}: any MCP client of this server can read and "
              "delete any user's memory by naming them; use --user NAME to serve one user", file=sys.stderr)
    llm = _llm(args) if args.llm is not None or args.llm_model else None
    with memdb.open(args.db, embedder=embedder, llm=llm, threads=args.threads,
                    extract="defer" if args.defer else "now") as mem:
        serve(mem, user=args.user)


def _browse(args: argparse.Namespace) -> None:
    from .browse import serve

    serve(args.db, user=args.user, port=args.port)


def _demo(args: argparse.Namespace) -> None:
    from . import doctor

    path = Path(args.db)
    if path.exists():
        raise InvalidInput(f"{path} exists; remove it or name another file")
    say = (lambda *a: None) if args.json else print
    sample = importlib.resources.files("memdb").joinpath("data/sample.json").read_text(encoding="utf-8")
    conversations = json.loads(sample)
    shown = []
    with _open(args, extract="defer") as mem:
        _ready(mem)
        for conv in conversations:
            mem.add(conv["messages"], user=conv["user"], session=conv["session"])
        say(f"stored {mem.stats()['turns']} turns in {path}; extracting with the local model…")
        model = mem.llm()  # loads it now: a model that cannot run here fails the demo, loudly
        before = doctor.model_calls(model)
        counts = mem.extract(progress=_progress(args, "extract"))
        calls = None if before is None else doctor.model_calls(model) - before
        say(_counts(counts))
        if calls:
            say(f"the extraction model ({model.name}) was asked {calls} time(s) and answered; "
                f"the rules took the other turns")
        elif calls == 0:  # the sample holds turns the rules cannot take: something is off
            say(f"warning: the extraction model ({model.name}) was never asked: the rules took every turn")
        for conv in conversations:
            for query in conv["queries"]:
                hits = mem.search(query, user=conv["user"], k=3)
                block = mem.context(query, user=conv["user"], budget=120)
                shown.append({"user": conv["user"], "query": query, "hits": [h.__dict__ for h in hits],
                              "context": block})
                say(f"\n[{conv['user']}] search: {query}")
                for h in hits:
                    say(f"  {h.score:5.2f} {h.layer:4} {h.text[:100]}")
                say(f"[{conv['user']}] context(budget=120):")
                say("  " + block.replace("\n", "\n  "))
    say(f"\ninspect it: sqlite3 {path} 'select id, user, kind, status, text from atoms_v'")
    say(f"or in the browser: memdb browse {path}  (needs pip install 'memdb-sqlite[browse]')")
    if args.json:
        print(_json({"db": str(path), **counts, "model": model.name, "model_calls": calls, "queries": shown}))


def _doctor(args: argparse.Namespace) -> int:
    from . import doctor

    report = doctor.run(llm=args.llm, threads=args.threads)
    print(_json(report) if args.json else doctor.render(report))
    return 0 if report["ok"] else 1


# ---------------------------------------------------------------- helpers


def _read_messages(source: str) -> list[dict]:
    """The messages of a JSON list or JSON Lines file (or stdin), or InvalidInput saying
    what is wrong with it: missing, a directory, not UTF-8, not JSON (with the line), too deep."""
    raw = _read_text(source).strip()
    if not raw:
        raise InvalidInput(f"no messages in {source}")
    if raw.startswith("["):
        return _json_value(raw, source)
    # JSON Lines are split at "\n" only: str.splitlines() would also split at U+2028 and U+0085,
    # which JSON strings may hold raw (memdb export writes them so).
    return [_json_value(line, f"{source} line {n}") for n, line in enumerate(raw.split("\n"), start=1)
            if line.strip()]


def _read_text(source: str) -> str:
    try:
        if source == "-":
            data = sys.stdin.buffer.read(MAX_JSON_BYTES + 1)
        else:
            with open(source, "rb") as f:
                data = f.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        raise InvalidInput(f"{source}: no such file") from None
    except IsADirectoryError:
        raise InvalidInput(f"{source} is a directory; give a messages file") from None
    except OSError as exc:
        raise InvalidInput(f"{source} cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_JSON_BYTES:
        raise InvalidInput(f"{source} is larger than {MAX_JSON_BYTES >> 20} MB; split it")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{source} is not UTF-8 (byte {exc.start}); convert it first") from None


def _json_value(raw: str, where: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{where} is not JSON: {exc.msg} at column {exc.colno}"
                           + (f" of line {exc.lineno}" if exc.lineno > 1 else "")) from None
    except RecursionError:
        raise InvalidInput(f"{where} nests JSON too deeply for a message") from None


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "nothing pending"


def _progress(args: argparse.Namespace, label: str) -> Callable[[int, int], None] | None:
    """A one-line progress bar with turns/s and ETA, only on a terminal and without --quiet."""
    if getattr(args, "quiet", False) or args.json or not sys.stderr.isatty():
        return None
    return progress_bar(label, sys.stderr)


def progress_bar(label: str, stream: Any, clock: Callable[[], float] = time.monotonic) -> Callable[[int, int], None]:
    """show(done, total) draws "label [####    ] done/total rate ETA" on one line of stream;
    the pipeline calls it with 0 before the first batch, so the bar appears at once."""
    start = clock()

    def show(done: int, total: int) -> None:
        elapsed = clock() - start
        rate = done / elapsed if done and elapsed else 0.0
        eta = f"{(total - done) / rate:5.0f}s" if rate else "    ?s"
        bar = "#" * int(30 * done / total) if total else ""
        end = "\n" if done >= total else ""
        print(f"\r{label} [{bar:30}] {done}/{total} {rate:4.1f} turns/s ETA {eta}", end=end, file=stream, flush=True)

    return show


if __name__ == "__main__":
    sys.exit(main())
