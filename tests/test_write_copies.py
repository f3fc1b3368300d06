"""The write path's in-memory indexes (issue 29): deduplication ranks its keyword candidates in
the user's keyword copy exactly as FTS5's query does, inside the write transaction too (the
rows absorb writes reach the copy; a rollback takes them out again), and the vector copy reads
a transaction's own rows as they come, dropping them when it ends."""

from __future__ import annotations

import random

import numpy as np
import pytest

import memdb
from memdb import codec, flow, text
from memdb.db import connection
from memdb.index import fts, vectors
from memdb.index.copies import VectorCopies, VectorCopy
from memdb.index.engine import Engine
from memdb.layers import store
from memdb.extraction.records import Candidate
from memdb.lifecycle import absorb
from memdb.vecmath import unit

NAMES = ["Mira", "Tomas", "Ines", "小李"]
THINGS = ["oolong tea", "kayaking", "the billing service", "Lisbon", "sourdough", "chess", "红茶", "jazz records"]
VERBS = ["likes", "avoids", "lives in", "maintains", "bakes", "喜欢"]
TS = "2026-03-01T00:00:00"


@pytest.fixture
def copied(db_path, embedder):
    """A Memory whose copies take every user (no minimum size)."""
    with memdb.open(db_path, embedder=embedder, extract="defer",
                    settings=memdb.Settings(keyword_copy_min=1, vector_copy_min=1)) as m:
        yield m


def records(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"kind": "fact", "subject": rng.choice(NAMES), "predicate": rng.choice(VERBS),
             "object": f"{rng.choice(THINGS)} and {rng.choice(THINGS)}"} for _ in range(n)]


def fill(mem, n: int, seed: int = 0) -> list[int]:
    """n atoms of user "u", each from a turn of its own, through absorb (so some merge)."""
    found = records(n, seed)
    turns = mem.add([{"content": codec.canonical_text(r), "ts": TS} for r in found], user="u")
    return [put(mem, r, t)[1] for r, t in zip(found, turns)]


def put(mem, record: dict, turn: int, keywords: bool = True) -> tuple[str, int]:
    vector = mem.embedding.embed([codec.canonical_text(record)])[0]
    engine = Engine(mem.settings, copies=mem.copies, term_counts=mem.term_counts,
                    keywords=mem.keywords if keywords else None)
    with connection.write(mem.conn):
        return absorb.absorb(mem.conn, absorb.Incoming(user="u", record=record, confidence=0.8, turn_ids=[turn], ts=TS,
                                                       vector=vector), engine)


def by_fts5(mem, record: dict) -> list[int]:
    """The keyword candidates as FTS5's query gives them (no keyword copy)."""
    line = codec.canonical_text(record)
    terms, sole = fts.match_terms(mem.conn, "atoms", "u", line, term_counts=mem.term_counts,
                                  postings=mem.settings.keyword_postings)
    match = fts.expression_for("atoms", "u", terms, sole=sole)
    return [r[0] for r in mem.conn.execute(
        'select f."rowid" from "atoms_fts" f join "atoms" a on a."id" = f."rowid" '
        'where "atoms_fts" match ? and a."status" != ? order by f."rank" limit ?',
        (match, codec.STATUSES["superseded"], mem.settings.dedup_candidates))] if match else []


def by_copy(mem, record: dict) -> list[int] | None:
    terms, _ = fts.match_terms(mem.conn, "atoms", "u", codec.canonical_text(record), term_counts=mem.term_counts,
                               postings=mem.settings.keyword_postings)
    return mem.keywords.dedup(mem.conn, "u", terms, mem.settings.dedup_candidates)


def snapshot(copy) -> tuple:
    return (copy.ids.tolist(), copy.versions.tolist(), copy.lengths.tolist(), copy.live.tolist(),
            len(copy.tail), copy.stamp)


def test_dedup_keyword_candidates_from_the_copy_are_fts5s(copied):
    fill(copied, 80)
    copied.keywords.sync(copied.conn, "atoms", "u")
    assert ("atoms", "u") in copied.keywords.copies
    for record in records(30, seed=5):
        assert by_fts5(copied, record) == by_copy(copied, record)
    with connection.write(copied.conn):  # superseded atoms count in the statistics, never as candidates
        absorb.supersede(copied.conn, by_fts5(copied, records(1, seed=5)[0])[0], by=1, at=TS)
    for record in records(30, seed=5):
        assert by_fts5(copied, record) == by_copy(copied, record)


def test_inside_a_write_the_copy_follows_the_rows_absorb_writes_and_merges(copied):
    fill(copied, 60)
    again = records(60, seed=0)[:10]  # said before: they merge, which re-indexes their source words
    new = records(20, seed=7)
    turns = copied.add([{"content": f"turn {i} about zebra crossings", "ts": TS} for i in range(30)], user="u")
    copied.keywords.sync(copied.conn, "atoms", "u")  # as flow.write does before its transaction
    engine = Engine(copied.settings, copies=copied.copies, term_counts=copied.term_counts, keywords=copied.keywords)
    actions = []
    with connection.write(copied.conn):
        for record, turn in zip(again + new, turns):
            vector = copied.embedding.embed([codec.canonical_text(record)])[0]
            actions.append(absorb.absorb(copied.conn, absorb.Incoming(
                user="u", record=record, confidence=0.8, turn_ids=[turn], ts=TS, vector=vector), engine)[0])
            for probe in records(6, seed=len(actions)) + [{"kind": "fact", "subject": "Mira", "predicate": "saw",
                                                          "object": "zebra crossings"}]:
                assert by_fts5(copied, probe) == by_copy(copied, probe)
        assert ("atoms", "u") in copied.keywords.overlays  # ranked in the copy, not by FTS5
    assert "merged" in actions and "new" in actions
    # Committed: the copy is exact as it stands, without reading the user's rows again.
    copy = copied.keywords.copies[("atoms", "u")]
    assert copy is copied.keywords._current(copied.conn, "atoms", "u")
    assert copy.stamp == (copied.conn.execute("pragma data_version").fetchone()[0], copied.conn.total_changes())
    for record in records(30, seed=11):
        assert by_fts5(copied, record) == by_copy(copied, record)


def test_a_write_whose_first_atom_fts5_ranks_still_ranks_the_rest_in_the_copy(copied):
    fill(copied, 60)
    turns = copied.add([{"content": f"turn {i} about otters", "ts": TS} for i in range(9)], user="u")
    copied.keywords.sync(copied.conn, "atoms", "u")  # as flow.write does before its transaction
    engine = Engine(copied.settings, copies=copied.copies, term_counts=copied.term_counts, keywords=copied.keywords)
    first = {"kind": "fact", "subject": "Mira", "predicate": "met", "object": "O'Neil"}  # FTS5 reads o'neil as a phrase
    with connection.write(copied.conn):
        for record, turn in zip([first] + records(8, seed=3), turns):
            vector = copied.embedding.embed([codec.canonical_text(record)])[0]
            absorb.absorb(copied.conn, absorb.Incoming(user="u", record=record, confidence=0.8, turn_ids=[turn], ts=TS,
                                                       vector=vector), engine)
            for probe in records(4, seed=turn):
                found = by_copy(copied, probe)
                assert found is not None and by_fts5(copied, probe) == found  # the copy's, following the writes
    # Committed: the copy is exact as it stands, without reading the user's rows again.
    copy = copied.keywords.copies[("atoms", "u")]
    assert copy is copied.keywords._current(copied.conn, "atoms", "u")
    assert copy.stamp == (copied.conn.execute("pragma data_version").fetchone()[0], copied.conn.total_changes())


def test_a_rolled_back_write_leaves_no_trace_in_the_copies(copied):
    fill(copied, 50)
    [turn] = copied.add([{"content": "walrus", "ts": TS}], user="u")
    copied.keywords.sync(copied.conn, "atoms", "u")
    copied.copies.sync(copied.conn, "atoms", "u")
    copy = copied.keywords.copies[("atoms", "u")]
    before = snapshot(copy)
    vectors_before = copied.copies.copies[("atoms", "u")].n
    engine = Engine(copied.settings, copies=copied.copies, term_counts=copied.term_counts, keywords=copied.keywords)
    walrus = {"kind": "fact", "subject": "Ines", "predicate": "keeps", "object": "a walrus"}
    vector = copied.embedding.embed([codec.canonical_text(walrus)])[0]
    walrus_only = {"kind": "fact", "subject": "walrus", "predicate": "walrus", "object": "walrus"}
    with pytest.raises(RuntimeError), connection.write(copied.conn):
        written = [absorb.absorb(copied.conn, absorb.Incoming(
            user="u", record=record, confidence=0.8, turn_ids=[turn], ts=TS,
            vector=copied.embedding.embed([codec.canonical_text(record)])[0]), engine)
            for record in [walrus, records(50, seed=0)[3]]]  # a new atom, then a merge
        assert ["new", "merged"] == [action for action, _ in written]
        # the new atom, and the merged one by its new source turn's words
        assert {atom_id for _, atom_id in written} == set(by_copy(copied, walrus_only))
        assert written[0][1] == vectors.nearest(copied.conn, "atoms", "u", vector, 1, copies=copied.copies)[0][0]
        raise RuntimeError("the batch fails")
    assert before == snapshot(copy)
    assert {} == copied.keywords.overlays and {} == copied.copies.pending
    assert vectors_before == copied.copies.copies[("atoms", "u")].n
    assert [] == by_copy(copied, walrus_only) == by_fts5(copied, walrus_only)
    assert by_fts5(copied, walrus) == by_copy(copied, walrus)
    # The id the rolled-back atom had is handed out again: the copies read the new row.
    other = {"kind": "fact", "subject": "Tomas", "predicate": "keeps", "object": "a walrus figurine"}
    action, atom_id = put(copied, other, turn)
    assert ("new", written[0][1]) == (action, atom_id)
    assert [atom_id] == by_copy(copied, walrus_only) == by_fts5(copied, walrus_only)
    near = copied.embedding.embed([codec.canonical_text(other)])[0]
    assert atom_id == vectors.nearest(copied.conn, "atoms", "u", near, 1, copies=copied.copies)[0][0]


def test_decisions_are_the_same_with_and_without_the_keyword_copy(db_path, tmp_path, embedder):
    settings = memdb.Settings(keyword_copy_min=1, vector_copy_min=1)
    found = {}
    for name, keywords in (("copy", True), ("fts5", False)):
        with memdb.open(tmp_path / f"{name}.db", embedder=embedder, extract="defer", settings=settings) as m:
            fill(m, 40)
            later = records(40, seed=3)
            turns = m.add([{"content": codec.canonical_text(r), "ts": TS} for r in later], user="u")
            m.keywords.sync(m.conn, "atoms", "u")
            found[name] = [put(m, r, t, keywords=keywords) for r, t in zip(later, turns)]
    assert found["fts5"] == found["copy"]
    assert {"merged", "new"} <= {a for a, _ in found["copy"]}


def test_inside_a_write_the_vector_copy_reads_only_the_new_rows(copied):
    fill(copied, 30)
    copies: VectorCopies = copied.copies
    copies.sync(copied.conn, "atoms", "u")
    held = copies.copies[("atoms", "u")]
    later = records(12, seed=9)
    turns = copied.add([{"content": codec.canonical_text(r), "ts": TS} for r in later], user="u")
    engine = Engine(copied.settings, copies=copies, term_counts=copied.term_counts, keywords=copied.keywords)
    with connection.write(copied.conn):
        for i, (record, turn) in enumerate(zip(later, turns)):
            vector = copied.embedding.embed([codec.canonical_text(record)])[0]
            _, atom_id = absorb.absorb(copied.conn, absorb.Incoming(user="u", record=record, confidence=0.8,
                                                                    turn_ids=[turn], ts=TS, vector=vector), engine)
            assert atom_id == vectors.nearest(copied.conn, "atoms", "u", vector, 1, copies=copies)[0][0]
            since = copies.pending[("atoms", "u")][2]
            written = copied.conn.execute('select count(*) from "atoms" where "id" > ?', (held.last_id,)).fetchone()[0]
            assert written == since.n  # each row read once, beside the copy
    assert {} == copies.pending


def test_an_atom_ranked_alone_is_shortlisted_by_its_codes_unless_dedup_rescore_is_0():
    rng = np.random.default_rng(0)
    copies = VectorCopies(vector_copy_min=1, vector_copy_mb=64)
    part_rows = 20_000
    matrix = rng.standard_normal((part_rows, 32)).astype(np.float32)
    part = VectorCopy(ids=np.arange(1, part_rows + 1), matrix=unit(matrix), n=part_rows)
    query = unit(matrix[123] + 0.05 * rng.standard_normal(32).astype(np.float32))
    copies.expect([query])
    shortlisted = copies._batch_rows(part, 8, 0, rescore=2)
    assert 1024 == len(shortlisted)  # at least MIN_SHORTLIST rows, not every one
    assert 123 in shortlisted  # the near duplicate's row
    exact = part.top_k(query, 8, None)
    among = part.top_k(query, 8, None, among=shortlisted)
    # the same rows; the shortlist's product is einsum, the full scan BLAS: scores agree to float32
    assert [i for i, _ in exact] == [i for i, _ in among]
    assert np.allclose([s for _, s in exact], [s for _, s in among], atol=1e-6)
    copies.expect([query])
    assert 8 * 4 == len(copies._batch_rows(part, 8, 0, rescore=0))  # exact: every vector read


def test_a_batch_ranked_with_rescore_shortlists_each_vector_as_it_would_be_alone():
    rng = np.random.default_rng(1)
    part_rows = 20_000
    matrix = unit(rng.standard_normal((part_rows, 32)).astype(np.float32))
    part = VectorCopy(ids=np.arange(1, part_rows + 1), matrix=matrix, n=part_rows)
    batch = unit(matrix[[5, 500, 5000]] + 0.05 * rng.standard_normal((3, 32)).astype(np.float32))
    copies = VectorCopies(vector_copy_min=1, vector_copy_mb=64)
    copies.expect(batch)
    together = [copies._batch_rows(part, 8, i, rescore=2) for i in range(3)]
    assert [1024] * 3 == [len(rows) for rows in together]  # shortlists, not one product over every row
    assert [5, 500, 5000] == [row for rows, row in zip(together, [5, 500, 5000]) if row in rows]
    for i, vector in enumerate(batch):
        alone = VectorCopies(vector_copy_min=1, vector_copy_mb=64)
        alone.expect([vector])
        assert alone._batch_rows(part, 8, 0, rescore=2).tolist() == together[i].tolist()
    assert together[1] is copies._batch_rows(part, 9, 1, rescore=2)  # scenario placement's k + 1: the same rows


# ---------------------------------------------------------------- the scenario index

TOPICS = [["payment", "refactor", "invoices", "ledger"], ["sourdough", "starter", "flour", "oven"],
          ["kayak", "river", "paddle", "rapids"], ["chess", "opening", "endgame", "tournament"]]


def topical(n: int, seed: int) -> list[dict]:
    """Records that fall in a few topics with words shared across them, so atoms join, seed,
    merge and split scenarios."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = rng.sample(rng.choice(TOPICS), 2) + [rng.choice(rng.choice(TOPICS))]
        out.append({"kind": rng.choice(["fact", "event", "preference"]), "subject": rng.choice(NAMES),
                    "predicate": rng.choice(VERBS), "object": " ".join(words)})
    return out


def placed(mem) -> list[tuple]:
    """Every scenario of "u" as placement left it: members and derived columns."""
    return mem.conn.execute(
        'select s."id", s."title", s."state", s."keywords", s."centroid", s."members", s."held", '
        '(select group_concat("atom_id") from (select "atom_id" from "scenario_atoms" m '
        'where m."scenario_id" = s."id" order by "atom_id")) from "scenarios" s where s."user" = ? order by s."id"',
        ("u",)).fetchall()


def test_the_scenario_index_places_atoms_as_the_scan_does(tmp_path, embedder):
    settings = memdb.Settings(scenario_max_members=6, scenario_merge_similarity=0.5, scenario_merge_keywords=0.3,
                              keyword_copy_min=1, vector_copy_min=1)
    found = {}
    for name in ("index", "scan"):
        with memdb.open(tmp_path / f"{name}.db", embedder=embedder, extract="defer", settings=settings) as m:
            if name == "scan":
                m.scenario_index = None  # flow.layers then reads every scenario for each atom
            later = topical(120, seed=2)
            turns = m.add([{"content": codec.canonical_text(r), "ts": TS} for r in later], user="u")
            for start in range(0, len(later), 10):  # a transaction per ten atoms, as extraction batches write
                with connection.write(m.conn):
                    for record, turn in zip(later[start:start + 10], turns[start:start + 10]):
                        vector = m.embedding.embed([codec.canonical_text(record)])[0]
                        flow.absorb(m, _candidate(record, turn), user="u", ts=TS, vector=vector)
            found[name] = placed(m)
    assert found["scan"] == found["index"]
    sizes = [row[5] for row in found["index"]]
    assert max(sizes) > 1 and min(sizes) == 1 and len(sizes) > 3  # atoms joined scenarios and seeded new ones


def _candidate(record: dict, turn: int) -> Candidate:
    return Candidate(record=record, confidence=0.8, turn_ids=[turn])


def test_the_scenario_index_is_kept_across_commits_and_dropped_by_a_rollback(copied, db_path, embedder):
    index = copied.scenario_index
    loads = []
    load = index._load
    index._load = lambda conn, user: loads.append(user) or load(conn, user)
    later = topical(12, seed=4)
    turns = copied.add([{"content": codec.canonical_text(r), "ts": TS} for r in later], user="u")

    def absorb_and_place(record: dict, turn: int) -> None:  # in a transaction begun as extraction begins a batch
        index.begin(copied.conn, "u")
        vector = copied.embedding.embed([codec.canonical_text(record)])[0]
        flow.absorb(copied, _candidate(record, turn), user="u", ts=TS, vector=vector)

    for record, turn in zip(later[:6], turns[:6]):
        with connection.write(copied.conn):
            absorb_and_place(record, turn)
    assert ["u"] == loads  # read once, then carried from commit to commit
    before = placed(copied)
    with pytest.raises(RuntimeError), connection.write(copied.conn):
        absorb_and_place(later[6], turns[6])
        assert before != placed(copied)
        raise RuntimeError("the batch fails")
    assert "u" not in index.copies and before == placed(copied)
    with memdb.open(db_path, embedder=embedder, extract="defer") as other:  # another connection's forget
        other.forget(user="u", atom_id=other.conn.execute('select min("atom_id") from "scenario_atoms"').fetchone()[0])
    with connection.write(copied.conn):
        held = index.get(copied.conn, "u")
        fresh = index._load(copied.conn, "u")
    assert ["u", "u", "u"] == loads  # read again after the rollback and after the other connection's write
    assert {sid: (s.keywords, s.members, None if s.vector is None else s.vector.tobytes())
            for sid, s in held.found.items()} == \
        {sid: (s.keywords, s.members, None if s.vector is None else s.vector.tobytes())
         for sid, s in fresh.found.items()}


def test_the_shortlists_cut_keeps_the_smallest_distances_lowest_rows_first():
    from memdb.index.copies import _smallest
    distance = np.array([5, 1, 3, 1, 3, 3, 0, 65535], np.uint16)
    assert [1, 3, 6, 2, 4] == _smallest(distance, 5).tolist()  # those under 3, then the first two 3s
    assert list(range(8)) == sorted(_smallest(distance, 8).tolist())
    rng = np.random.default_rng(1)
    many = rng.integers(0, 200, 50_000).astype(np.uint16)
    cut = _smallest(many, 1000)
    assert 1000 == len(set(cut.tolist()))
    assert many[cut].max() <= np.sort(many)[999]  # no row further than the 1,000th nearest


def fts5_count(mem, term: str, cap: int) -> int:
    return mem.conn.execute('select count(*) from (select 1 from "atoms_fts" where "atoms_fts" match ? limit ?)',
                            (text.quote(term), cap + 1)).fetchone()[0]


def test_the_keyword_copy_counts_terms_as_fts5_does_inside_a_write_too(copied):
    fill(copied, 60)
    copied.keywords.sync(copied.conn, "atoms", "u")
    terms = ["oolong", "kayaking", "tea", "lisbon", "chess", "喜欢", "mira", "nowhere", "红茶"]
    for cap in (2, 1000):
        assert [fts5_count(copied, t, cap) for t in terms] == copied.keywords.counts(copied.conn, "u", terms, cap)
    later = records(15, seed=11)
    turns = copied.add([{"content": codec.canonical_text(r), "ts": TS} for r in later], user="u")
    copied.keywords.sync(copied.conn, "atoms", "u")  # as flow.write does before its transaction
    engine = Engine(copied.settings, copies=copied.copies, term_counts=copied.term_counts, keywords=copied.keywords)
    with connection.write(copied.conn):  # the rows absorb writes and merges count at once
        for record, turn in zip(later, turns):
            vector = copied.embedding.embed([codec.canonical_text(record)])[0]
            absorb.absorb(copied.conn, absorb.Incoming(user="u", record=record, confidence=0.8, turn_ids=[turn], ts=TS,
                                                       vector=vector), engine)
            assert [fts5_count(copied, t, 1000) for t in terms] == copied.keywords.counts(copied.conn, "u", terms, 1000)
    assert None is copied.keywords.counts(copied.conn, "u", ["oolong tea"], 10)  # a phrase: FTS5 counts it


def test_term_counts_take_new_terms_from_the_counter_and_keep_them(copied):
    fill(copied, 20)
    asked = []

    def counter(todo: list[str], cap: int) -> list[int]:
        asked.append(list(todo))
        return [fts5_count(copied, t, cap) for t in todo]

    counts = fts.TermCounts()
    assert [fts5_count(copied, t, 50) for t in ["tea", "chess"]] == \
        counts.count(copied.conn, "atoms", ["tea", "chess"], 50, counter=counter)
    assert [fts5_count(copied, t, 50) for t in ["chess", "jazz"]] == \
        counts.count(copied.conn, "atoms", ["chess", "jazz"], 50, counter=counter)
    assert [["tea", "chess"], ["jazz"]] == asked  # each counted once
    assert [fts5_count(copied, "sourdough", 50)] == counts.count(copied.conn, "atoms", ["sourdough"], 50,
                                                                 counter=lambda todo, cap: None)  # FTS5 then


def test_placement_reads_member_vectors_once_and_a_rollback_drops_them(copied, monkeypatch):
    index = copied.scenario_index
    later = topical(30, seed=6)
    turns = copied.add([{"content": codec.canonical_text(r), "ts": TS} for r in later], user="u")
    looked = []
    lookup = store.atom_vectors

    def counted(conn, atom_ids, cache=None):
        looked.extend(i for i in atom_ids if cache is None or i not in cache)
        return lookup(conn, atom_ids, cache)

    monkeypatch.setattr(store, "atom_vectors", counted)
    with connection.write(copied.conn):
        index.begin(copied.conn, "u")
        for record, turn in zip(later[:20], turns[:20]):
            vector = copied.embedding.embed([codec.canonical_text(record)])[0]
            flow.absorb(copied, _candidate(record, turn), user="u", ts=TS, vector=vector)
    cached = index.copies["u"].vectors
    assert cached and len(looked) == len(set(looked))  # no vector read twice
    assert {i: v.tobytes() for i, v in lookup(copied.conn, list(cached)).items()} == \
        {i: v.tobytes() for i, v in cached.items()}
    with pytest.raises(RuntimeError), connection.write(copied.conn):
        index.begin(copied.conn, "u")
        for record, turn in zip(later[20:], turns[20:]):
            vector = copied.embedding.embed([codec.canonical_text(record)])[0]
            flow.absorb(copied, _candidate(record, turn), user="u", ts=TS, vector=vector)
        raise RuntimeError("the batch fails")
    assert "u" not in index.copies  # with the vectors of the atoms that were rolled back


def test_a_full_vector_cache_starts_afresh(copied, monkeypatch):
    fill(copied, 10)
    ids = [r[0] for r in copied.conn.execute('select "id" from "atoms" order by "id"')]
    monkeypatch.setattr(store, "MAX_CACHED_VECTORS", 4)
    cache: dict = {}
    found = store.atom_vectors(copied.conn, ids, cache)
    assert {i: v.tobytes() for i, v in store.atom_vectors(copied.conn, ids).items()} == \
        {i: v.tobytes() for i, v in found.items()}
    assert 0 < len(cache) <= 4


def test_sync_codes_a_copy_large_enough_to_be_shortlisted(copied, monkeypatch):
    fill(copied, 30)
    from memdb.index import copies as copies_module
    copied.copies.sync(copied.conn, "atoms", "u")
    held = copied.copies.copies[("atoms", "u")]
    assert held.codes is None  # 30 rows: ranked by every vector, never coded
    monkeypatch.setattr(copies_module, "MIN_SHORTLIST", 2)
    copied.add([{"content": "one more turn", "ts": TS}], user="u")
    copied.copies.sync(copied.conn, "atoms", "u")
    assert held.n == held.coded > 16  # before the write that will shortlist against them


def test_a_merge_rewrites_the_source_words_only_when_a_turn_is_new_to_the_atom(copied, monkeypatch):
    from memdb.db import rows as db_rows
    record = {"kind": "fact", "subject": "Ines", "predicate": "bakes", "object": "sourdough"}
    first, second = copied.add([{"content": "Ines bakes sourdough on sundays", "ts": TS},
                                {"content": "she still bakes it, rye now and then", "ts": TS}], user="u")
    _, atom_id = put(copied, record, first)
    rewritten = []
    reindex = db_rows.reindex_sources
    monkeypatch.setattr(db_rows, "reindex_sources", lambda conn, i: rewritten.append(i) or reindex(conn, i))
    assert ("merged", atom_id) == put(copied, record, first)  # the same turn again: words unchanged
    assert [] == rewritten
    assert ("merged", atom_id) == put(copied, record, second)
    assert [atom_id] == rewritten
    source = copied.conn.execute('select "source" from "atoms_fts" where "rowid" = ?', (atom_id,)).fetchone()[0]
    assert "rye" in source and "sundays" in source
    assert 3 == copied.conn.execute('select "seen" from "atoms" where "id" = ?', (atom_id,)).fetchone()[0]
