"""Where the server secret lives (issue 29, item 10): by default ``server-secret`` in the user's config folder,
0600 in a 0700 folder, apart from the folder that holds the database, so a copy of that folder holds no key
to its digests. A secret an earlier version left beside the SQLite file is still the one used, and a new
``secret_file`` gets that old secret, never a fresh one."""

from __future__ import annotations

import logging
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import base_config, settings_from
from handraise.core.app import open_store
from handraise.core.config import Settings
from handraise.core.serversecret import ServerSecret, default_secret_path, load_server_secret, secret_location
from handraise.core.store import Store

OLD_RAW = bytes(range(32))


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _handraise(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it, with nothing of this machine's Handraise or XDG settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HANDRAISE_", "XDG_"))}
    return subprocess.run([sys.executable, "-m", "handraise", *args], cwd=cwd, env={**clean, **env},
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("layout", ["xdg", "home"])
def test_a_first_start_makes_the_secret_in_the_config_folder_apart_from_the_database(
        tmp_path: Path, layout: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home)}
    if layout == "xdg":
        env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"))
        config, data = tmp_path / "config" / "handraise", tmp_path / "data" / "handraise"
    else:  # no XDG variables: platformdirs' defaults under HOME
        config, data = home / ".config" / "handraise", home / ".local" / "share" / "handraise"
    done = _handraise("keys", "create", "--scopes", "ask", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (data / "handraise.db").exists()
    secret = config / "server-secret"
    assert _mode(secret) == 0o600 and _mode(config) == 0o700
    made = secret.read_text()
    assert re.fullmatch(r"[0-9a-f]{64}\n", made)
    assert not [path.name for path in data.iterdir() if "secret" in path.name]
    # Every later command reads the same secret (the database's fingerprint would refuse another).
    done = _handraise("keys", "list", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert secret.read_text() == made


async def _database_of_an_earlier_version(data: Path) -> Path:
    """A SQLite file set up with a secret that sits beside it, as versions before the config folder left it."""
    data.mkdir(parents=True)
    (data / "handraise.secret").write_text(OLD_RAW.hex() + "\n")
    (data / "handraise.secret").chmod(0o600)
    db = data / "handraise.db"
    store = Store(url=f"sqlite:///{db}", secret=ServerSecret(OLD_RAW))
    await store.open()  # records the secret's fingerprint
    await store.close()
    return db


async def test_a_secret_left_beside_the_database_by_an_earlier_version_is_still_the_one_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    db = await _database_of_an_earlier_version(tmp_path / "data")
    settings = settings_from(base_config(f"sqlite:///{db}"))
    with caplog.at_level(logging.WARNING, logger="handraise.core.serversecret"):
        secret = load_server_secret(settings)
        store = await open_store(settings)  # the fingerprint the database holds matches: it starts
    await store.close()
    assert secret.fingerprint == ServerSecret(OLD_RAW).fingerprint
    assert not default_secret_path().exists()  # no second secret was made
    assert f"server secret {db.parent / 'handraise.secret'} sits beside the database" in caplog.text
    assert OLD_RAW.hex() not in caplog.text


async def test_a_new_secret_file_gets_the_secret_the_database_was_set_up_with(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    db = await _database_of_an_earlier_version(tmp_path / "data")
    target = tmp_path / "vault" / "handraise-secret"
    settings = settings_from(base_config(f"sqlite:///{db}", security={"secret_file": str(target)}))
    with caplog.at_level(logging.WARNING, logger="handraise.core.serversecret"):
        store = await open_store(settings)  # a fresh secret would be refused: "set up with another server secret"
    await store.close()
    assert target.read_text() == OLD_RAW.hex() + "\n" and _mode(target) == 0o600
    assert (tmp_path / "data" / "handraise.secret").exists()  # the old file stays until its owner deletes it
    assert "copied from" in caplog.text and str(target) in caplog.text


def test_with_postgresql_the_secret_an_earlier_version_made_in_the_data_folder_is_still_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    settings = settings_from(base_config("postgresql://handraise@127.0.0.1:5432/handraise"))
    assert secret_location(settings).path == tmp_path / "config" / "handraise" / "server-secret"  # type: ignore[union-attr]
    old = tmp_path / "data" / "handraise" / "secret"
    old.parent.mkdir(parents=True)
    old.write_text(OLD_RAW.hex() + "\n")
    assert secret_location(settings).path == old  # type: ignore[union-attr]
    assert load_server_secret(settings).fingerprint == ServerSecret(OLD_RAW).fingerprint


def test_a_secret_given_inline_has_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    settings: Settings = settings_from(base_config(f"sqlite:///{tmp_path / 'h.db'}",
                                                   security={"secret": OLD_RAW.hex()}))
    assert secret_location(settings) is None
    assert load_server_secret(settings).fingerprint == ServerSecret(OLD_RAW).fingerprint
    assert not (tmp_path / "config").exists()


def test_a_config_folder_that_cannot_be_made_is_one_line_naming_the_secret(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the config folder should be")
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(blocker), "XDG_DATA_HOME": str(tmp_path / "data")}
    done = _handraise("keys", "list", env=env, cwd=tmp_path)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"server secret {blocker / 'handraise' / 'server-secret'}: cannot be read or made" in lines[0]
    assert "[security] secret_file" in lines[0]
