"""What ships with the package: the license, type information, package data, the changelog."""

from __future__ import annotations

import importlib.resources
import inspect
import tomllib
import typing
from pathlib import Path

import memdb

ROOT = Path(__file__).resolve().parent.parent


def test_the_license_pyproject_names_ships_in_full():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    text = (ROOT / "LICENSE").read_text()
    assert ("Apache-2.0", ["LICENSE"]) == (project["license"], project["license-files"])
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_type_information_ships_and_the_public_api_is_annotated_precisely():
    assert importlib.resources.files("memdb").joinpath("py.typed").is_file()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data["memdb"]
    public = [memdb.open] + [getattr(memdb.Memory, name) for name in dir(memdb.Memory)
                             if not name.startswith("_") and callable(getattr(memdb.Memory, name))]
    loose = []
    for function in public:
        hints = typing.get_type_hints(function)
        for name in inspect.signature(function).parameters:
            if name != "self" and hints.get(name, typing.Any) is typing.Any:
                loose.append(f"{function.__name__}({name})")
        if hints.get("return", typing.Any) is typing.Any:
            loose.append(f"{function.__name__} -> ?")
    assert [] == loose


def test_every_folder_of_package_data_is_a_package():
    # setuptools warns about (and will stop shipping) data folders that are not packages.
    folders = {p.parent for p in (ROOT / "memdb").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert [] == sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file())


def test_the_changelog_has_this_version():
    assert f"## {memdb.__version__}" in (ROOT / "CHANGELOG.md").read_text()
