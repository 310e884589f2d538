"""CI proves the wheel: built from the sources, installed into a fresh virtualenv outside the checkout,
started through deploy/entrypoint.sh from an empty folder, and taken through one whole question.

The virtualenv gets the wheel (``--no-deps``) and, beside it, exactly the
distributions the wheel declares (its ``Requires-Dist`` closure, linked from this
test environment): an undeclared import fails here as it would on a fresh
machine, without downloading anything. A template, static file or migration left
out of the wheel fails the content check, and the form page, its CSS and the
store's migrations are used for real.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys

import tomllib
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "deploy" / "entrypoint.sh"


def _mapping() -> dict[str, str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def _copy_sources(dest: Path) -> None:
    """What the Dockerfile copies into its build stage: pyproject, README and the mapped folders."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    for folder in sorted(set(_mapping().values())):
        shutil.copytree(ROOT / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def _declared_closure(wheel: Path) -> set[str]:
    """The distributions the wheel needs (no extras), found recursively in this environment."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        requires = Parser().parsestr(zf.read(meta).decode()).get_all("Requires-Dist") or []
    env = default_environment()
    wanted: set[str] = set()
    # (requirement, the extra it was asked under: its marker is evaluated with that extra)
    todo = [(Requirement(r), "") for r in requires]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({**env, "extra": extra}):
            continue
        name = canonicalize_name(req.name)
        dist = metadata.distribution(req.name)
        todo.extend((Requirement(r), e) for r in dist.requires or [] for e in ("", *req.extras))
        wanted.add(name)
    return wanted


def _link_distributions(names: set[str], dest: Path) -> None:
    """Link each distribution's top-level files and its dist-info into ``dest`` (one folder on sys.path)."""
    dest.mkdir()
    for name in sorted(names):
        dist = metadata.distribution(name)
        base = Path(str(dist.locate_file("")))
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            target = dest / top
            if not target.exists() and (base / top).exists():
                target.symlink_to(base / top)


@dataclass
class Installed:
    venv: Path
    wheel: Path

    @property
    def bin(self) -> Path:
        return self.venv / "bin"


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    _copy_sources(work / "src")
    # The Dockerfile's `pip wheel --no-deps`; without build isolation, so CI builds offline.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(work / "dist"), str(work / "src")], check=True, timeout=300)
    wheel = next((work / "dist").glob("handraise-*.whl"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    _link_distributions(_declared_closure(wheel), work / "deps")
    # A plain path line: the linked folder is on sys.path, but no .pth file of this environment runs
    # (so this checkout's editable install stays invisible).
    (site / "zz_declared_deps.pth").write_text(f"{work / 'deps'}\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, timeout=300)
    return Installed(venv=venv, wheel=wheel)


def test_the_wheel_holds_one_package_with_every_file(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as zf:
        names = set(zf.namelist())
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"handraise"}
    # Every source file of the mapped folders is in the wheel: templates, static files, migrations...
    missing = []
    for package, folder in _mapping().items():
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                inside = "/".join([*package.split("."), *path.relative_to(ROOT / folder).parts])
                if inside not in names:
                    missing.append(inside)
    assert missing == []
    assert "handraise/templates/static/form.css" in names
    assert any(n.startswith("handraise/core/migrations/versions/0001") for n in names)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, **headers: str) -> tuple[int, str, str]:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, response.headers.get("Content-Type", ""), response.read().decode()


@pytest.fixture
def served(installed: Installed, tmp_path: Path) -> Iterator[tuple[dict[str, str], Path, int]]:
    folder = tmp_path / "empty"
    folder.mkdir()
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HANDRAISE_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=f"{installed.bin}{os.pathsep}/usr/bin{os.pathsep}/bin", XDG_DATA_HOME=str(tmp_path / "xdg"),
               HANDRAISE_SERVER__PORT=str(port))
    server = subprocess.Popen(["sh", str(ENTRYPOINT)], cwd=folder, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert f"serving on http://127.0.0.1:{port}" in line, line + (server.stderr.read() if server.stderr else "")
        yield env, folder, port
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_the_installed_wheel_answers_a_question_from_an_empty_folder(installed: Installed, served: tuple) -> None:
    env, folder, port = served
    base = f"http://127.0.0.1:{port}"

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["handraise", *args], cwd=folder, env={**env, **extra}, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, (args, done.stderr)
        return done

    where = subprocess.run([str(installed.bin / "python"), "-c", "import handraise; print(handraise.__file__)"],
                           cwd=folder, env=env, capture_output=True, text=True, timeout=60)
    assert Path(where.stdout.strip()).is_relative_to(installed.venv), where
    assert run("--version").stdout.strip() == f"handraise {installed.wheel.name.split('-')[1]}"

    def key(text: str) -> str:
        found = re.search(r"^key:\s+(\S+)$", text, re.M)
        assert found is not None, text
        return found.group(1)

    agent = key(run("keys", "create", "--scopes", "ask", "--id", "agent").stdout)
    human = key(run("keys", "create", "--scopes", "answer,read", "--id", "human").stdout)
    asking = subprocess.Popen(["handraise", "ask", "Which size?", "--choices", "S,M,L", "--unique-id", "size-1"],
                              cwd=folder, env={**env, "HANDRAISE_KEY": agent}, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert asking.stderr is not None
        told = asking.stderr.readline()
        request_id = re.search(r"asked (req_\S+)", told)
        assert request_id is not None, told
        url = run("link", request_id.group(1), HANDRAISE_KEY=human).stdout.strip()
        assert url.startswith(f"{base}/f/")  # public_url follows the port actually served

        status, kind, page = _get(url)
        assert status == 200 and kind.startswith("text/html") and "Which size?" in page
        css = re.search(r'<link rel="stylesheet" href="([^"]+)"', page)
        assert css is not None, page
        status, kind, body = _get(base + css.group(1).replace("&amp;", "&"))
        assert status == 200 and kind.startswith("text/css") and len(body) > 100

        csrf = re.search(r'name="handraise:csrf" value="([^"]+)"', page)
        assert csrf is not None
        form = urllib.parse.urlencode({"handraise:csrf": csrf.group(1), "answer": "M"}).encode()
        request = urllib.request.Request(url, data=form, headers={"Origin": base})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
        out, err = asking.communicate(timeout=60)
    finally:
        if asking.poll() is None:
            asking.kill()
            asking.wait()
    assert asking.returncode == 0, err
    assert json.loads(out) == "M"
    health = subprocess.run(["sh", str(ENTRYPOINT), "healthcheck"], cwd=folder, env=env, capture_output=True,
                            text=True, timeout=60)
    assert health.returncode == 0, health.stderr


def test_the_entrypoint_runs_other_commands(installed: Installed, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HANDRAISE_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=f"{installed.bin}{os.pathsep}/usr/bin{os.pathsep}/bin", XDG_DATA_HOME=str(tmp_path / "xdg"),
               HANDRAISE_SERVER__PORT=str(_free_port()))
    done = subprocess.run(["sh", str(ENTRYPOINT), "keys", "list"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and str(tmp_path / "xdg" / "handraise" / "handraise.db") in done.stderr
    down = subprocess.run(["sh", str(ENTRYPOINT), "healthcheck"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert down.returncode == 1 and "healthcheck:" in down.stderr



