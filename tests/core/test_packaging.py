"""The distribution's one import package: pyproject's package list and mapping keep step with the folders."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAPPED = {"handraise": "handraise", "handraise.core": "core", "handraise.bots": "bots",
          "handraise.webforms": "webforms", "handraise.templates": "templates"}


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_the_owner_folders_map_into_one_handraise_package() -> None:
    assert _setuptools()["package-dir"] == MAPPED


def test_every_python_package_folder_is_listed() -> None:
    found = set()
    for name, folder in MAPPED.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]))
    assert set(_setuptools()["packages"]) == found

