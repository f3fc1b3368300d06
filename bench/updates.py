"""Updates: everyday changes must supersede the old atom, compatible facts must coexist, and a
fact said again in other words must stay one atom.

    flock /tmp/memdb-cpu.lock .venv/bin/python bench/updates.py --llm none --out bench/results/updates_rules.json
    flock /tmp/memdb-cpu.lock .venv/bin/python bench/updates.py --out bench/results/updates_0.5b.json
    .venv/bin/python bench/updates.py --llm none --lang zh --only supersede   # a quick look

The pairs (bench/updates_pairs.json, invented) are two turns of one named user a week apart:
- supersede: the second changes or ends what the first said (moved city, quit smoking, sold the
  car, the trip is cancelled, "we moved from X to Y", 不再 / 不…了 / 戒 / 改成 / 不去了 / 搬到 …);
- coexist: the second adds a compatible fact (another hobby, allergy, language, pet …) or an
  unrelated one;
- restated: the same fact in other words (reported apart: it tests merging, not updating).
Each pair goes through the public API alone, in a new file: add() the first turn at its ts,
extract(), add() the second at ts + 7 days, extract(), then every atom of the user, any status,
from export(). The model and the embedder are loaded once and handed to every file.

Which atom is which: `about.old` / `about.new` list words an atom about that fact contains
(alternatives; case-insensitive; a Latin word matches from a word start; "a & b" needs both),
looked up in the atom's text and its record's subject, predicate, object, when and outcome.
The old fact's atoms are those citing the first turn that match about.old; the new fact's, those
citing the second that match about.new.
- supersede passes when every old-fact atom is superseded (kept in history, not active and not
  conflicting) and an active atom carries the new fact;
- coexist passes when an active atom carries each fact;
- restated passes when exactly one active atom carries the fact ("merged": that atom cites both
  turns, i.e. the second statement was absorbed into it, not dropped).
Failures are listed with their reasons, both turns' extraction states and every atom produced.
--llm none runs the rules alone (a model that never writes a note); default is memdb's default
model (the bundled 0.5B, or $MEMDB_LLM); a path runs that GGUF. With today's settings the model
reads a turn only when the rules' notes cover too little of it; `--set extract_rules_cover=1`
makes it read every turn.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import memdb  # noqa: E402
from bench.common import code_version  # noqa: E402

PAIRS = ROOT / "bench" / "updates_pairs.json"
CASES = ("supersede", "coexist", "restated")
FIELDS = ("subject", "predicate", "object", "when", "outcome")  # record fields searched beside the text
WEEK = dt.timedelta(days=7)


class RulesOnly:
    """A model that never writes a note (--llm none): what extraction gives from its rules.
    The reply is the schema's required lists, empty, so it stays valid if the schema changes."""

    name, sha256 = "rules-only", "0" * 64

    def complete(self, messages: list[dict[str, str]], *, schema: dict, max_tokens: int) -> str:
        required = schema.get("required") or list(schema.get("properties", {}))
        return json.dumps({key: [] for key in required}, separators=(",", ":"))


class Counted:
    """The extraction model with its calls counted and timed, and empty replies told apart."""

    def __init__(self, model: Any) -> None:
        self.model, self.name, self.sha256 = model, model.name, model.sha256
        self.calls, self.empty, self.seconds = 0, 0, 0.0

    def complete(self, messages: list[dict[str, str]], *, schema: dict, max_tokens: int) -> str:
        started = time.perf_counter()
        reply = self.model.complete(messages, schema=schema, max_tokens=max_tokens)
        self.seconds += time.perf_counter() - started
        self.calls += 1
        self.empty += _empty_reply(reply)
        return reply

    def count_tokens(self, line: str) -> int:
        counter = getattr(self.model, "count_tokens", None)
        return counter(line) if counter else len(line.split())


def _empty_reply(reply: str) -> bool:
    try:
        found = json.loads(reply)
    except ValueError:
        return False
    return isinstance(found, dict) and all(value == [] for value in found.values())


# ---------------------------------------------------------------- matching


def _pattern(alternative: str) -> list[re.Pattern[str]]:
    parts = [p.strip() for p in alternative.split(" & ") if p.strip()]
    return [re.compile(("(?<![a-z0-9])" if re.match(r"[a-z0-9]", p, re.I) else "") + re.escape(p), re.I)
            for p in parts]


def carries(atom: dict, alternatives: list[str]) -> bool:
    """Whether the atom's text or record holds one of the alternatives (all parts of an "a & b")."""
    said = " | ".join([atom["text"], *(str(atom["record"].get(f, "")) for f in FIELDS)])
    return any(all(p.search(said) for p in _pattern(alt)) for alt in alternatives)


# ---------------------------------------------------------------- one pair


def run_pair(pair: dict, args: argparse.Namespace, model: Any, embedder: Any) -> dict:
    user = pair["id"]
    ts1 = dt.datetime.fromisoformat(pair["ts"].replace("Z", "+00:00"))
    turn_ids: list[int] = []
    seconds: list[float] = []
    asked: list[list[int]] = []  # per turn: model calls, empty replies
    with tempfile.TemporaryDirectory() as tmp, \
            memdb.open(Path(tmp) / "updates.db", user=user, embedder=embedder, llm=model,
                       extract="defer", threads=args.threads, settings=args.settings) as mem:
        for i, (content, ts) in enumerate(zip(pair["turns"], (ts1, ts1 + WEEK))):
            message = {"role": "user", "content": content, "name": pair["speaker"]}
            turn_ids += mem.add([message], session=f"week{i + 1}", ts=ts.isoformat())
            calls, empty, started = model.calls, model.empty, time.perf_counter()
            mem.extract()
            seconds.append(time.perf_counter() - started)
            asked.append([model.calls - calls, model.empty - empty])
        exported = list(mem.export())
    turns = [r for r in exported if r["type"] == "turn"]
    atoms = [r for r in exported if r["type"] == "atom"]
    verdict = judge(pair, atoms, turn_ids)
    return {
        "id": pair["id"], "lang": pair["lang"], "case": pair["case"], "kind": pair["kind"], **verdict,
        "turns": [{"text": t["content"], "state": t["state"], "reason": t["reason"],
                   "model_calls": calls, "model_empty": empty} for t, (calls, empty) in zip(turns, asked)],
        "atoms": [_shown(a, turn_ids) for a in atoms],
        "extract_seconds": [round(s, 3) for s in seconds],
    }


def _shown(atom: dict, turn_ids: list[int]) -> dict:
    cites = "+".join(str(turn_ids.index(t) + 1) for t in atom["turn_ids"] if t in turn_ids)
    return {"id": atom["id"], "turn": cites, "status": atom["status"], "superseded_by": atom["superseded_by"],
            "kind": atom["kind"], "text": atom["text"], "record": atom["record"], "seen": atom["seen"]}


def judge(pair: dict, atoms: list[dict], turn_ids: list[int]) -> dict:
    """Pass or fail, with the reasons (short, fixed phrases: they are counted as failure patterns)."""
    first, second = turn_ids
    about_old, about_new = pair["about"]["old"], pair["about"]["new"]
    from_second = [a for a in atoms if second in a["turn_ids"]]
    reasons: list[str] = []
    if pair["case"] == "restated":
        about = about_old + about_new
        carriers = [a for a in atoms if a["status"] == "active" and carries(a, about)]
        merged = len(carriers) == 1 and {first, second} <= set(carriers[0]["turn_ids"])
        if not carriers:
            reasons.append("no active atom carries the fact")
        elif len(carriers) > 1:
            reasons.append("several active atoms carry the fact (not merged)")
        if not any(first in a["turn_ids"] and carries(a, about) for a in atoms):
            reasons.append("turn 1 gave no atom about the fact")
        if not from_second:
            reasons.append("turn 2 gave no atom")
        elif not any(carries(a, about) for a in from_second):
            reasons.append("turn 2 gave no atom about the fact")
        elif len(carriers) == 1 and not merged and not reasons:
            reasons.append("turn 2's atom is kept apart, not merged")
        return {"pass": len(carriers) == 1, "merged": merged, "reasons": reasons}

    old = [a for a in atoms if first in a["turn_ids"] and carries(a, about_old)]
    new = [a for a in atoms if second in a["turn_ids"] and carries(a, about_new)]
    new_active = [a for a in new if a["status"] == "active"]
    if not old:
        reasons.append("turn 1 gave no atom about the old fact")
    if not from_second:
        reasons.append("turn 2 gave no atom")
    elif not new:
        reasons.append("turn 2 gave no atom about the new fact")
    elif not new_active:
        reasons.append(f"the new fact's atom is {new[0]['status']}")
    if pair["case"] == "supersede":
        for a in old:
            if a["status"] == "active":
                reasons.append("old atom merged with turn 2, still active" if second in a["turn_ids"]
                               else "old atom still active")
            elif a["status"] == "conflicting":
                reasons.append("old atom marked conflicting, not superseded")
        passed = bool(old) and all(a["status"] == "superseded" for a in old) and bool(new_active)
    else:
        old_active = [a for a in old if a["status"] == "active"]
        if old and not old_active:
            reasons.append(f"the old fact's atom is {old[0]['status']}")
        passed = bool(old_active) and bool(new_active)
    return {"pass": passed, "reasons": list(dict.fromkeys(reasons))}


# ---------------------------------------------------------------- report


def rate(results: list[dict], key: str = "pass") -> dict:
    n = len(results)
    passed = sum(bool(r.get(key)) for r in results)
    return {"pass": passed, "n": n, "rate": round(passed / n, 3) if n else None}


def summary(results: list[dict]) -> dict:
    by: dict[str, Any] = {"case": {}, "lang_case": {}, "kind": {}, "failure_patterns": {}}
    for case in CASES:
        of_case = [r for r in results if r["case"] == case]
        if not of_case:
            continue
        by["case"][case] = rate(of_case)
        for lang in ("en", "zh"):
            of_lang = [r for r in of_case if r["lang"] == lang]
            if of_lang:
                by["lang_case"][f"{lang} {case}"] = rate(of_lang)
                if case == "restated":
                    by["lang_case"][f"{lang} {case} merged"] = rate(of_lang, "merged")
        if case == "restated":
            by["case"]["restated merged"] = rate(of_case, "merged")
        kinds: dict[str, list[dict]] = defaultdict(list)
        for r in of_case:
            kinds[r["kind"]].append(r)
        by["kind"][case] = {kind: rate(rs) for kind, rs in sorted(kinds.items())}
        patterns = Counter(reason for r in of_case if not r["pass"] for reason in r["reasons"])
        by["failure_patterns"][case] = dict(patterns.most_common())
    return by


def load_models(args: argparse.Namespace) -> tuple[Any, Any, float]:
    """The model and the embedder, loaded once through a scratch Memory (public API), and the
    seconds that took."""
    started = time.perf_counter()
    embedder = None if args.embedder == "none" else args.embedder
    llm = RulesOnly() if args.llm == "none" else (None if args.llm == "default" else args.llm)
    with tempfile.TemporaryDirectory() as tmp, \
            memdb.open(Path(tmp) / "load.db", embedder=embedder, llm=llm, threads=args.threads) as mem:
        if mem.embedder is None and embedder is not None:
            raise SystemExit(f"the embedder {args.embedder!r} did not load: {mem.embedder_error}")
        model = mem.llm()
        loaded_embedder = mem.embedder
    return Counted(model), loaded_embedder, time.perf_counter() - started


def settings_from(pairs: list[str]) -> memdb.Settings:
    """Settings with KEY=VALUE changes (--set extract_rules_cover=1), each value read as its default's type."""
    defaults, changes = memdb.Settings(), {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if not hasattr(defaults, key):
            raise SystemExit(f"--set: Settings has no field {key!r}")
        kind = type(getattr(defaults, key))
        changes[key] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
    return memdb.Settings(**changes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llm", default="default", help="none (rules only), default (memdb's model) or a GGUF path")
    parser.add_argument("--embedder", default="default", help="default (e5), minilm, none, or a GGUF path")
    parser.add_argument("--lang", choices=("en", "zh"), default=None, help="one language only")
    parser.add_argument("--only", default=None, help="one case (supersede, coexist, restated) or kind (lives_in, ...)")
    parser.add_argument("--pairs", type=Path, default=PAIRS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a Settings field for every file, e.g. extract_rules_cover=1 (the model reads every turn)")
    parser.add_argument("--out", default=None, help="write the JSON report here")
    args = parser.parse_args()
    args.settings = settings_from(args.set)

    pairs = json.loads(args.pairs.read_text(encoding="utf-8"))["pairs"]
    pairs = [p for p in pairs if (args.lang is None or p["lang"] == args.lang)
             and (args.only is None or args.only in (p["case"], p["kind"]))]
    if not pairs:
        raise SystemExit("no pair matches --lang / --only")
    load_start = os.getloadavg()
    model, embedder, load_s = load_models(args)
    started = time.perf_counter()
    results = []
    for i, pair in enumerate(pairs, 1):
        results.append(run_pair(pair, args, model, embedder))
        print(f"  {i}/{len(pairs)} {pair['id']}: {'pass' if results[-1]['pass'] else 'FAIL'}", file=sys.stderr)
    wall = time.perf_counter() - started

    per_turn = [s for r in results for s in r["extract_seconds"]]
    report = {
        "command": shlex.join([".venv/bin/python", "bench/updates.py", *sys.argv[1:]]),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"nproc": os.cpu_count(), "threads": args.threads, "python": platform.python_version(),
                    "loadavg_start": load_start, "loadavg_end": os.getloadavg()},
        "code": code_version(),
        "model": model.name, "embedder": getattr(embedder, "name", None), "pairs_file": str(args.pairs.name),
        "settings_changed": args.set,
        "seconds": {"load": round(load_s, 1), "run": round(wall, 1),
                    "extract_per_turn_median": round(statistics.median(per_turn), 3),
                    "extract_per_turn_max": round(max(per_turn), 3)},
        "model_calls": {"calls": model.calls, "empty_replies": model.empty, "seconds": round(model.seconds, 1)},
        "summary": summary(results),
        "pairs": results,
    }
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print_report(report, results)
    if args.out:
        print(f"wrote {args.out}")


def print_report(report: dict, results: list[dict]) -> None:
    s = report["summary"]
    print(f"model {report['model']}, embedder {report['embedder']}, {len(results)} pairs, "
          f"{report['seconds']['run']} s ({report['seconds']['extract_per_turn_median']} s/turn median), "
          f"model calls {report['model_calls']['calls']} ({report['model_calls']['empty_replies']} empty)")
    print(f"{'':24}{'pass':>6}{'n':>5}{'rate':>8}")
    for name, r in [*s["case"].items(), *s["lang_case"].items()]:
        print(f"{name:24}{r['pass']:>6}{r['n']:>5}{r['rate']!s:>8}")
    for case, patterns in s["failure_patterns"].items():
        if patterns:
            print(f"{case} failures: " + "; ".join(f"{reason} ×{n}" for reason, n in patterns.items()))
    print()
    for r in results:
        if r["pass"] and r.get("merged", True):
            continue
        verdict = "FAIL" if not r["pass"] else "NOT MERGED"
        print(f"{verdict} {r['id']} ({r['case']}, {r['kind']}): {'; '.join(r['reasons'])}")
        for i, t in enumerate(r["turns"], 1):
            model = f", model {t['model_calls']} call(s), {t['model_empty']} empty" if t["model_calls"] else ""
            print(f"   turn {i} [{t['state']}{': ' + t['reason'] if t['reason'] else ''}{model}] {t['text']}")
        for a in r["atoms"]:
            fields = {k: v for k, v in a["record"].items() if k in ("subject", "predicate", "object", "when", "attribute", "value", "polarity")}
            print(f"   #{a['id']} t{a['turn']} {a['status']:<11} {a['text']}   {fields}")
        if not r["atoms"]:
            print("   (no atoms)")


if __name__ == "__main__":
    main()
