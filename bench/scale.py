"""Search latency and insert throughput from 10k to 1M atoms, beside the numpy floor.

For each configuration (one user holding 10k, 100k or 1M atoms; 1,000 users × 1k atoms in one
file) the file is built by bench/synth.py (through memdb.db.rows.insert_turn / insert_atom, kept
in --dir and reused) and then measured in a fresh process:

- search latency p50/p95/p99 for layer="atoms" and layer="both" over a few hundred generated
  queries (English and Chinese, several shapes), split into stages: the keyword CTE(s) alone,
  the vector side(s) alone (memdb.index.vectors.nearest: the in-memory copy for a large user,
  else vec0's KNN), the whole fusion statement (which reads the vector side's ids as bound
  JSON), and search() end to end (both sides, statement, evidence grouping); query embedding
  is excluded (timed separately). Stages run interleaved per query, so noise from the shared
  machine falls on all of them alike.
- in the same loop, query by query, beside search() with the library's defaults: the exact
  reference (the same copies, every vector ranked exactly: Settings.vector_rescore=0, and full
  bm25 from the keyword copies, with each user's own statistics), today's main (--main: a
  checkout's memdb imported beside this one, on its own copies), the plain design a user could
  build in an afternoon (FTS5 bm25 + sqlite-vec KNN + RRF in Python, plain_search; and asking
  each side for only k candidates, plain_k_search), memdb with fusion="rrf" (rrf_search: the
  plain design's fusion) and ranking as the plain design does (flat_search: RRF, no confidence,
  freshness or relevance floor, every query term), for a comparison at equal recall, and memdb's fusion with every side
  asked of SQLite (vec0 KNN, bm25 on all terms); hit@10 and MRR of the atom each query was
  written from, for each.
- the floor: numpy brute-force cosine top-k over the same vectors held in memory, with BLAS on
  one thread (sqlite-vec is single-threaded) and with its default threads; the vector stage
  over the one-thread floor is the ratio reported. recall@10 of the KNN against exact search.
- insert throughput on the built file (rolled back afterwards): atoms/s through
  memdb.db.rows.insert_atom without dedup, and through lifecycle.absorb with dedup (fewer atoms).
- bytes per atom (the whole file, turns included, and per table), peak RSS (ru_maxrss) of the
  build process and of the measuring process before the floor's copy of the vectors is loaded.

    .venv/bin/python bench/scale.py --configs 10k,100k          # 1M, 1000x1k: add them (slow)
    .venv/bin/python bench/scale.py --configs 1M --quant        # + int8/binary quantised KNN
    .venv/bin/python bench/scale.py --configs 100k --main /path/to/main/checkout --insert 0 --absorb 0

Results merge into bench/results/scale.json (one entry per configuration) and a plot.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import synth  # noqa: E402
from bench.common import machine  # noqa: E402
from memdb.db import connection  # noqa: E402
from memdb import text  # noqa: E402
from memdb.db import rows as db_rows  # noqa: E402
from memdb.index import fts, vectors  # noqa: E402
from memdb.index.copies import VectorCopies  # noqa: E402
from memdb.index.fts import TermCounts  # noqa: E402
from memdb.index.keywords import KeywordCopies  # noqa: E402
from memdb.lifecycle import absorb  # noqa: E402
from memdb.search import fusion as search_fusion  # noqa: E402
from memdb.settings import Settings  # noqa: E402

CONFIGS = {  # name: (total atoms, users)
    "10k": (10_000, 1),
    "100k": (100_000, 1),
    "1M": (1_000_000, 1),
    "1000x1k": (1_000_000, 1_000),
    "300x1k": (300_000, 300),  # the many-users shape in a file a shared machine builds in minutes
}
K = 10
RESULTS = ROOT / "bench" / "results"


# ---------------------------------------------------------------- machine


def maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def summary(seconds: list[float]) -> dict:
    ms = [1000 * s for s in seconds]
    return {"p50": round(pct(ms, 50), 3), "p95": round(pct(ms, 95), 3), "p99": round(pct(ms, 99), 3),
            "mean": round(statistics.fmean(ms), 3), "n": len(ms)}


# ---------------------------------------------------------------- build (child process)


def cmd_build(args: argparse.Namespace) -> dict:
    result = synth.build(Path(args.db), args.atoms, args.users)
    out = {"atoms": result["atoms"], "fill_seconds": round(result["seconds"], 1),
           "fill_atoms_per_s": round(result["atoms"] / result["seconds"]), "build_maxrss_mb": round(maxrss_mb())}
    sidecar(Path(args.db)).write_text(json.dumps(out))  # the file is reused across runs; so is this
    return out


def sidecar(db: Path) -> Path:
    return db.with_name(db.name + ".build.json")


# ---------------------------------------------------------------- measure (child process)


def bound_statement(conn, query: str, qvec: np.ndarray, user: str, layer: str, settings: Settings,
                    indexes: dict) -> tuple[str, dict]:
    """The fusion statement and parameters search_fusion.search binds for this query, captured by
    running it once through a spy connection (so this bench never drifts from search/fusion.py)."""
    seen: dict = {}

    class Spy:
        def execute(self, sql, params=()):
            if sql.lstrip().startswith("with "):
                seen["sql"], seen["params"] = sql, params
            return conn.execute(sql, params)

        def __getattr__(self, name):
            return getattr(conn, name)

    search_fusion.search(Spy(), search_fusion.Query(query, user=user, k=K, layer=layer, vector=qvec),
                         search_fusion.Engine(settings, **indexes))
    return seen["sql"], seen["params"]


def stage_times(conn, copies: VectorCopies, keywords: KeywordCopies, settings: Settings, params: dict,
                layer: str, user: str, query: str, qvec: np.ndarray, pool: int) -> tuple[float, float, list[int]]:
    """The keyword and vector sides of the bound statement run on their own, as search ran
    them: the keyword copy's bm25 (or the pruned MATCH through FTS5's), and vectors.nearest (the in-memory copy for a large
    user, else vec0's KNN). Returns both times and the atoms' vector top ids."""
    t_kw = t_vec = 0.0
    top: list[int] = []
    for name in [n for n in ("atoms", "turns") if layer in (n, "both")]:
        side = name[:-1]  # "atom" | "turn", as search names its parameters
        if f"{side}_keyword_hits" in params:  # ranked by the keyword copy: time that again
            t_kw += timed(lambda: keywords.top_k(conn, name, user, fts.query_terms(query), pool,
                                                 common=(settings.common_term_share, settings.common_term_rows)))[0]
        elif f"{side}_match" in params:
            weights = getattr(settings, f"{side}_columns")
            cte = search_fusion._keyword_cte(f"{name}_fts", weights, f"{side}_match")
            t_kw += timed(lambda: conn.execute(cte, params).fetchall())[0]
        t, near = timed(lambda: vectors.nearest(conn, name, user, qvec, pool, copies=copies,
                                                rescore=settings.vector_rescore))
        t_vec += t
        if name == "atoms":
            top = [row_id for row_id, _ in near]
    return t_kw, t_vec, top


STAGES = ("keyword", "vector", "statement", "search", "rrf_search", "flat_search", "exact_search", "main_search",
          "plain_search", "plain_k_search", "baseline_search")


def plain_search(conn, query: str, qvec: np.ndarray, user: str, layer: str, k: int, pool: int) -> list[tuple[str, int]]:
    """The design a user could build in an afternoon on the same file: FTS5 bm25 over the query's
    words (memdb's segmentation, so Chinese matches at all; scoped by the user tag), sqlite-vec's
    KNN over the user's partition, and reciprocal rank fusion (k = 60) in Python over every list;
    the k best as (layer, id)."""
    tag = db_rows.user_tag(user)
    terms = " OR ".join(text.quote(t) for t in fts.query_terms(query))
    fused: dict[tuple[str, int], float] = {}
    for name in [n for n in ("atoms", "turns") if layer in (n, "both")]:
        lists = []
        if terms:
            lists.append([r[0] for r in conn.execute(
                f'select rowid from "{name}_fts" where "{name}_fts" match ? order by rank limit ?',
                (f'u : "{tag}" AND ({terms})', pool))])
        key, active = ("atom_id", " and active = 1") if name == "atoms" else ("turn_id", "")
        lists.append([r[0] for r in conn.execute(
            f"select {key} from {name}_vec where embedding match ? and k = ? and user = ?{active}",
            (qvec.astype(np.float32).tobytes(), pool, user))])
        for ranked in lists:
            for rank, row_id in enumerate(ranked):
                fused[(name[:-1], row_id)] = fused.get((name[:-1], row_id), 0.0) + 1.0 / (60 + rank + 1)
    best = sorted(fused, key=lambda hit: -fused[hit])[:k]
    for side in ("atom", "turn"):  # what a caller shows: the rows' text
        ids = [i for s, i in best if s == side]
        if ids:
            conn.execute(f'select "id", "{"text" if side == "atom" else "content"}" from "{side}s" '
                         'where "id" in (select value from json_each(?))', (json.dumps(ids),)).fetchall()
    return best


def load_main(root: Path) -> dict:
    """Another checkout's memdb package (today's main), imported beside this one as memdb_main so
    that both run on the same file in the same process, query by query."""
    import importlib
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="memdb_main_"))
    shutil.copytree(root / "memdb", folder / "memdb_main")
    sys.path.insert(0, str(folder))
    return {name: importlib.import_module(f"memdb_main.{name}") for name in
            ("settings", "search.fusion", "index.copies", "index.fts", "index.keywords")}


def gold_ids(conn, q: dict) -> set[int]:
    """The atom a synthetic query was written from, and the user's atoms with the same line."""
    line = conn.execute('select "text" from "atoms" where "id" = ?', (q["atom_id"],)).fetchone()[0]
    return {r[0] for r in conn.execute('select "id" from "atoms" where "user" = ? and "text" = ?', (q["user"], line))}


def rank_of(gold: set[int], hits: list) -> int | None:
    hits = [h if isinstance(h, tuple) else (h.layer, h.id) for h in hits]
    return next((i for i, (layer, row_id) in enumerate(hits) if layer == "atom" and row_id in gold), None)


def quality(ranks: list[int | None]) -> dict:
    return {"queries": len(ranks), "hit_at_10": round(statistics.fmean(r is not None for r in ranks), 3),
            "mrr": round(statistics.fmean(1 / (1 + r) if r is not None else 0 for r in ranks), 3)}


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def all_vectors(conn, table: str, key: str, users: set[str], active_only: bool) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    where = " where active = 1" if active_only else ""
    rows: dict[str, list] = {u: [] for u in users}
    for user, id_, blob in conn.execute(f"select user, {key}, embedding from {table}{where}"):
        if user in rows:
            rows[user].append((id_, blob))
    out = {}
    for user, items in rows.items():
        ids = np.fromiter((i for i, _ in items), dtype=np.int64, count=len(items))
        out[user] = (ids, np.frombuffer(b"".join(b for _, b in items), dtype=np.float32).reshape(len(items), -1))
    return out


def floor_topk(mat: np.ndarray, ids: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    """Exact cosine top-k: vectors are unit length, so a matrix-vector product and a partition."""
    scores = mat @ q
    top = np.argpartition(-scores, k)[:k] if len(scores) > k else np.arange(len(scores))
    return ids[top[np.argsort(-scores[top])]]


def cmd_measure(args: argparse.Namespace) -> dict:
    from threadpoolctl import threadpool_limits

    from memdb.models import embedders

    conn = connection.connect(args.db)
    overrides = {"keyword_postings": args.postings, "vector_rescore": args.rescore,
                 "keyword_copy_shared": True if args.keyword_shared else None,
                 "vector_copy_min": args.copy_min, "keyword_copy_min": args.copy_min}
    settings = Settings(**{name: value for name, value in overrides.items() if value is not None})
    users = [r[0] for r in conn.execute('select distinct "user" from "atoms" limit 2000')]
    if args.insert_only:  # insert rates alone: a 1M file's search loop takes long
        copies = VectorCopies(vector_copy_min=settings.vector_copy_min, vector_copy_mb=args.copy_mb)
        indexes = {"copies": copies, "term_counts": TermCounts(growth=settings.term_counts_growth)}
        return {"insert": insert_rates(conn, users[0], settings, args.insert, args.absorb, indexes, args.absorb_batch)}
    rng = random.Random(3)
    qusers = users if len(users) == 1 else rng.sample(users, min(len(users), args.queries))
    qs = []
    per_user = max(1, args.queries // len(qusers))
    for u in qusers:
        qs += [dict(q, user=u) for q in synth.queries(conn, u, per_user, seed=sum(map(ord, u)))]
    qs = qs[: args.queries]
    embedder = embedders.load("minilm")  # the committed scale figures use MiniLM vectors
    t_embed, qvecs = timed(lambda: embedder.embed([q["query"] for q in qs]))
    out: dict = {"queries": len(qs), "query_langs": {l: sum(q["lang"] == l for q in qs) for l in ("en", "zh")},
                 "query_embed_ms_per_query": round(1000 * t_embed / len(qs), 2)}

    # What Memory keeps per connection: the vector copies and the term counts (index/).
    copies = VectorCopies(vector_copy_min=settings.vector_copy_min, vector_copy_mb=args.copy_mb)
    keywords = KeywordCopies(keyword_copy_min=settings.keyword_copy_min, keyword_copy_mb=args.keyword_copy_mb,
                             atom_columns=settings.atom_columns, turn_columns=settings.turn_columns,
                             shared=settings.keyword_copy_shared)
    indexes = {"copies": copies, "term_counts": TermCounts(growth=settings.term_counts_growth), "keywords": keywords}
    engine = search_fusion.Engine(settings, **indexes)
    # The reference: the same copies, every vector ranked exactly, every query term scored by bm25
    # (the keyword copies'; with the user's own statistics in a file of many users).
    exact = search_fusion.Engine(dataclasses.replace(settings, vector_rescore=0), **indexes)
    # memdb ranking as the plain design does, on the same copies: reciprocal rank fusion, no
    # confidence or freshness scaling, no relevance floor, every query term (the synthetic
    # atoms' dates are spread at random, and the plain design weighs no freshness).
    flat = search_fusion.Engine(dataclasses.replace(settings, fusion="rrf", confidence_floor=1.0, freshness_floor=1.0,
                                                    min_similarity=-1.0, common_term_share=1.0), **indexes)
    main_search = None
    if args.main:  # today's main, on its own copies
        m = load_main(Path(args.main))
        ms = m["settings"].Settings()
        mindexes = {"copies": m["index.copies"].VectorCopies(vector_copy_min=ms.vector_copy_min, vector_copy_mb=args.copy_mb),
                    "term_counts": m["index.fts"].TermCounts(growth=ms.term_counts_growth),
                    "keywords": m["index.keywords"].KeywordCopies(
                        keyword_copy_min=ms.keyword_copy_min, keyword_copy_mb=args.keyword_copy_mb,
                        atom_columns=ms.atom_columns, turn_columns=ms.turn_columns, shared=ms.keyword_copy_shared)}

        mf = m["search.fusion"]
        if hasattr(mf, "Query"):  # search(conn, Query, Engine), since issue 27
            mengine = mf.Engine(ms, **mindexes)

            def main_search(q, v, layer):
                return mf.search(conn, mf.Query(q["query"], user=q["user"], k=K, layer=layer, vector=v), mengine)
        else:
            def main_search(q, v, layer):
                return mf.search(conn, q["query"], user=q["user"], k=K, layer=layer, settings=ms,
                                 query_vector=v, **mindexes)

    def ours(q, v, layer, which=engine):
        return search_fusion.search(conn, search_fusion.Query(q["query"], user=q["user"], k=K, layer=layer, vector=v), which)

    pool = max(settings.candidate_pool, settings.pool_per_hit * K)
    # The first search of each user reads their vectors into memory (above vector_copy_min).
    first = [timed(lambda q=q, v=v: ours(q, v, "both"))[0]
             for q, v in {q["user"]: (q, v) for q, v in zip(qs, qvecs)}.values()]
    out["first_search_ms"] = summary(first)
    # Keyword copies of large users are built in the background (Memory.search starts them once
    # it is done): the figures below are those of a process that has them.
    out["keyword_copies_ready_ms"] = round(1000 * timed(keywords.wait)[0], 1)
    if main_search is not None:
        out["main_first_search_ms"] = summary([timed(lambda q=q, v=v: main_search(q, v, "both"))[0]
                                               for q, v in {q["user"]: (q, v) for q, v in zip(qs, qvecs)}.values()])
    out["copies"] = {"count": len(copies.copies), "mb": round(sum(c.nbytes for c in copies.copies.values()) / 2**20, 1),
                     "vector_copy_mb": args.copy_mb,
                     "keyword_copies": len(keywords.copies), "keyword_copies_mb": round(sum(
                         c.nbytes for c in keywords.copies.values()) / 2**20, 1), "keyword_copy_mb": args.keyword_copy_mb,
                     "keyword_vocabulary": len(keywords.vocabulary)}
    # Warm the page cache and SQLite's cache the way a running agent would have it.
    for q, v in list(zip(qs, qvecs))[:min(20, max(3, len(qs) // 5))]:
        ours(q, v, "both")
        if main_search is not None:
            main_search(q, v, "both")

    # In the same loop, query by query: the reference (exact), today's main, the plain design
    # (FTS5 bm25 + vec0 KNN + RRF in Python) and every side asked of SQLite through memdb's
    # fusion (vec0 KNN, bm25 on all terms).
    plain = Settings(keyword_postings=0)
    times: dict[tuple, list[float]] = {}
    knn_ids: list[list[int]] = []
    found: dict[str, list[int | None]] = {"memdb": [], "exact": [], "main": [], "plain": [], "baseline": [],
                                          "rrf": [], "plain_k": [], "flat": []}
    for i, (q, v) in enumerate(zip(qs, qvecs)):
        gold = gold_ids(conn, q)
        for layer in ("atoms", "both"):
            sql, params = bound_statement(conn, q["query"], v, q["user"], layer, settings, indexes)
            t_kw, t_vec, top = stage_times(conn, copies, keywords, settings, params, layer, q["user"], q["query"], v, pool)
            if layer == "atoms":
                knn_ids.append(top)
            t_stmt, _ = timed(lambda: conn.execute(sql, params).fetchall())
            t_search, hits = timed(lambda: ours(q, v, layer))
            t_exact, hits_exact = timed(lambda: ours(q, v, layer, exact))
            t_plain, hits_plain = timed(lambda: plain_search(conn, q["query"], v, q["user"], layer, K, pool))
            # For a comparison at equal recall: memdb with reciprocal rank fusion (the plain
            # design's fusion), and the plain design asking each side for only k candidates.
            t_rrf, hits_rrf = timed(lambda: search_fusion.search(conn, search_fusion.Query(
                q["query"], user=q["user"], k=K, layer=layer, vector=v, fusion="rrf"), engine))
            t_plain_k, hits_plain_k = timed(lambda: plain_search(conn, q["query"], v, q["user"], layer, K, K))
            t_flat, hits_flat = timed(lambda: ours(q, v, layer, flat))
            stages = [("keyword", t_kw), ("vector", t_vec), ("statement", t_stmt), ("search", t_search),
                      ("exact_search", t_exact), ("plain_search", t_plain), ("rrf_search", t_rrf),
                      ("plain_k_search", t_plain_k), ("flat_search", t_flat)]
            ranks = {"memdb": hits, "exact": hits_exact, "plain": hits_plain, "rrf": hits_rrf, "plain_k": hits_plain_k,
                     "flat": hits_flat}
            if main_search is not None:
                t_main, ranks["main"] = timed(lambda: main_search(q, v, layer))
                stages.append(("main_search", t_main))
            if i < args.baseline_queries:
                t_base, ranks["baseline"] = timed(lambda: search_fusion.search(
                    conn, search_fusion.Query(q["query"], user=q["user"], k=K, layer=layer, vector=v),
                    search_fusion.Engine(plain)))
                stages.append(("baseline_search", t_base))
            if layer == "atoms":
                for name, got in ranks.items():
                    found[name].append(rank_of(gold, got))
            for stage, t in stages:
                times.setdefault((layer, stage), []).append(t)
    found = {name: ranks for name, ranks in found.items() if ranks}
    out["latency_ms"] = {layer: {stage: summary(times[(layer, stage)]) for stage in STAGES if (layer, stage) in times}
                         for layer in ("atoms", "both")}
    for other in ("baseline", "plain", "main", "exact", "plain_k"):
        if f"{other}_search" in out["latency_ms"]["atoms"]:
            out[f"search_speedup_vs_{other}"] = {
                layer: {p: round(out["latency_ms"][layer][f"{other}_search"][p] / out["latency_ms"][layer]["search"][p], 2)
                        for p in ("p50", "p95")} for layer in ("atoms", "both")}
    # The plain design beside memdb with its fusion (RRF), and ranking as it does (flat): the
    # pairs to compare where hit@10 is the same.
    for variant in ("rrf", "flat"):
        out[f"plain_over_{variant}"] = {layer: {p: round(out["latency_ms"][layer]["plain_search"][p] /
                                                         out["latency_ms"][layer][f"{variant}_search"][p], 2)
                                                for p in ("p50", "p95")} for layer in ("atoms", "both")}
    out["gold_atoms"] = {name: quality(ranks) for name, ranks in found.items()}
    out["maxrss_mb_search"] = round(maxrss_mb())

    # The floor: the same vectors in memory, exact top-k by numpy.
    # vec0 does not narrow a plain scan by partition key: read each table once, split by user.
    atoms_by_user = all_vectors(conn, "atoms_vec", "atom_id", set(qusers), True)
    turns_by_user = all_vectors(conn, "turns_vec", "turn_id", set(qusers), False)
    mats = {u: (atoms_by_user[u], turns_by_user[u]) for u in qusers}
    floor: dict[str, list[float]] = {"atoms_1t": [], "both_1t": [], "atoms_nt": [], "both_nt": []}
    recall = []
    for threads, tag in ((1, "1t"), (None, "nt")):
        with threadpool_limits(limits=threads):
            for i, (q, v) in enumerate(zip(qs, qvecs)):
                (aid, amat), (tid, tmat) = mats[q["user"]]
                t_a, top = timed(lambda: floor_topk(amat, aid, v, pool))
                t_t, _ = timed(lambda: floor_topk(tmat, tid, v, pool))
                floor[f"atoms_{tag}"].append(t_a)
                floor[f"both_{tag}"].append(t_a + t_t)
                if tag == "1t":
                    recall.append(len(set(top[:K].tolist()) & set(knn_ids[i][:K])) / K)
    out["floor_ms"] = {name: summary(v) for name, v in floor.items()}
    out["knn_recall_at_10_vs_exact"] = round(statistics.fmean(recall), 4)
    out["vector_over_floor"] = {
        layer: {"p50": round(out["latency_ms"][layer]["vector"]["p50"] / out["floor_ms"][f"{layer}_1t"]["p50"], 2),
                "p50_vs_multithread": round(out["latency_ms"][layer]["vector"]["p50"] / out["floor_ms"][f"{layer}_nt"]["p50"], 2)}
        for layer in ("atoms", "both")}
    out["maxrss_mb_with_floor"] = round(maxrss_mb())
    try:
        out["insert"] = insert_rates(conn, qusers[0], settings, args.insert, args.absorb,
                                     {"copies": copies, "term_counts": indexes["term_counts"]}, args.absorb_batch)
    except Exception as exc:  # e.g. a file built before a schema change: keep the rest
        out["insert"] = {"error": f"{type(exc).__name__}: {exc}"}
    out["size"] = sizes(conn)
    if args.quant:
        u = qusers[0]
        (aid, amat), _ = mats[u]
        out["quant"] = quant(conn, u, aid, amat, [v for q, v in zip(qs, qvecs) if q["user"] == u][:args.quant_queries],
                             pool, Path(args.db + ".quant"))
    conn.close()
    return out


class _Rollback(Exception):
    pass


def insert_rates(conn, user: str, settings: Settings, n_plain: int, n_absorb: int, indexes: dict,
                 batch: int = 12) -> dict:
    """atoms/s on the built file, without dedup (insert_atom), with (absorb, through the same
    copies and term counts search uses), and with the atoms ranked by batch as extraction hands
    them over (copies.expect before each `batch` atoms, as Memory does); rolled back. The
    batched run must take the same actions as the one-by-one run."""
    if max(n_plain, n_absorb) <= 0:
        return {}
    pool_bases = synth.bases(synth.POOL)
    pool = synth.pool_vectors(pool_bases)
    rng = random.Random(9)
    nrng = np.random.default_rng(9)
    turn_id = conn.execute('select max("id") from "turns" where "user" = ?', (user,)).fetchone()[0]
    ts = conn.execute('select "ts" from "turns" where "id" = ?', (turn_id,)).fetchone()[0]
    ids = [rng.randrange(len(pool_bases)) for _ in range(max(n_plain, n_absorb))]
    records = [synth.record_for(pool_bases[i], rng.choice(["Alice", "Bob", "小王"]), dt.date(2023, 5, 1), rng) for i in ids]
    vectors = synth.derive(pool, np.array(ids), nrng)
    out: dict = {}
    decisions: dict[str, list] = {}
    indexes["copies"].sync(conn, "atoms", user)  # as extraction does before each batch
    for name, n in (("plain", n_plain), ("absorb", n_absorb), ("absorb_batched", n_absorb)):
        if n <= 0:
            continue
        actions: dict[str, int] = {}
        decisions[name] = []
        t0 = time.perf_counter()
        try:
            with connection.write(conn):
                for i, (record, vector) in enumerate(zip(records[:n], vectors[:n])):
                    if name == "absorb_batched" and i % batch == 0:
                        indexes["copies"].expect(vectors[i:i + batch])
                    if name == "plain":
                        db_rows.insert_atom(conn, user=user, record=record, confidence=0.8, turn_ids=[turn_id],
                                            first_seen=ts, last_seen=ts, vector=vector)
                    else:
                        action, atom_id = absorb.absorb(conn,
                                                        absorb.Incoming(user=user, record=record,
                                                                        confidence=0.8, turn_ids=[turn_id],
                                                                        ts=ts, vector=vector),
                                                        absorb.Engine(settings, **indexes))
                        actions[action] = actions.get(action, 0) + 1
                        decisions[name].append((action, atom_id))
                seconds = time.perf_counter() - t0  # before the rollback: commit cost is not in it
                raise _Rollback
        except _Rollback:
            pass
        out[f"{name}_atoms"] = n
        out[f"{name}_atoms_per_s"] = round(n / seconds, 1)
        if actions:
            out[f"{name}_actions"] = actions
    indexes["copies"].expect([])
    if n_absorb > 0:
        out["absorb_batch"] = batch
        out["batched_decisions_identical"] = decisions["absorb"] == decisions["absorb_batched"]
    return out


def sizes(conn) -> dict:
    atoms, turns = conn.execute('select (select count(*) from atoms), (select count(*) from turns)').fetchone()
    page = conn.execute("pragma page_size").fetchone()[0]
    total = conn.execute("pragma page_count").fetchone()[0] * page
    groups = {"atom vectors": "atoms_vec", "turn vectors": "turns_vec", "atom FTS": "atoms_fts",
              "turn FTS": "turns_fts", "atom rows": "atoms", "turn rows": "turns"}
    by_table = dict(conn.execute("select name, sum(pgsize) from dbstat group by name").fetchall())
    split = {}
    for label, prefix in groups.items():
        if label.endswith("rows"):  # the table itself and its unique-constraint index
            split[label] = by_table.get(prefix, 0) + by_table.get(f"sqlite_autoindex_{prefix}_1", 0)
        else:
            split[label] = sum(v for k, v in by_table.items() if k.startswith(prefix + "_"))
    split["sources"] = by_table.get("atom_sources", 0)
    split["indexes"] = sum(v for k, v in by_table.items() if k.startswith(("atoms_by", "turns_by", "turns_pending", "atom_sources_by", "atoms_superseded")))
    split["other"] = total - sum(split.values())
    return {"atoms": atoms, "turns": turns, "file_bytes": total, "bytes_per_atom": round(total / atoms),
            "bytes_per_atom_by_part": {k: round(v / atoms) for k, v in split.items()}}


# ---------------------------------------------------------------- quantisation


def quant(conn, user: str, ids: np.ndarray, mat: np.ndarray, qvecs: list[np.ndarray], pool: int, scratch: Path) -> dict:
    """int8 and binary quantised KNN on the user's vectors, alone and with float rescoring.

    The scratch table has the shape a quantised atoms_vec would have: the float vector (for
    rescoring), its int8 and 1-bit copies, the user partition and the active flag, in a file
    attached beside the measured one. A quantised KNN takes factor × k candidates and the
    float vectors of those candidates rank them (point lookups by rowid through json_each).
    recall@10 is against numpy's exact top 10; recall@pool against its exact top `pool` (the
    candidates the fusion statement takes per side)."""
    dim = mat.shape[1]
    scratch.unlink(missing_ok=True)
    conn.execute(f"attach '{scratch}' as q")
    conn.execute(f"create virtual table q.v using vec0(atom_id integer primary key, user text partition key, "
                 f"active integer, embedding float[{dim}] distance_metric=cosine, "
                 f"e8 int8[{dim}] distance_metric=cosine, eb bit[{dim}])")
    # vec0 point lookups read through its chunk blobs (~0.4 ms each here), so the float copy
    # used for rescoring is also kept in a plain rowid table.
    conn.execute("create table q.f (atom_id integer primary key, embedding blob not null)")
    t0 = time.perf_counter()
    for lo in range(0, len(ids), 10_000):
        rows = [(int(i), user, m.tobytes()) for i, m in zip(ids[lo:lo + 10_000], mat[lo:lo + 10_000])]
        with connection.write(conn):
            conn.executemany("insert into q.v (atom_id, user, active, embedding, e8, eb) values "
                             "(?1, ?2, 1, ?3, vec_quantize_int8(?3, 'unit'), vec_quantize_binary(?3))", rows)
            conn.executemany("insert into q.f (atom_id, embedding) values (?, ?)", [(r[0], r[2]) for r in rows])
    out: dict = {"vectors": len(ids), "queries": len(qvecs), "build_s": round(time.perf_counter() - t0, 1)}
    exact = [floor_topk(mat, ids, v, pool).tolist() for v in qvecs]
    knn = "select atom_id from q.v where {col} match {q} and k = :k and user = :u and active = 1"
    rescorers = {
        "table": ("select f.atom_id from json_each(:cand) j join q.f f on f.atom_id = j.value "
                  "order by vec_distance_cosine(f.embedding, :v) limit :n"),
        "vec0": ("select v.atom_id from json_each(:cand) j join q.v v on v.atom_id = j.value "
                 "order by vec_distance_cosine(v.embedding, :v) limit :n"),
    }
    variants = [("float32", "embedding", ":v", (1,)),
                ("int8", "e8", "vec_quantize_int8(:v, 'unit')", (1, 4, 10)),
                ("binary", "eb", "vec_quantize_binary(:v)", (1, 4, 10, 20))]
    sizes_n = (K, pool)
    if len(ids) > 300_000:
        # At 1M a KNN with k in the thousands takes many seconds: int8 (no faster than float
        # at 100k, and less exact) and the pool-sized variants are left to the 100k run.
        variants = [variants[0], ("binary", "eb", "vec_quantize_binary(:v)", (1, 20, 40))]
        sizes_n = (K,)
    for name, col, qexpr, factors in variants:
        sql = knn.format(col=col, q=qexpr)
        for factor, n, via in [(f, n, via) for f in factors for n in sizes_n
                               for via in (("table",) if f == 1 else ("table", "vec0"))]:
            if via == "vec0" and (n != K or factor != 4):
                continue  # slow: measured once to show why the plain table is there
            lat, rec = [], []
            for v, gold in zip(qvecs, exact):
                p = {"v": v.tobytes(), "k": n * factor, "u": user, "n": n}
                t0 = time.perf_counter()
                cand = [r[0] for r in conn.execute(sql, p)]
                if factor > 1:
                    p["cand"] = json.dumps(cand)
                    cand = [r[0] for r in conn.execute(rescorers[via], p)]
                lat.append(time.perf_counter() - t0)
                rec.append(len(set(cand[:n]) & set(gold[:n])) / n)
            label = name + (f"+rescore{factor}x" + ("(vec0 lookups)" if via == "vec0" else "") if factor > 1 else "") + f"@{n}"
            out[label] = {"latency_ms": summary(lat), f"recall_at_{n}": round(statistics.fmean(rec), 4)}
            print(f"  quant {label}: p50 {out[label]['latency_ms']['p50']:.1f} ms, recall {out[label][f'recall_at_{n}']}", file=sys.stderr)
    conn.execute("detach q")
    scratch.unlink(missing_ok=True)
    out.update(numpy_binary(mat, qvecs, pool))
    return out


def numpy_binary(mat: np.ndarray, qvecs: list[np.ndarray], pool: int) -> dict:
    """The same idea in memory, beside the exact scan the cache does: 1-bit codes of the
    vectors, Hamming distance by XOR and popcount, the factor × pool nearest rescored with
    their float vectors. Would it beat the exact matrix-vector product it would replace?"""
    codes = np.packbits(mat > 0, axis=1).view(np.uint64)
    exact = [np.argsort(-(mat @ v))[:pool] for v in qvecs]
    out: dict = {"numpy_exact": {"latency_ms": summary([timed(lambda v=v: np.argpartition(-(mat @ v), pool)[:pool])[0]
                                                          for v in qvecs])}}
    for factor in (10, 20, 50):
        lat, rec10, recpool = [], [], []
        for v, gold in zip(qvecs, exact):
            def ranked(v=v):
                distance = np.bitwise_count(codes ^ np.packbits(v > 0).view(np.uint64)).sum(axis=1, dtype=np.uint16)
                candidates = np.argpartition(distance, factor * pool)[: factor * pool]
                scores = mat[candidates] @ v
                return candidates[np.argsort(-scores)[:pool]]
            t, top = timed(ranked)
            lat.append(t)
            rec10.append(len(set(top[:K].tolist()) & set(gold[:K].tolist())) / K)
            recpool.append(len(set(top.tolist()) & set(gold.tolist())) / pool)
        out[f"numpy_binary+rescore{factor}x@{pool}"] = {
            "latency_ms": summary(lat), "recall_at_10": round(statistics.fmean(rec10), 4),
            f"recall_at_{pool}": round(statistics.fmean(recpool), 4)}
    return out


# ---------------------------------------------------------------- driver


def child(mode: str, **kw) -> dict:
    cmd = [sys.executable, __file__, f"_{mode}"] + [f"--{k.replace('_', '-')}={v}" for k, v in kw.items() if v is not None and v is not False]
    cmd = [c if not c.endswith("=True") else c[:-5] for c in cmd]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def plot(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    single = [(CONFIGS[n][0], r) for n, r in results.items() if n in CONFIGS and CONFIGS[n][1] == 1 and "latency_ms" in r]
    single.sort(key=lambda x: x[0])
    if not single:
        return
    xs = [s for s, _ in single]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, layer in zip(axes, ("atoms", "both")):
        for stage, style in (("search", "o-"), ("statement", "s--"), ("vector", "^-"), ("keyword", "v-")):
            ax.plot(xs, [r["latency_ms"][layer][stage]["p95"] for _, r in single], style, label=f"{stage} p95")
        ax.plot(xs, [r["latency_ms"][layer]["search"]["p50"] for _, r in single], "o:", label="search p50")
        ax.plot(xs, [r["floor_ms"][f"{layer}_1t"]["p95"] for _, r in single], "k-", label="numpy floor p95 (1 thread)")
        ax.plot(xs, [r["floor_ms"][f"{layer}_nt"]["p95"] for _, r in single], "k--", label="numpy floor p95 (all threads)")
        if all("baseline_search" in r["latency_ms"][layer] for _, r in single):
            ax.plot(xs, [r["latency_ms"][layer]["baseline_search"]["p95"] for _, r in single], "x:",
                    color="grey", label="without the cache p95")
        ax.axhline(20, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("atoms held by the user")
        ax.set_ylabel("ms")
        ax.set_title(f'layer="{layer}"')
        ax.legend(fontsize=8)
    fig.suptitle("memdb search latency by stage vs numpy brute force (one user)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode")
    b = sub.add_parser("_build")
    b.add_argument("--db", required=True)
    b.add_argument("--atoms", type=int, required=True)
    b.add_argument("--users", type=int, default=1)
    m = sub.add_parser("_measure")
    m.add_argument("--db", required=True)
    for p in (parser, m):
        p.add_argument("--queries", type=int, default=300)
        p.add_argument("--insert", type=int, default=2000, help="atoms for the plain insert rate")
        p.add_argument("--absorb", type=int, default=300, help="atoms for the insert rate with dedup")
        p.add_argument("--absorb-batch", type=int, default=12,
                       help="atoms ranked together in the batched dedup run (an extraction batch's)")
        p.add_argument("--insert-only", action="store_true", help="measure the insert rates alone")
        p.add_argument("--quant", action="store_true", help="also measure int8/binary quantised KNN")
        p.add_argument("--quant-queries", type=int, default=100)
        p.add_argument("--copy-mb", type=float, default=Settings().vector_copy_mb,
                       help="memory for in-process vector copies (Settings.vector_copy_mb)")
        p.add_argument("--keyword-copy-mb", type=float, default=Settings().keyword_copy_mb,
                       help="memory for in-process keyword copies (Settings.keyword_copy_mb; 0: FTS5 answers)")
        p.add_argument("--keyword-shared", action="store_true",
                       help="keyword copies in files of many users too, scored with each user's statistics "
                            "(Settings.keyword_copy_shared)")
        p.add_argument("--postings", type=int, default=None,
                       help="Settings.keyword_postings for this run (default: the library's)")
        p.add_argument("--rescore", type=int, default=None,
                       help="Settings.vector_rescore for this run (default: the library's; 0: exact vectors)")
        p.add_argument("--copy-min", type=int, default=None,
                       help="Settings.vector_copy_min and keyword_copy_min for this run (default: the library's)")
        p.add_argument("--main", default=None,
                       help="a checkout of today's main (its root): its search runs in the same loop")
        p.add_argument("--baseline-queries", type=int, default=10**9,
                       help="queries also run without the cache (vec0 + full bm25); slow at 1M")
    parser.add_argument("--configs", default="10k,100k", help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--dir", type=Path, default=Path("/tmp"), help="where the files are built and kept")
    parser.add_argument("--out", type=Path, default=RESULTS / "scale.json")
    args = parser.parse_args()
    if args.mode == "_build":
        print(json.dumps(cmd_build(args)))
        return
    if args.mode == "_measure":
        print(json.dumps(cmd_measure(args)))
        return

    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    for name in args.configs.split(","):
        atoms, users = CONFIGS[name]
        db = args.dir / f"memdb_scale_{name}.db"
        if not db.exists():
            print(f"[{name}] building {db}", file=sys.stderr)
            child("build", db=db, atoms=atoms, users=users)
        entry = {"build": json.loads(sidecar(db).read_text()) if sidecar(db).exists() else None}
        print(f"[{name}] measuring", file=sys.stderr)
        measured = child("measure", db=db, queries=args.queries, insert=args.insert, absorb=args.absorb,
                         quant=args.quant, quant_queries=args.quant_queries, copy_mb=args.copy_mb,
                         keyword_copy_mb=args.keyword_copy_mb, keyword_shared=args.keyword_shared,
                         baseline_queries=args.baseline_queries, postings=args.postings, rescore=args.rescore,
                         main=args.main, copy_min=args.copy_min,
                         absorb_batch=args.absorb_batch, insert_only=args.insert_only)
        entry.update({"config": {"atoms": atoms, "users": users},
                      "settings": {"keyword_postings": args.postings if args.postings is not None else Settings().keyword_postings,
                                   "vector_copy_min": Settings().vector_copy_min, "vector_copy_mb": args.copy_mb,
                                   "keyword_copy_min": Settings().keyword_copy_min, "keyword_copy_mb": args.keyword_copy_mb,
                                   "keyword_copy_shared": args.keyword_shared or Settings().keyword_copy_shared,
                                   "vector_rescore": Settings().vector_rescore if args.rescore is None else args.rescore},
                      **measured,
                      "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                      "command": " ".join(["python", "bench/scale.py", *sys.argv[1:]]), "machine": machine()})
        key = name if args.postings is None else f"{name} postings={args.postings}"
        key += (" keyword_copy_shared" if args.keyword_shared else "") + (" insert" if args.insert_only else "")
        results[key] = entry
        args.out.write_text(json.dumps(results, indent=1, ensure_ascii=False))
        if args.insert_only:
            print(f"[{name}] insert {measured['insert']}", file=sys.stderr)
            continue
        lat = measured["latency_ms"]
        for layer in ("atoms", "both"):
            print(f"[{name}] {layer}: " + ", ".join(f"{stage} {x['p50']:.1f}/{x['p95']:.1f}" for stage, x in lat[layer].items()),
                  file=sys.stderr)
        print(f"[{name}] vector/floor {measured['vector_over_floor']['atoms']['p50']}x; gold {measured['gold_atoms']}",
              file=sys.stderr)
    plot(results, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
