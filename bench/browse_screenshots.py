"""Screenshots of `memdb browse`: the main pages as a person sees them, taken with headless
Chromium (Debian's `chromium` package; Chinese needs a CJK font, e.g. `fonts-wqy-microhei`),
and how long each page takes to serve.

    flock /tmp/memdb-cpu.lock .venv/bin/python bench/browse_screenshots.py

Without --db the file is built in a temporary folder from a short conversation written here
(English and Chinese, a preference that changes, dated events) with a scripted model and the
hashing embedder, so the pages look the same on every run and no model is loaded. --db FILE
shows another file instead (e.g. the one `memdb demo` makes). The server is the real command,
`memdb browse FILE --port P`, in a subprocess; each page is fetched --repeat times over HTTP and
its median time kept (and the first fetch's, before SQLite's cache holds its pages).
Writes bench/results/browse/*.png and bench/results/browse/pages.json (--out: elsewhere).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import apsw
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from memdb import text  # noqa: E402

OUT = ROOT / "bench" / "results" / "browse"

# (user, speaker, session, when said, what was said, the atoms the scripted model notes)
CONVERSATION = [
    ("sam", "Sam", "work", "2026-03-02T09:10:00", "Our backend runs on PostgreSQL and I write every query by hand.",
     ["Sam | backend database is | PostgreSQL"]),
    ("sam", "Sam", "work", "2026-03-02T09:12:00", "I love a dark roast coffee before standup.",
     ["Sam | loves | dark roast coffee"]),
    ("sam", "Sam", "work", "2026-03-04T14:00:00", "I'm flying to Lisbon on 2026-03-20 for the data conference.",
     ["Sam | flying to | Lisbon for the data conference | on 2026-03-20"]),
    ("sam", "Sam", "work", "2026-03-09T10:30:00", "Coffee keeps me up at night now, I hate coffee these days.",
     ["Sam | hates | coffee"]),
    ("sam", "Sam", "work", "2026-03-10T16:45:00", "The backend moved off PostgreSQL: the backend database is SQLite now.",
     ["Sam | backend database is | SQLite"]),
    ("mei", "小美", "日常", "2026-03-03T20:00:00", "我在杭州做前端开发，最近在学 Rust。",
     ["小美 | 在杭州做 | 前端开发", "小美 | 在学 | Rust"]),
    ("mei", "小美", "日常", "2026-03-05T19:30:00", "我特别喜欢吃火锅，越辣越好。",
     ["小美 | 喜欢吃 | 火锅"]),
    ("mei", "小美", "日常", "2026-03-06T21:00:00", "下周六我要去成都看大熊猫。",
     ["小美 | 去成都看 | 大熊猫 | on 2026-03-14"]),
    ("mei", "小美", "日常", "2026-03-11T12:00:00", "医生说我胃不好，我现在不喜欢吃火锅了。",
     ["小美 | 不喜欢吃 | 火锅"]),
]

PAGES = [  # (file name, path under the database, what it shows)
    ("database", "", "the file: tables, views and canned queries"),
    ("atoms", "/atoms_v", "atoms with facets on user, kind and status"),
    ("search_zh", "/atoms_v?_search={zh_word}", "the search box with a Chinese word"),
    ("history", "/atom_history?atom_id={history_id}", "one atom's history: what it was, what replaced it, why"),
    ("this_week", "/this_week", "what changed in the week up to the newest change"),
    ("profile", "/profile?user={en_user}", "a user's profile card"),
    ("events", "/events?user={zh_user}", "a user's events in time order"),
    ("turns", "/turns_v?_search={en_word}", "turns found by an English word"),
    ("records", "/atom_records_v", "records decoded by SQL (atom_records_v decodes every atom)"),
]


class ScriptedModel:
    """Notes the atoms CONVERSATION gives for the turn being read (the prompt's "* " line)."""

    name, sha256 = "scripted", "0" * 64

    def complete(self, messages: list[dict[str, str]], *, schema: dict, max_tokens: int) -> str:
        current = [line for line in messages[-2]["content"].splitlines() if line.startswith("* ")][-1]
        atoms = next((atoms for *_, said, atoms in CONVERSATION if said in current), [])
        return json.dumps({"a": atoms}, ensure_ascii=False)


class HashEmbedder:
    """Bag-of-terms vectors by feature hashing (as the tests' embedder): no model to load."""

    name, dim = "hash-bench", 64

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, line in enumerate(texts):
            for term in text.terms(line) or ["<empty>"]:
                digest = hashlib.blake2b(term.encode(), digest_size=8).digest()
                out[row, digest[0] % self.dim] += 1.0 if digest[1] % 2 else -1.0
            out[row] /= np.linalg.norm(out[row]) or 1.0
        return out


def build(path: Path) -> None:
    with memdb.open(path, embedder=HashEmbedder(), llm=ScriptedModel(),
                    settings=memdb.Settings(extract_fill=False)) as mem:
        for user, speaker, session, ts, said, _ in CONVERSATION:
            mem.add([{"role": "user", "name": speaker, "content": said, "ts": ts}], user=user, session=session)


def superseded_atom(path: Path) -> int | None:
    """The first atom that was replaced: its history is the page to show. Read immutable, as
    browse reads, so nothing here writes the file either."""
    conn = apsw.Connection(f"{path.resolve().as_uri()}?immutable=1",
                           flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    try:
        row = conn.execute('select "id" from "atoms" where "superseded_by" is not null order by "id"').fetchone()
    finally:
        conn.close()
    return row[0] if row else None


def wait_for(url: str, server: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if fetch(url)[1] == 200:
                return
        except OSError:  # not listening yet
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            server.kill()
            raise SystemExit(f"memdb browse did not answer: {server.communicate()[1]}")
        time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fetch(url: str) -> tuple[float, int]:
    """Seconds to fetch url, and the HTTP status (Datasette answers 400 to a query over its time limit)."""
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        exc.read()
        status = exc.code
    return time.perf_counter() - start, status


def screenshot(chromium: str, url: str, out: Path, size: str, profile: Path) -> None:
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={profile}", "--force-device-scale-factor=1", f"--window-size={size}",
                    f"--screenshot={out}", url], check=True, capture_output=True, timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="the file to show (default: one built from the conversation here)")
    parser.add_argument("--repeat", type=int, default=5, help="fetches of each page for its median time")
    parser.add_argument("--size", default="1280,900", help="the browser window, width,height")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--zh-word", default="火锅", help="a Chinese word to search atoms for")
    parser.add_argument("--en-word", default="coffee", help="an English word to search turns for")
    parser.add_argument("--zh-user", default="mei", help="whose events to show")
    parser.add_argument("--en-user", default="sam", help="whose profile card to show")
    parser.add_argument("--out", type=Path, default=OUT, help="where the PNGs and pages.json go")
    parser.add_argument("--no-screenshots", action="store_true", help="only the page times")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "memory.db"
        if args.db is None:
            build(db)
        before = hashlib.sha256(db.read_bytes()).hexdigest()
        history_id = superseded_atom(db)
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "memdb.cli", "browse", str(db), "--port", str(port)],
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        base = f"http://127.0.0.1:{port}/{db.stem}"
        pages = []
        try:
            wait_for(base + ".json", server)
            for name, path, what in PAGES:
                if "{history_id}" in path and history_id is None:
                    continue
                path = path.format(history_id=history_id, zh_word=args.zh_word, en_word=args.en_word,
                                   zh_user=args.zh_user, en_user=args.en_user)
                quoted = urllib.parse.quote(base + path, safe=":/?=&")
                times, statuses = zip(*[fetch(quoted) for _ in range(args.repeat)])
                png = args.out / f"{name}.png"
                if not args.no_screenshots:
                    screenshot(args.chromium, quoted, png, args.size, Path(tmp) / "chromium")
                pages.append({"page": name, "path": path, "shows": what, "status": statuses[0],
                              "median_ms": round(1000 * statistics.median(times), 1),
                              "first_ms": round(1000 * times[0], 1),
                              "png": None if args.no_screenshots else str(png.resolve().relative_to(ROOT))})
                print(f"{name:10} {pages[-1]['median_ms']:7.1f} ms  {statuses[0]}  {path}")
        finally:
            server.terminate()
            server.wait(timeout=30)
        unchanged = before == hashlib.sha256(db.read_bytes()).hexdigest()
    chromium = subprocess.run([args.chromium, "--version"], capture_output=True, text=True).stdout.strip()
    result = {
        "command": "flock /tmp/memdb-cpu.lock .venv/bin/python " + " ".join(["bench/browse_screenshots.py", *sys.argv[1:]]),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "chromium": chromium},
        "file": str(args.db) if args.db else "built from CONVERSATION (scripted model, hashing embedder)",
        "repeat": args.repeat,
        "file_unchanged_after_browsing": unchanged,
        "pages": pages,
    }
    (args.out / "pages.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(f"file unchanged: {unchanged}; wrote {args.out / 'pages.json'}")


if __name__ == "__main__":
    main()
