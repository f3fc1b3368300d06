"""Synthetic memories at scale: realistic atoms, turns and queries, filled through memdb's own writes.

The scale benchmark (bench/scale.py) needs files holding 10k to 1M atoms. Real extraction runs
at about one turn a second, so the atoms are generated: varied kinds (facts, preferences,
constraints, events with dates), a cast of named entities per user, English and Chinese
(about one line in five is Chinese), many users. Rows go in through the same code paths as
real ones — `memdb.db.rows.insert_turn` and `insert_atom` inside `connection.write` — only in
large transactions, so the file has exactly the layout, FTS rows and vec0 rows memdb writes.

Vectors. MiniLM runs at ~200 texts/s here, so 1M embeddings would take hours. Instead a pool
of `POOL` base statements (a predicate + object + domain, no subject) is embedded for real
with `memdb.models.embedders.load("minilm")`, and every atom is a *variant* of one base statement: same
meaning, its own subject, date and wording. Its vector is

    v = normalise(pool[j] + MIX * pool[k] + noise),   noise ~ N(0, SIGMA² / dim · I)

where j is its base, k another random base (statements mix topics) and SIGMA sets how far a
variant strays (cos(v, pool[j]) ≈ 0.8). So vectors cluster around real sentence embeddings
the way a user's many related memories do, with the spread that makes ANN and quantisation
recall non-trivial. Turns get vectors the same way from the base of their first atom.
Queries are generated from a user's own atoms (both languages, several question shapes) and
embedded for real.

    .venv/bin/python bench/synth.py --atoms 10000 --users 1 --out /tmp/scale_10k.db

Everything is seeded: the same arguments give the same file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memdb import codec, text  # noqa: E402
from memdb.db import connection  # noqa: E402
from memdb.db import rows as db_rows  # noqa: E402
from memdb.models import assets  # noqa: E402

POOL = 3000  # base statements embedded for real
SIGMA = 0.55  # noise norm relative to a unit pool vector
MIX = 0.3  # weight of a second, random base statement
ZH_SHARE = 0.2  # share of Chinese atoms and turns
ATOMS_PER_TURN = 3  # each turn is the source of about this many atoms
BATCH = 5000  # rows per write transaction

# ---------------------------------------------------------------- vocabulary

EN_FIRST = """Alice Bob Carol David Emma Frank Grace Henry Isla Jack Kate Liam Maya Noah Olivia Paul
Quinn Rosa Sam Tara Uma Victor Wendy Xavier Yara Zoe Caroline Melanie Jon Gina Nate Joanna Tim
Audrey Andrew Deborah Evan Sam Jolene Calvin Dave Maria John James Signe Ravi Chen Mei""".split()
EN_LAST = """Smith Jones Brown Garcia Miller Davis Lopez Wilson Taylor Moore Clark Lewis Walker Hall
Young King Wright Scott Green Baker Adams Nelson Hill Campbell Mitchell Roberts Carter""".split()
ZH_NAMES = """小王 小李 小张 老刘 阿明 小红 丽丽 王芳 李娜 张伟 刘洋 陈静 杨帆 赵磊 黄蕾 周杰 吴敏 徐丽 孙浩 马超""".split()
ZH_SUBJECTS = ["用户", "我妈", "我爸", "老板", "同事", "室友", "女朋友", "男朋友", "孩子", "团队"]

CITIES = """Boston Seattle Austin Denver Chicago Portland Berlin Lisbon Tokyo Toronto Sydney Madrid Paris
London Dublin Oslo Prague Vienna Austin Nairobi Lima Seoul Singapore Hanoi Kyoto Melbourne""".split()
ZH_CITIES = "北京 上海 杭州 深圳 成都 南京 武汉 西安 广州 苏州 厦门 青岛 重庆 长沙".split()
COMPANIES = """Acme Globex Initech Umbrella Stark Wayne Hooli Vandelay Wonka Cyberdyne Tyrell Soylent
Aperture Monarch Pied-Piper Massive-Dynamic Gringotts Oscorp Dunder-Mifflin""".split()
JOBS = """nurse teacher engineer designer chef accountant lawyer pilot photographer barista
researcher pharmacist carpenter librarian counselor architect veterinarian""".split()
ZH_JOBS = "护士 老师 工程师 设计师 厨师 会计 律师 医生 程序员 摄影师 记者".split()

EN_LIKES = {
    "food": "sushi ramen tacos pho dumplings lasagna curry falafel paella bibimbap croissants oysters".split(),
    "drinks": "espresso oat-milk-lattes green-tea matcha kombucha IPA red-wine whisky lemonade".split(),
    "movies": "sci-fi-movies horror-films documentaries Interstellar Inception anime rom-coms westerns".split(),
    "music": "jazz classical-music K-pop indie-rock hip-hop bluegrass Taylor-Swift Radiohead opera".split(),
    "books": "fantasy-novels mystery-novels poetry biographies manga history-books Dune Harry-Potter".split(),
    "sports": "hiking running swimming yoga tennis climbing surfing skiing cycling basketball chess".split(),
    "travel": "road-trips beach-holidays camping museums city-breaks backpacking cruises".split(),
    "tech": "PostgreSQL Rust Python TypeScript vim dark-mode mechanical-keyboards Linux SQLite Kubernetes".split(),
    "pets": "dogs cats parrots horses rabbits turtles".split(),
}
ZH_LIKES = {
    "food": "火锅 饺子 小笼包 烤鸭 麻辣烫 寿司 牛肉面 煎饼 粽子 担担面".split(),
    "drinks": "美式咖啡 绿茶 奶茶 啤酒 红酒 豆浆 乌龙茶".split(),
    "movies": "科幻片 纪录片 动画片 武侠片 悬疑片".split(),
    "music": "古典音乐 流行音乐 摇滚 民谣 爵士乐".split(),
    "sports": "跑步 游泳 爬山 羽毛球 乒乓球 瑜伽 骑行".split(),
    "travel": "自驾游 露营 看展 逛博物馆".split(),
}
CONSTRAINTS = [
    ("the backend", "must not use", "an ORM"), ("the team", "must write", "tests for every change"),
    ("deploys", "never happen on", "Fridays"), ("the API", "must return", "JSON errors"),
    ("{name}", "is allergic to", "peanuts"), ("{name}", "cannot eat", "gluten"),
    ("{name}", "does not drink", "alcohol"), ("meetings", "must end before", "5pm"),
    ("the budget", "must stay under", "$2,000"), ("{name}", "only eats", "vegetarian food"),
    ("code reviews", "need", "two approvals"), ("the app", "must support", "offline mode"),
]
ZH_CONSTRAINTS = [
    ("{name}", "对", "花生过敏"), ("{name}", "不吃", "辣"), ("{name}", "不喝", "酒"),
    ("项目", "禁止使用", "ORM"), ("周五", "不许", "上线"), ("会议", "必须在", "五点前结束"),
]
EVENTS = [
    ("went to", "a {thing} concert in {city}"), ("visited", "{city}"), ("adopted", "a puppy named {pet}"),
    ("started a new job at", "{company}"), ("ran", "a half marathon in {city}"),
    ("attended", "a LGBTQ support group meeting"), ("painted", "a sunset over the lake"),
    ("moved to", "{city}"), ("had", "a job interview at {company}"), ("got", "promoted to senior {job}"),
    ("signed up for", "a pottery class"), ("celebrated", "a birthday party at {place}"),
    ("finished reading", "{book}"), ("went camping at", "{place}"), ("launched", "project {project}"),
    ("broke", "a wrist while skiing"), ("bought", "a used {car}"), ("hosted", "a dinner for {name2}"),
]
ZH_EVENTS = [
    ("去了", "{city}旅游"), ("参加了", "{city}的马拉松"), ("换了", "新工作"), ("搬到了", "{city}"),
    ("买了", "一辆新车"), ("生了", "一场病"), ("考过了", "驾照"), ("养了", "一只猫"),
]
FACTS = [
    ("lives in", "{city}"), ("works at", "{company}"), ("works as", "a {job}"), ("is from", "{city}"),
    ("has", "{n} kids"), ("has a dog named", "{pet}"), ("is married to", "{name2}"),
    ("drives", "a {car}"), ("speaks", "{lang}"), ("studies at", "{school}"), ("plays", "the {instrument}"),
    ("birthday is on", "{month} {day}"), ("is training for", "a marathon"), ("volunteers at", "{place}"),
]
ZH_FACTS = [("住在", "{city}"), ("在", "{company}上班"), ("是", "{job}"), ("来自", "{city}"), ("有", "两个孩子"),
            ("养了一只狗叫", "{pet}"), ("会说", "英语和日语")]
PETS = "Luna Max Bella Charlie Milo Daisy Oscar Coco Pepper Biscuit".split()
CARS = "Tesla Prius Civic Subaru Volvo Mini Jeep".split()
LANGS = "Spanish French German Japanese Mandarin Portuguese Arabic".split()
SCHOOLS = "MIT Stanford Berkeley Oxford NYU UCLA Tsinghua".split()
INSTRUMENTS = "guitar piano violin drums cello ukulele saxophone".split()
PLACES = "the-animal-shelter the-food-bank Yosemite Lake-Tahoe the-community-center Big-Sur the-library".split()
BOOKS = "Becoming Educated Sapiens Dune The-Hobbit Circe Project-Hail-Mary".split()
MONTHS = "January February March April May June July August September October November December".split()
OPENERS = ["Oh,", "So", "Honestly,", "Guess what:", "By the way,", "Yeah,", "Well,", "", "", ""]
CLOSERS = ["", "", "It was great!", "Not sure how I feel about it.", "Anyway, how are you?",
           "Can't wait to tell you more.", "Thanks for asking!", "lol"]
ZH_OPENERS = ["对了，", "跟你说，", "哈哈，", "", "其实", "最近"]
ZH_CLOSERS = ["", "挺开心的。", "你呢？", "下次再聊。", "真的累。"]


@dataclass
class Base:
    """A base statement: what an atom says, without who says it. Its line is embedded."""

    kind: str
    predicate: str
    object: str
    lang: str
    sentiment: str = "neutral"
    domain: str | None = None

    def line(self, subject: str) -> str:
        return codec.canonical_text({"subject": subject, "predicate": self.predicate, "object": self.object})


def _fill(template: str, rng: random.Random) -> str:
    zh = text.has_cjk(template)
    return template.format(
        city=rng.choice(ZH_CITIES if zh else CITIES), company=rng.choice(COMPANIES),
        job=rng.choice(ZH_JOBS if zh else JOBS), pet=rng.choice(PETS), car=rng.choice(CARS),
        lang=rng.choice(LANGS), school=rng.choice(SCHOOLS), instrument=rng.choice(INSTRUMENTS),
        place=rng.choice(PLACES).replace("-", " "), book=rng.choice(BOOKS).replace("-", " "),
        month=rng.choice(MONTHS), day=rng.randint(1, 28), n=rng.randint(1, 4),
        name2=f"{rng.choice(EN_FIRST)} {rng.choice(EN_LAST)}", thing=rng.choice(EN_LIKES["music"]).replace("-", " "),
        project=f"{rng.choice(['Falcon', 'Orion', 'Atlas', 'Nova', 'Helix'])}-{rng.randint(1, 99)}", name="{name}",
    )


def bases(n: int, seed: int = 0) -> list[Base]:
    """n distinct base statements across kinds and both languages."""
    rng = random.Random(seed)
    out: dict[tuple, Base] = {}
    while len(out) < n:
        zh = rng.random() < ZH_SHARE
        kind = rng.choices(("fact", "preference", "constraint", "event"), (0.35, 0.3, 0.1, 0.25))[0]
        if kind == "preference":
            likes = ZH_LIKES if zh else EN_LIKES
            domain = rng.choice(list(likes))
            sentiment = rng.choices(("like", "dislike"), (0.75, 0.25))[0]
            thing = rng.choice(likes[domain]).replace("-", " ")
            pred = ("喜欢" if sentiment == "like" else "讨厌") if zh else rng.choice(
                ("likes", "loves", "enjoys", "prefers") if sentiment == "like" else ("dislikes", "hates", "can't stand"))
            b = Base(kind, pred, thing, "zh" if zh else "en", sentiment, domain)
        else:
            table = {"fact": ZH_FACTS if zh else FACTS, "event": ZH_EVENTS if zh else EVENTS,
                     "constraint": ZH_CONSTRAINTS if zh else CONSTRAINTS}[kind]
            pred, obj = rng.choice(table)[-2:]
            b = Base(kind, pred, _fill(obj, rng), "zh" if zh else "en")
        out.setdefault((b.kind, b.predicate, b.object, b.sentiment), b)
    return list(out.values())


# ---------------------------------------------------------------- vectors


def pool_vectors(pool: list[Base], cache: Path | None = None) -> np.ndarray:
    """Real MiniLM vectors of the base lines (subject 'the user' / '用户'), cached on disk."""
    lines = [b.line("用户" if b.lang == "zh" else "The user") for b in pool]
    key = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
    cache = cache or Path(f"/tmp/memdb_synth_pool_{key}.npy")
    if cache.exists():
        return np.load(cache)
    from memdb.models import embedders

    t0 = time.perf_counter()
    vectors = embedders.load("minilm").embed(lines)
    print(f"embedded {len(lines)} pool lines in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    np.save(cache, vectors)
    return vectors


def derive(pool: np.ndarray, base_ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Variant vectors: normalise(pool[j] + MIX * pool[random k] + noise), float32 unit rows."""
    n, dim = len(base_ids), pool.shape[1]
    other = rng.integers(0, len(pool), n)
    v = pool[base_ids] + MIX * pool[other] + rng.standard_normal((n, dim), dtype=np.float32) * (SIGMA / np.sqrt(dim))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


# ---------------------------------------------------------------- records and turns


def cast(rng: random.Random, size: int = 12) -> tuple[list[str], list[str]]:
    """A user's people: English full names and Chinese names, the first being the user."""
    en = [f"{rng.choice(EN_FIRST)} {rng.choice(EN_LAST)}" for _ in range(size)]
    en = [n.split()[0] if rng.random() < 0.6 else n for n in en]
    return en, [rng.choice(ZH_NAMES + ZH_SUBJECTS) for _ in range(size // 2)]


def record_for(base: Base, subject: str, day: dt.date, rng: random.Random) -> dict:
    record = {"kind": base.kind, "subject": subject, "predicate": base.predicate,
              "object": base.object.replace("{name}", subject), "lang": base.lang}
    if base.sentiment != "neutral":
        record["sentiment"] = base.sentiment
    if base.domain:
        record["domain"] = base.domain
    if base.kind == "event":
        record["date"] = day.isoformat()
        record["when"] = rng.choice(("yesterday", "last week", "on Saturday", "last month")) if base.lang == "en" else rng.choice(("昨天", "上周", "上个月"))
    return codec.validate(record)


def turn_content(records: list[dict], rng: random.Random) -> str:
    if records[0].get("lang") == "zh":
        body = "，".join(codec.canonical_text(r) for r in records)
        return f"{rng.choice(ZH_OPENERS)}{body}。{rng.choice(ZH_CLOSERS)}"
    body = ". ".join(codec.canonical_text(r) for r in records)
    return " ".join(x for x in (rng.choice(OPENERS), body + ".", rng.choice(CLOSERS)) if x)


@dataclass
class UserPlan:
    user: str
    atoms: int


def fill(conn, plans: list[UserPlan], pool_bases: list[Base], pool: np.ndarray, seed: int = 1,
         progress: bool = True) -> dict[str, float]:
    """Write every user's turns and atoms through memdb.db.rows.insert_turn / insert_atom.

    Each turn (a session of 20 turns, one a few hours apart) is the source of up to
    ATOMS_PER_TURN atoms derived from it. Returns counts and seconds spent writing.
    """
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    en_ids = [i for i, b in enumerate(pool_bases) if b.lang == "en"]
    zh_ids = [i for i, b in enumerate(pool_bases) if b.lang == "zh"]
    written = 0
    total = sum(p.atoms for p in plans)
    t0 = time.perf_counter()
    pending: list[tuple] = []  # (user, session, seq, ts, content, [records], base_id)
    for plan in plans:
        en_cast, zh_cast = cast(rng)
        start = dt.datetime(2022, 1, 1) + dt.timedelta(days=rng.randint(0, 300))
        left, seq = plan.atoms, 0
        while left > 0:
            zh = rng.random() < ZH_SHARE
            n = min(left, rng.randint(1, 2 * ATOMS_PER_TURN - 1))
            # Zipf-like reuse of base statements: some topics come up much more often.
            ids = zh_ids if zh else en_ids
            base_ids = [ids[min(int(rng.paretovariate(0.6)) - 1, len(ids) - 1) if rng.random() < 0.3
                            else rng.randrange(len(ids))] for _ in range(n)]
            when = start + dt.timedelta(hours=3 * seq + rng.random())
            subject_pool = zh_cast if zh else en_cast
            records = [record_for(pool_bases[b], rng.choice(subject_pool[:3] if rng.random() < 0.7 else subject_pool),
                                  when.date(), rng) for b in base_ids]
            pending.append((plan.user, f"s{seq // 20}", seq % 20 + 1, when.strftime("%Y-%m-%dT%H:%M:%S"),
                            turn_content(records, rng), records, base_ids))
            left -= n
            seq += 1
            if sum(len(p[5]) for p in pending) >= BATCH:
                written += _flush(conn, pending, pool, nrng)
                pending = []
                if progress:
                    rate = written / (time.perf_counter() - t0)
                    print(f"\r{written:,}/{total:,} atoms ({rate:,.0f}/s)", end="", file=sys.stderr)
    written += _flush(conn, pending, pool, nrng)
    seconds = time.perf_counter() - t0
    if progress:
        print(f"\r{written:,}/{total:,} atoms in {seconds:.0f} s", file=sys.stderr)
    return {"atoms": written, "seconds": seconds}


def _flush(conn, pending: list[tuple], pool: np.ndarray, nrng: np.random.Generator) -> int:
    if not pending:
        return 0
    turn_vecs = derive(pool, np.array([p[6][0] for p in pending]), nrng)
    atom_vecs = derive(pool, np.array([b for p in pending for b in p[6]]), nrng)
    written = 0
    with connection.write(conn):
        for (user, session, seq, ts, content, records, _), tvec in zip(pending, turn_vecs):
            turn_id = db_rows.insert_turn(conn, user=user, session=session, seq=seq, role="user",
                                          speaker=None, content=content, ts=ts, vector=tvec)
            conn.execute('update "turns" set "state" = 1 where "id" = ?', (turn_id,))
            for record in records:
                db_rows.insert_atom(conn, user=user, record=record, confidence=0.8, turn_ids=[turn_id],
                                    first_seen=ts, last_seen=ts, vector=atom_vecs[written])
                written += 1
    return written


# ---------------------------------------------------------------- queries

EN_QUESTIONS = {
    "fact": ["Where does {s} live?", "What does {s} do for work?", "Tell me about {s} and {o}",
             "does {s} {p} {o}?", "{o}"],
    "preference": ["What kind of {d} does {s} like?", "Does {s} enjoy {o}?", "what are {s}'s favourite {d}",
                   "recommend some {d} for {s}", "{s} {o}"],
    "constraint": ["Any rules about {o}?", "What can't {s} eat?", "what must {s} avoid", "{s} {p} {o}"],
    "event": ["When did {s} {p} {o}?", "What did {s} do recently?", "when was {s} in {o}",
              "how long ago did {s} {p} {o}", "{p} {o}"],
}
ZH_QUESTIONS = {
    "fact": ["{s}住在哪里？", "{s}是做什么的？", "{s}{p}什么？"],
    "preference": ["{s}喜欢什么{d}？", "{s}喜欢{o}吗？", "给{s}推荐点{o}"],
    "constraint": ["{s}有什么忌口？", "{o}有什么规定？"],
    "event": ["{s}什么时候{p}{o}？", "{s}最近做了什么？"],
}
ZH_DOMAINS = {"food": "吃的", "drinks": "饮料", "movies": "电影", "music": "音乐", "sports": "运动", "travel": "旅行"}


def queries(conn, user: str, n: int, seed: int = 2) -> list[dict]:
    """n questions about user's own atoms: varied shapes and kinds, English and Chinese."""
    rng = random.Random(seed)
    # Sampled in Python from the seed (SQLite's random() is not seeded): runs compare alike.
    every = [r[0] for r in conn.execute('select "id" from "atoms" where "user" = ? order by "id"', (user,))]
    ids = rng.sample(every, min(len(every), n * 3))
    out, seen = [], set()
    for atom_id in ids:
        record = codec.unpack(conn.execute('select "record" from "atoms" where "id" = ?', (atom_id,)).fetchone()[0])
        zh = record.get("lang") == "zh"
        shapes = (ZH_QUESTIONS if zh else EN_QUESTIONS)[record["kind"]]
        domain = record.get("domain", "things")
        q = rng.choice(shapes).format(s=record.get("subject", ""), p=record.get("predicate", ""),
                                      o=record.get("object", ""),
                                      d=ZH_DOMAINS.get(domain, "东西") if zh else domain)
        if q not in seen:
            seen.add(q)
            out.append({"query": q, "kind": record["kind"], "lang": "zh" if zh else "en", "atom_id": atom_id})
        if len(out) == n:
            break
    return out


# ---------------------------------------------------------------- main


def build(path: Path, atoms: int, users: int, seed: int = 1) -> dict[str, float]:
    """A new memdb file holding users × (atoms // users) synthetic atoms with their turns."""
    from memdb.models import embedders

    if path.exists():
        raise SystemExit(f"{path} exists; remove it first")
    pool_bases = bases(POOL)
    pool = pool_vectors(pool_bases)
    conn = connection.connect(path)
    connection.ensure_vectors(conn, assets.MINILM_NAME, pool.shape[1])
    per_user = atoms // users
    plans = [UserPlan(f"user{i:04d}" if users > 1 else "alice", per_user) for i in range(users)]
    result = fill(conn, plans, pool_bases, pool, seed=seed)
    conn.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--atoms", type=int, required=True)
    parser.add_argument("--users", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    result = build(args.out, args.atoms, args.users, args.seed)
    print(f"{result['atoms']:,} atoms in {result['seconds']:.0f} s "
          f"({result['atoms'] / result['seconds']:,.0f}/s), {args.out.stat().st_size / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
