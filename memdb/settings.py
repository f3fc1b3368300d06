"""Every tuned number in one place: thresholds, weights and half-lives, with the defaults chosen
on the LoCoMo dev split (see bench/). Pass `memdb.open(..., settings=Settings(...))` to change them;
a Settings that cannot work (an unknown fusion, a weight out of range) raises InvalidInput when built.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import InvalidInput

FUSIONS = ("weighted", "rrf")
# The largest integer and number a setting takes: bound into SQL (64-bit) and multiplied there
# and in numpy, a larger one would overflow instead of meaning "no limit".
MAX_INT = 2**31 - 1
MAX_NUMBER = 1e12
KINDS = ("fact", "preference", "constraint", "event")
INTENTS = ("lookup", "time", "preference", "open")


@dataclass
class Settings:
    # Extraction: turns written per transaction (a crash loses at most these); earlier turns
    # of the session read with them (their speakers' names ground atoms), and how many of
    # those the model is shown before each turn as context only (0: the turn alone).
    extract_batch: int = 6
    extract_history: int = 3
    extract_context: int = 1
    # After the model's notes, notes taken from the turn's own statements that none covers
    # (extraction/clauses.py): the small model skips many plainly stated facts.
    extract_fill: bool = True
    # The model reads a turn only when those notes hold less than this share of its content
    # terms (0: only when the rules find nothing; 1: every turn, e.g. with a bigger model
    # behind an endpoint). On the dev gold, 0.5 saves a third of the calls at the same recall
    # (bench/atom_quality.py).
    extract_rules_cover: float = 0.0
    # Confidence of an extracted atom: about its own speaker, about someone else, and the
    # penalty when its sentence hedges ("maybe", "可能").
    confidence_own: float = 0.9
    confidence_other: float = 0.75
    confidence_hedge: float = 0.3
    # The extraction model (a GGUF, the bundled one by default) runs in a worker process of its
    # own (models/worker.py), so a crash, an abort, an out-of-memory kill or a hang in it is a
    # ModelError here, and the turns stay pending; model_worker=False runs it in this process
    # (no start-up cost, but a crash in llama.cpp ends the caller). A call that takes longer
    # than model_timeout seconds (loading included) has its worker stopped. An LLM object passed
    # to open() runs where it is; wrap it in models.worker.WorkerLLM to isolate it too.
    model_worker: bool = True
    model_timeout: float = 120.0
    # llama.cpp's extra buffer types (weight repacking; the AMX kernels, which crash on Q4_K_M
    # weights): None decides by the CPU (off where it reports AMX), True or False forces it.
    model_extra_buffers: bool | None = None

    # Dedup (lifecycle/; tuned with bench/dedup.py on bench/dedup_pairs.json, favouring
    # precision: a wrong merge loses a fact, a missed one only spends budget). A new atom
    # merges into one of the same user, subject, kind and polarity when either
    # - they fill the same slot (attribute key, preference target, or predicate + object, the
    #   values sharing at least merge_value_overlap of their terms) and the lines are at least
    #   merge_similarity_same_key similar (cosine or keyword overlap, the larger; without
    #   vectors merge_min_overlap of keyword overlap is enough), or
    # - the lines are at least merge_similarity similar by vector and share merge_min_overlap
    #   of their terms; without vectors, or for Chinese lines (MiniLM reads them as [UNK]),
    #   merge_keyword_overlap of their terms instead.
    # dedup_candidates nearest atoms are examined, by vector and by keywords each. A merge
    # moves confidence toward 1 by merge_gain x the new statement's confidence.
    merge_similarity: float = 0.9
    # The same for a multilingual embedder (the default e5, whose cosines run higher), and for
    # a Chinese line against an English one, which share no words: the vector alone merges
    # them, or marks a conflict when their polarity is opposite.
    merge_similarity_multilingual: float = 0.97
    merge_similarity_crosslingual: float = 0.88
    conflict_similarity_crosslingual: float = 0.81
    merge_similarity_same_key: float = 0.66
    merge_value_overlap: float = 0.75
    merge_keyword_overlap: float = 0.8
    merge_min_overlap: float = 0.3
    merge_gain: float = 0.5
    dedup_candidates: int = 8
    # A large user's vector copy finds an atom's dedup_candidates nearest (ranked alone or in
    # an extraction batch) among the dedup_rescore x dedup_candidates rows
    # nearest by 1-bit codes (at least 1,024), by their exact cosines; 0: every vector, exactly
    # (one read of every vector per atom: 4-5 ms at 100k atoms, 40 ms at 1M). The decisions
    # against exact ranking: bench/results/write_path.json.
    dedup_rescore: int = 256

    # Conflicts: statements on the same subject and key count as comparable evidence (both
    # kept active, marked conflicting) when made this close in time with this close confidence.
    comparable_hours: float = 1.0
    comparable_confidence: float = 0.2
    # A statement that a plan is off ("the half marathon is off", "成都不去了") supersedes the
    # planned event when their values share at least this much.
    cancel_overlap: float = 0.5

    # Freshness: half-life in days per kind (None: does not fade) and the floor it fades to.
    half_life_days: dict[str, float | None] = field(
        default_factory=lambda: {"fact": None, "constraint": None, "preference": 365.0, "event": 180.0}
    )
    freshness_floor: float = 0.6

    # Search: "weighted" (alpha * keyword + (1 - alpha) * vector, each normalised) or "rrf".
    fusion: str = "weighted"
    alpha: dict[str, float] = field(
        # From the per-intent alpha sweep on the LoCoMo dev split (bench/results/locomo_retrieval.png):
        # lookups, open and time questions peak at 0.5-0.8 (names and dates are exact words),
        # preference questions at 0.2-0.4 ("space opera" must find "sci-fi").
        default_factory=lambda: {"lookup": 0.7, "time": 0.6, "preference": 0.3, "open": 0.7}
    )
    # Chinese queries, whatever their intent: the alpha sweep on MemoryBank-cn dev (35 questions)
    # peaks at 0.1, where the fusion beats both its halves (bench/results/memorybank_retrieval.json).
    alpha_cjk: float = 0.1
    rrf_k: int = 60
    candidate_pool: int = 60  # candidates per side before fusion, and at least pool_per_hit x k
    pool_per_hit: int = 3
    # bm25 column weights. Atoms: user tag (never scores), subject+predicate, value, whole line,
    # kind, source turns' words (finds atoms by what was said; weighs less than the atom's own
    # fields). Turns: user tag, speaker, content. Chosen on the LoCoMo dev split.
    atom_columns: tuple[float, ...] = (0.0, 2.0, 2.0, 1.0, 0.3, 1.5)
    turn_columns: tuple[float, ...] = (0.0, 0.5, 1.0)
    # Relevance: a vector candidate counts only from this cosine to the query on (below it the
    # bundled MiniLM ranks unrelated lines; search returns fewer than k rather than noise), and
    # a query term found in more than common_term_share of a user's rows (their own name) is
    # left out of the keyword side once the user has common_term_rows rows. LoCoMo dev recall
    # holds up to a floor of 0.3 (bench/results/relevance_floor.json); 0.2 because the sample's
    # "space opera" finds "sci-fi movies" at 0.25 with MiniLM.
    # The baseline is the query's own (query_baseline, search/relevance.py): its mean cosine to
    # everyday statements about nothing, which put nonsense ("zzzz qqq", baseline 0.80 with e5)
    # below the floor and a loose real match ("what orchestration tool do we use?" and a turn
    # about moving from Airflow to Dagster: 0.12 over its baseline 0.75) above 0.1; with the
    # embedder's constant baseline (query_baseline=False) the floor was 0.2 and both went the
    # wrong way (bench/context_floor.py).
    min_similarity: float = 0.1
    query_baseline: bool = True
    common_term_share: float = 0.5
    common_term_rows: int = 3
    # An atom's score is scaled by confidence_floor + (1 - confidence_floor) x its confidence.
    confidence_floor: float = 0.5
    # Working memory: the session's last turns pull the query vector toward the topic this much.
    session_weight: float = 0.25
    # Atoms vs raw turns in layer="both": an atom takes a turn's place only when it is clearly
    # the better match. Weighted higher, atoms pushed the Chinese evidence turns out of the
    # results (both below turns alone); at this weight both is never below turns on either dev
    # set, for more tokens than atoms first (bench/results/atom_weight_*.json).
    atom_weight: float = 0.7
    skipped_turn_weight: float = 0.5  # turns the extraction pre-filter found nothing durable in
    # A query that names a day ("在5月4日你给我推荐了什么", "what did we talk about on May 4th?")
    # makes the rows of that day candidates and adds this to their fused score (weighted fusion
    # only; 0: dates are words like any other). Tuned on 3 MemoryBank-cn dev users, checked on
    # the other 2 (bench/results/memorybank_date_weight.json).
    date_weight: float = 0.2
    # context(): the first this many atoms bring the turn they came from when it says more
    # (a note is a summary; the blind QA check, bench/qa_*.py, found readers missing the rest).
    context_evidence: int = 4
    # context(): hits scoring under this share of the best hit's score are left out, so a block
    # with a clear answer is not padded to its budget with lines that only passed the floor
    # ("where does she live?": the answer at 1.0, then a dozen lines at 0.1-0.3). A query with
    # no clear answer still gets what passed the floor (bench/context_floor.py).
    context_min_share: float = 0.25
    # context(): the line put above a block that holds anything (counted in its budget; "" for
    # none): without it every user wrote their own, and a reader could not tell that the dates
    # decide between two lines that disagree.
    context_header: str = "Memory of the user (dated; where lines disagree, the later date holds):"
    # Large users (index/copies.py): in a file with one user, bm25 scores at most this many
    # postings of the rarest query terms (0: all terms; bench/results/scale_postings.json has
    # the cost and recall of each budget at 100k atoms); term counts are kept until the table
    # grows by term_counts_growth. Users with at least vector_copy_min vectors in a layer have
    # them ranked in memory, loaded on their first search, up to vector_copy_mb in all (0
    # disables it). 200: vec0's KNN over a partition of a few hundred vectors costs more than a
    # copy's product (bench/results/scale_i29.json, 1,000 users x 1k atoms).
    keyword_postings: int = 20_000
    term_counts_growth: float = 1.1
    vector_copy_min: int = 200
    vector_copy_mb: float = 1024.0
    # A search ranks a large copy (10k+ vectors) by 1-bit codes of its vectors first (32x less
    # to read than float32) and the vector_rescore x pool nearest by their exact cosines (at
    # least 1,024); 0 ranks every vector exactly (the recall against exact: bench/results/
    # scale_i29.json). Deduplication: dedup_rescore.
    vector_rescore: int = 20
    # With vector_copy_files, a user's copy of at least vector_copy_file_min vectors is also
    # written once to a file beside the database (<file>-memdb-copies/, index/copyfiles.py) and
    # memory-mapped by later opens, so the first search of a process does not read the vectors
    # out of SQLite again (bench/results/first_search.json).
    # Off by default: the database stays one file unless asked. A mapped copy is the page
    # cache's, not counted in vector_copy_mb.
    vector_copy_files: bool = False
    vector_copy_file_min: int = 20_000
    # A copy of at least vector_copy_background vectors is read by a thread with a connection of
    # its own, vec0's KNN answering until it is ready, so the first search of a large user does
    # not wait for it (a 1M-atom user's 333k turn vectors: bench/results/first_search_i29.json;
    # 0: the search reads it).
    vector_copy_background: int = 100_000
    # Turns and atoms stored without a vector (by a keyword-only writer, or while the embedder
    # failed) get one later: each add() and extract() embeds up to this many of them (0: never).
    vector_backfill: int = 256
    # Users with at least keyword_copy_min rows in a layer have their postings copied into memory
    # on their first search and scored there by bm25 over every query term, with their own
    # statistics (index/keywords.py; bench/results/scale.json: 100k atoms at full-bm25 recall),
    # up to keyword_copy_mb in all (0 disables it: FTS5 answers, pruned by keyword_postings).
    # In a file of several users the copy scores with the user's own statistics, as a file of
    # their own would, where FTS5 uses the whole file's and reads every user's postings of each
    # query term to count them (speed and recall: bench/results/scale_i29.json); False leaves
    # files of several users to FTS5. Users under keyword_copy_min rows are FTS5's either way:
    # statistics over a handful of rows say little about which words are rare.
    # A user's copy of at least keyword_copy_background rows is built by a thread with a
    # connection of its own (tokenizing a million atoms takes most of a minute), FTS5 answering until it is ready,
    # so the first search of a large user does not wait for it (0: the search builds it).
    keyword_copy_min: int = 200
    keyword_copy_mb: float = 1024.0
    keyword_copy_shared: bool = True
    keyword_copy_background: int = 50_000

    # L2 scenarios (layers/scenarios.py). An absorbed atom joins the scenario it scores best
    # with, if that score reaches scenario_join, else it seeds a new one. The score adds:
    # scenario_vector_weight x the cosine to the scenario's centroid (rescaled so unrelated texts
    # score 0, as search does), scenario_keyword_weight x the share of the atom's content terms
    # (not its subject's) among the scenario's keywords, each weighed by a smooth idf over the
    # user's scenarios, and scenario_link_bonus when a member shares a source turn with it or
    # names the same person or thing; only scenarios sharing a term or a turn are scored.
    # Without vectors the weighted share alone must reach scenario_join_keywords. scenario_join
    # was chosen by reading the scenarios of LoCoMo conv-26 and MemoryBank 吴倩 at 0.45-0.62
    # (no gold exists): at 0.45 conv-26 had clusters of 40-50 unrelated notes, at 0.6 the
    # largest holds 33 and most read as one thread ("Rosalind's adoption plans"). A scenario shows (search,
    # context, scenarios_v order) once it holds scenario_min_members held atoms; two merge when
    # their centroids reach scenario_merge_similarity; one splits in two above
    # scenario_max_members when its halves are no closer than scenario_join. Heat: each mention
    # adds 1, fading with scenario_half_life_days. The state line is the scenario_state_atoms
    # newest held members; a context block shows up to scenario_block_members members.
    layers: bool = True
    scenario_join: float = 0.6
    scenario_join_keywords: float = 0.4
    scenario_vector_weight: float = 0.7
    scenario_keyword_weight: float = 0.3
    scenario_link_bonus: float = 0.15
    scenario_min_members: int = 2
    scenario_merge_similarity: float = 0.8
    scenario_merge_keywords: float = 0.5
    scenario_max_members: int = 40
    scenario_half_life_days: float = 30.0
    scenario_state_atoms: int = 2
    scenario_keywords: int = 24
    scenario_block_members: int = 4
    scenario_blocks: int = 2
    # L3 persona (layers/persona.py): the card holds about persona_tokens tokens of held facts,
    # preferences and constraints about the user's own speakers, ranked by confidence x
    # (1 + ln seen) x freshness (persona_half_life_days, down to freshness_floor) x
    # persona_kind_weight; the persona_candidates best are kept. Standing preferences and
    # constraints weigh double: on MemoryBank-cn dev the card at 200 tokens then holds 15 of the
    # 25 profile hobbies instead of 7 (14 with constraints doubled too; extraction kept 21 at all;
    # bench/results/persona_memorybank.json).
    persona_tokens: int = 200
    persona_half_life_days: float = 180.0
    persona_candidates: int = 80
    persona_kind_weight: dict[str, float] = field(
        default_factory=lambda: {"fact": 1.0, "preference": 2.0, "constraint": 2.0})

    def __post_init__(self) -> None:
        _check(self.fusion in FUSIONS, "fusion", f"one of {', '.join(FUSIONS)}")
        for name in ("keyword_copy_shared", "vector_copy_files", "layers", "extract_fill", "model_worker"):
            _check(isinstance(getattr(self, name), bool), name, "True or False")
        _check(self.model_extra_buffers is None or isinstance(self.model_extra_buffers, bool),
               "model_extra_buffers", "None, True or False")
        _check(_is_number(self.model_timeout, 0, 1e6) and self.model_timeout > 0, "model_timeout",
               "a positive number of seconds (at most 1e6)")
        for name in ("scenario_min_members", "scenario_max_members", "scenario_state_atoms", "scenario_keywords",
                     "scenario_block_members", "persona_tokens", "persona_candidates"):
            _check(_is_int(getattr(self, name), 1), name, "a positive integer")
        _check(_is_int(self.scenario_blocks, 0), "scenario_blocks", "a non-negative integer")
        for name in ("scenario_join", "scenario_join_keywords", "scenario_vector_weight", "scenario_keyword_weight", "scenario_link_bonus",
                     "scenario_merge_similarity", "scenario_merge_keywords"):
            _check(_is_number(getattr(self, name), 0, 1), name, "a number from 0 to 1")
        _check(isinstance(self.persona_kind_weight, dict) and set(self.persona_kind_weight) == {"fact", "preference", "constraint"} and all(
            _is_number(v, 0, MAX_NUMBER) for v in self.persona_kind_weight.values()),
            "persona_kind_weight", "a dict of fact, preference, constraint to non-negative weights")
        for name in ("scenario_half_life_days", "persona_half_life_days"):
            _check(_is_number(getattr(self, name), 0, MAX_NUMBER) and getattr(self, name) > 0, name,
                   "a positive number of days")
        for name in ("extract_batch", "dedup_candidates", "rrf_k", "candidate_pool", "pool_per_hit"):
            _check(_is_int(getattr(self, name), 1), name, "a positive integer")
        for name in ("extract_history", "extract_context", "keyword_postings", "vector_copy_min", "context_evidence",
                     "common_term_rows", "vector_backfill", "keyword_copy_min", "vector_copy_file_min",
                     "vector_rescore", "keyword_copy_background", "vector_copy_background", "dedup_rescore"):
            _check(_is_int(getattr(self, name), 0), name, "a non-negative integer")
        _check(_is_number(self.alpha_cjk, 0, 1), "alpha_cjk", "a number from 0 to 1")
        for name in ("confidence_own", "confidence_other", "confidence_hedge", "merge_similarity",
                     "merge_similarity_multilingual", "merge_similarity_crosslingual",
                     "conflict_similarity_crosslingual", "merge_similarity_same_key", "merge_value_overlap", "merge_keyword_overlap",
                     "merge_min_overlap", "merge_gain", "comparable_confidence", "cancel_overlap", "freshness_floor",
                     "confidence_floor", "session_weight", "common_term_share", "extract_rules_cover",
                     "context_min_share"):
            _check(_is_number(getattr(self, name), 0, 1), name, "a number from 0 to 1")
        _check(_is_number(self.min_similarity, -1, 1), "min_similarity", "a cosine from -1 to 1")
        _check(isinstance(self.context_header, str) and "\n" not in self.context_header, "context_header",
               "one line of text (or '' for none)")
        _check(isinstance(self.query_baseline, bool), "query_baseline", "True or False")
        for name in ("comparable_hours", "atom_weight", "skipped_turn_weight", "vector_copy_mb", "keyword_copy_mb",
                     "date_weight"):
            _check(_is_number(getattr(self, name), 0, MAX_NUMBER), name, "a non-negative number")
        _check(_is_number(self.term_counts_growth, 1, MAX_NUMBER), "term_counts_growth", "a number of at least 1")
        _check(isinstance(self.alpha, dict) and set(self.alpha) == set(INTENTS) and all(_is_number(v, 0, 1) for v in self.alpha.values()),
               "alpha", f"a dict of {', '.join(INTENTS)} to numbers from 0 to 1")
        _check(isinstance(self.half_life_days, dict) and set(self.half_life_days) == set(KINDS) and all(
            v is None or _is_number(v, 0, MAX_NUMBER) and v > 0 for v in self.half_life_days.values()),
            "half_life_days", f"a dict of {', '.join(KINDS)} to positive days or None")
        _check(isinstance(self.atom_columns, (tuple, list)) and len(self.atom_columns) == 6 and all(_is_number(w, 0, MAX_NUMBER) for w in self.atom_columns),
               "atom_columns", "six non-negative weights")
        _check(isinstance(self.turn_columns, (tuple, list)) and len(self.turn_columns) == 3 and all(_is_number(w, 0, MAX_NUMBER) for w in self.turn_columns),
               "turn_columns", "three non-negative weights")


def _is_int(value: object, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and least <= value <= MAX_INT


def _is_number(value: object, low: float, high: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high


def _check(ok: bool, name: str, what: str) -> None:
    if not ok:
        raise InvalidInput(f"Settings.{name} must be {what} (integers at most {MAX_INT}, numbers at most {MAX_NUMBER:g})")
