"""Every Python block of the README runs as written (issue 26: its example once failed with
NameError), each in a fresh folder, with the real default embedder and a scripted extraction
model in place of the bundled one; and what the README says about names and commands holds."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import memdb
from memdb.models import llama
from tests.conftest import ScriptedLLM

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


REPLY = '{"a":["Alice | uses | PostgreSQL"]}'  # the scripted model's one note per turn it is asked about


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 5


@pytest.mark.embedder
@pytest.mark.parametrize("source", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_each_python_block_runs(source, tmp_path, monkeypatch, cache, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(llama, "load_llm", lambda spec=None, threads=None: ScriptedLLM(REPLY))

    def no_tokenizer(counter, line):  # the bundled tokenizer would assemble the 491 MB model
        raise RuntimeError("no model in this test")

    monkeypatch.setattr(llama, "count_tokens", no_tokenizer)
    exec(compile(source, "README.md", "exec"), {"__name__": "__readme__"})


def test_the_distribution_name_is_not_the_taken_one_and_every_install_line_uses_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "memdb-sqlite" == project["name"]
    sources = {"README.md": README} | {str(p): p.read_text(encoding="utf-8") for p in (ROOT / "memdb").rglob("*.py")}
    taken = {name: [text[max(0, m.start() - 10):m.end() + 40] for m in re.finditer(r"pip install ['\"]?memdb(?!-sqlite)", text)]
             for name, text in sources.items()}
    found = {name: hits for name, hits in taken.items() if hits}
    assert ["README.md"] == list(found) and 1 == len(found["README.md"])  # only the warning names it
    assert "installs another project" in found["README.md"][0]


def test_the_demos_closing_hint_is_valid_sql(tmp_path, capsys, monkeypatch):
    from memdb import cli

    monkeypatch.setattr(memdb.Memory, "llm", lambda self: ScriptedLLM(REPLY))
    db = tmp_path / "demo.db"
    assert 0 == cli.main(["demo", str(db), "--embedder", "none"])
    hint = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("inspect it:"))
    sql = re.fullmatch(r"inspect it: sqlite3 \S+ '(.*)'", hint).group(1)
    with memdb.open(db, embedder=None, extract="defer") as mem:
        assert mem.conn.execute(sql).fetchall()
