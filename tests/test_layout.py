"""The package's import floors (README, *How the code is laid out*): a module imports only modules
on its own floor or below, and no import chain comes back to where it started. Every import
counts, the ones inside functions too (they are imported later, not less); imports under
`if TYPE_CHECKING:` are for annotations only and never run."""

from __future__ import annotations

import ast
from pathlib import Path

import memdb

PACKAGE = Path(memdb.__file__).parent

# Floor of each module or package, by the longest dotted prefix that names it; the package's
# __init__ ("memdb") sits above the facade it exports. A new module gets its floor here.
FLOORS = {
    "memdb.errors": 0, "memdb.text": 0, "memdb.codec": 0, "memdb.checks": 0, "memdb.vecmath": 0,
    "memdb.timeparse": 0, "memdb.settings": 0, "memdb.privacy": 0, "memdb.data": 0, "memdb.fileerrors": 0,
    "memdb.models": 1,
    "memdb.db": 2,
    "memdb.index": 3,
    "memdb.ingest": 4,
    "memdb.extraction": 5,
    "memdb.lifecycle": 6,
    "memdb.layers": 7,
    "memdb.search": 8,
    "memdb.embedding": 9, "memdb.extractor": 9, "memdb.flow": 9, "memdb.recall": 9, "memdb.forgetting": 9,
    "memdb.export": 9,
    "memdb.memory": 10,
    "memdb.pool": 11,
    "memdb": 12,
    "memdb.cli": 13, "memdb.doctor": 13, "memdb.mcp_server": 13, "memdb.adapters": 13, "memdb.browse": 13,
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _floor(module: str) -> int:
    name = module
    while name not in FLOORS:
        assert "." in name, f"{module} has no floor in FLOORS: give it one"
        name = name.rsplit(".", 1)[0]
    return FLOORS[name]


def _typing_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:`."""
    return {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
            and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
            for stmt in block.body for node in ast.walk(stmt)}


def _imports(module: str) -> set[str]:
    """The memdb modules module imports."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    skip = _typing_only(tree)
    package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "memdb"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            if base.split(".")[0] != "memdb":
                continue
            for alias in node.names:  # `from . import rows` imports the module memdb.db.rows
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return found - {module}


GRAPH = {module: _imports(module) for module in MODULES}


def test_every_module_has_a_floor():
    assert len(MODULES) == len([_floor(m) for m in MODULES])  # _floor fails naming a module without one


def test_no_module_imports_one_above_its_floor():
    upward = sorted(f"{m} (floor {_floor(m)}) imports {i} (floor {_floor(i)})"
                    for m, imported in GRAPH.items() for i in imported if _floor(i) > _floor(m))
    assert [] == upward


def test_no_import_chain_comes_back():
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(GRAPH.get(module, ())):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])
    assert [] == cycles


def test_the_floors_see_what_they_should():
    # The checks above would pass on an empty graph: they see real imports, relative ones too.
    assert {"memdb.db.rows", "memdb.db.connection"} <= GRAPH["memdb.flow"]
    assert "memdb.layers.store" in GRAPH["memdb.layers.scenarios"]
    assert "memdb.memory" not in GRAPH["memdb.flow"]  # its import is for annotations only
