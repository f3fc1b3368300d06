"""The first search of a large user in a fresh process: vectors read out of vec0 (today) against
a copy file written once and memory-mapped by later opens (Settings.vector_copy_files).

Each figure is one new process opening the file and searching once (a copy lives in the process
that loaded it), then searching again (the steady state). In order:

- today:  vector_copy_files off; the first search reads the user's vectors out of vec0;
- write:  vector_copy_files on and no file yet; the same read, streamed into the file;
- warm:   the file exists, its pages in the page cache (as after any recent use);
- cold:   the file's pages dropped from the page cache first (posix_fadvise DONTNEED on the copy
          files only), so the first search reads them from the disk.

Keyword copies are off in these runs (keyword_copy_mb=0: FTS5 answers the keyword side), so the
figures are the vector side's; --keywords adds a warm run with the default keyword copies,
which are built from the FTS table on the first search and not kept on disk.

    flock /tmp/memdb-cpu.lock .venv/bin/python bench/first_search.py --db /tmp/memdb_scale_1M.db

The file is one bench/scale.py built (MiniLM vectors). Copy files are deleted afterwards.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

RESULTS = ROOT / "bench" / "results"
QUERY = "what does she like to drink in the morning?"
ARGS: argparse.Namespace


def child(args: argparse.Namespace) -> dict:
    import memdb
    from memdb import recall
    from memdb.index import copyfiles

    settings = memdb.Settings(vector_copy_files=args.files, vector_copy_mb=args.copy_mb, vector_copy_file_min=args.file_min,
                              keyword_copy_mb=memdb.Settings().keyword_copy_mb if args.keywords else 0)
    if args.defaults:
        settings = memdb.Settings()
    folder = copyfiles.directory(args.db)
    if args.cold and folder.is_dir():
        for path in folder.iterdir():  # this file's pages only: other processes' caches stay
            fd = os.open(path, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
    t0 = time.perf_counter()
    with memdb.open(args.db, embedder="minilm", extract="defer", settings=settings) as mem:
        opened = time.perf_counter() - t0
        user = mem.conn.execute('select "user" from "atoms" limit 1').fetchone()[0]
        recall.query_vector(mem, "warm up the embedder", user, None)  # its first call is not the search's
        t0 = time.perf_counter()
        first = mem.search(QUERY, user=user, k=10, layer=args.layer)
        t_first = time.perf_counter() - t0
        t0 = time.perf_counter()
        second = mem.search(QUERY, user=user, k=10, layer=args.layer)
        t_second = time.perf_counter() - t0
        mapped = {layer: copy.base is not None for (layer, _), copy in mem.copies.copies.items()}
        waited = {}
        if hasattr(mem.copies, "wait"):  # vector copies read in the background: until they are ready
            t0 = time.perf_counter()
            mem.copies.wait()
            waited["vector_copies_ready_ms"] = round(1000 * (time.perf_counter() - t0) + t_second * 1000, 1)
        if hasattr(mem.keywords, "wait"):  # keyword copies built in the background: until they are ready
            t0 = time.perf_counter()
            mem.keywords.wait()
            waited["keyword_copies_ready_ms"] = round(1000 * (time.perf_counter() - t0) + t_second * 1000, 1)
            t0 = time.perf_counter()
            mem.search(QUERY, user=user, k=10, layer=args.layer)
            waited["search_adopting_them_ms"] = round(1000 * (time.perf_counter() - t0), 1)
            t0 = time.perf_counter()
            mem.search(QUERY, user=user, k=10, layer=args.layer)
            waited["search_after_ms"] = round(1000 * (time.perf_counter() - t0), 1)
    if not args.defaults:  # with the defaults a copy built meanwhile may rank the keyword side in full
        assert [h.id for h in first] == [h.id for h in second]
    return {**waited, "open_ms": round(1000 * opened, 1), "first_search_ms": round(1000 * t_first, 1),
            "second_search_ms": round(1000 * t_second, 1), "mapped": mapped, "hits": [h.id for h in first]}


def run(db: str, layer: str, *, files: bool, cold: bool = False, keywords: bool = False, copy_mb: float) -> dict:
    cmd = [sys.executable, __file__, "_child", "--db", db, "--layer", layer, "--copy-mb", str(copy_mb),
           "--file-min", str(ARGS.file_min)]
    cmd += ["--files"] * files + ["--cold"] * cold + ["--keywords"] * keywords
    out = json.loads(subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True).stdout)
    print(f"  {layer:5} files={files} cold={cold} keywords={keywords}: first {out['first_search_ms']:.0f} ms, "
          f"then {out['second_search_ms']:.0f} ms", file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="?", default="bench")
    parser.add_argument("--db", required=True)
    parser.add_argument("--layer", default="atoms")
    parser.add_argument("--files", action="store_true")
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--keywords", action="store_true", help="also a warm run with the default keyword copies")
    parser.add_argument("--defaults", action="store_true",
                        help="only runs with the library's default settings (no copy files), warm and cold page cache")
    parser.add_argument("--main", default=None, help="with --defaults: also today's main (a checkout's root), "
                                                      "its own bench/first_search.py child with its defaults")
    # Room for a 1M x 384 copy in memory, so today's path uses a copy at all (vec0 otherwise).
    parser.add_argument("--copy-mb", type=float, default=4096)
    parser.add_argument("--file-min", type=int, default=20_000, help="Settings.vector_copy_file_min")
    parser.add_argument("--out", type=Path, default=RESULTS / "first_search.json")
    args = parser.parse_args()
    global ARGS
    ARGS = args
    if args.mode == "_child":
        print(json.dumps(child(args)))
        return
    if args.defaults:
        return defaults(args)
    from memdb import recall
    from memdb.index import copyfiles

    folder = copyfiles.directory(args.db)
    shutil.rmtree(folder, ignore_errors=True)
    load = os.getloadavg()
    runs: dict[str, dict] = {}
    for layer in ("atoms", "both"):
        runs[f"{layer} today"] = run(args.db, layer, files=False, copy_mb=args.copy_mb)
    runs["both write"] = run(args.db, "both", files=True, copy_mb=args.copy_mb)
    for layer in ("atoms", "both"):
        runs[f"{layer} warm"] = run(args.db, layer, files=True, copy_mb=args.copy_mb)
        runs[f"{layer} cold"] = run(args.db, layer, files=True, cold=True, copy_mb=args.copy_mb)
    if args.keywords:
        runs["both warm keyword copies"] = run(args.db, "both", files=True, keywords=True, copy_mb=args.copy_mb)
    for name, out in runs.items():
        assert out["hits"] == runs[f"{name.split()[0]} today"]["hits"], f"{name} found other hits than today's path"
    disk = sum(p.stat().st_size for p in folder.iterdir()) if folder.is_dir() else 0
    shutil.rmtree(folder, ignore_errors=True)
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    results[Path(args.db).name] = {
        "runs": runs, "copy_files_mb": round(disk / 2**20, 1),
        "loadavg_1_5_15_before": [round(x, 2) for x in load],
        "loadavg_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", "bench/first_search.py", *sys.argv[1:]]),
    }
    args.out.write_text(json.dumps(results, indent=1))


def drop_cache(db: str) -> None:
    """The file's pages out of the page cache (posix_fadvise DONTNEED; others' caches stay)."""
    for path in (db, db + "-wal"):
        if os.path.exists(path):
            fd = os.open(path, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def read_through(db: str) -> None:
    """The file's pages into the page cache: read once, kept nowhere."""
    with open(db, "rb", buffering=0) as f:
        while f.read(8 << 20):
            pass


def defaults(args: argparse.Namespace) -> None:
    """The first search with the library's defaults, this checkout's and (--main) today's main's:
    warm (the file's pages cached, as after any recent use) and cold (dropped first)."""
    runs: dict[str, dict] = {}
    for layer in ("atoms", "both"):
        for cold in (False, True):
            for who, script in (("this", __file__), ("main", args.main and str(Path(args.main) / "bench" / "first_search.py"))):
                if script is None:
                    continue
                if cold:
                    drop_cache(args.db)
                else:  # warm for whichever runs first too (the page cache keeps what others leave it)
                    read_through(args.db)
                cmd = [sys.executable, script, "_child", "--db", args.db, "--layer", layer, "--copy-mb",
                       str(1024.0), "--file-min", str(20_000), "--keywords"]  # main's defaults, said in its own flags
                cmd += ["--defaults"] * (who == "this")
                env = {**os.environ, "PYTHONPATH": str(Path(script).resolve().parent.parent)}
                out = json.loads(subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True, env=env).stdout)
                name = f"{layer} {'cold' if cold else 'warm'} {who}"
                runs[name] = out
                print(f"  {name}: first {out['first_search_ms']:.0f} ms, then {out['second_search_ms']:.0f} ms"
                      + (f", keyword copies ready after {out['keyword_copies_ready_ms']:.0f} ms, then "
                         f"{out['search_after_ms']:.0f} ms" if "keyword_copies_ready_ms" in out else ""), file=sys.stderr)
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    results[Path(args.db).name + " defaults"] = {
        "runs": runs, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", "bench/first_search.py", *sys.argv[1:]]),
        "loadavg_1_5_15_after": [round(x, 2) for x in os.getloadavg()]}
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
