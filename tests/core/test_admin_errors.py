"""Every operator mistake ends in one line naming the key or resource and the fix, and a non-zero exit.

Each case runs the real command line, from an empty folder with a data folder of
its own; none may print a traceback or pydantic's own wording. ``test_busy_port``
and the missing extra run as subprocesses, to hold for the installed command too.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from handraise.core.app import check_postgres_version
from handraise.core.cli import main
from handraise.core.errors import UnavailableError

EXAMPLE = Path(__file__).resolve().parents[2] / "config.example.toml"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def handraise(tmp_path: Path, *args: str, env: dict[str, str] | None = None, pythonpath: Path | None = None,
              subprocess_: bool = False) -> subprocess.CompletedProcess[str]:
    """The command as an operator runs it: a subprocess when asked or when imports matter, else
    ``main()`` in this process (the same code, seconds faster) with its environment, folder, output
    and logging set up and put back."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HANDRAISE_")}
    clean.update(XDG_DATA_HOME=str(tmp_path / "xdg"), **(env or {}))
    if pythonpath is not None:
        clean["PYTHONPATH"] = str(pythonpath)
    if subprocess_ or pythonpath is not None:
        return subprocess.run([sys.executable, "-m", "handraise", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60, env=clean)
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    root = logging.getLogger()
    saved_logging = (list(root.handlers), root.level)
    out, err = io.StringIO(), io.StringIO()
    os.environ.clear()
    os.environ.update(clean)
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as e:  # argparse's usage errors
                code = int(e.code or 0)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        root.handlers[:], _ = saved_logging
        root.setLevel(saved_logging[1])
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed command (and proof that it failed cleanly)."""
    assert result.returncode != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("handraise: ") and "Traceback" not in line
    for pydantic_wording in ("Value error,", "Input should be", "Field required", "validation error for",
                             "type=", "pydantic"):
        assert pydantic_wording not in line, line
    return line


def write(tmp_path: Path, text: str, name: str = "config.toml") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


# -- serve -----------------------------------------------------------------------------


def test_busy_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line(handraise(tmp_path, "serve", "--port", str(port), subprocess_=True))
    assert f"server.port {port} on 127.0.0.1 is in use" in line and "--port" in line
    assert "HANDRAISE_SERVER__PORT" in line


def test_host_that_is_not_this_machine(tmp_path: Path) -> None:
    # A subprocess: binding a documentation address sends nothing, but this process's guard refuses it.
    line = one_line(handraise(tmp_path, "serve", "--host", "192.0.2.1", "--port", "0", subprocess_=True))
    assert "server.host '192.0.2.1'" in line and "cannot listen" in line


@pytest.mark.parametrize(("content", "needle"), [
    (None, "is a folder, not a config file"),
    (b"[server]\nport = 8080\n\xff\xfe", "not UTF-8 text"),
    (b"[server\n", "not valid TOML"),
])
def test_unreadable_config(tmp_path: Path, content: bytes | None, needle: str) -> None:
    path = tmp_path / "config.toml"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    line = one_line(handraise(tmp_path, "--config", str(path), "serve"))
    assert str(path) in line and needle in line


def test_missing_config_names_the_variable_to_fix(tmp_path: Path) -> None:
    line = one_line(handraise(tmp_path, "serve", env={"HANDRAISE_CONFIG": "nowhere.toml"}))
    assert "nowhere.toml: no such config file" in line and "HANDRAISE_CONFIG" in line


@pytest.mark.parametrize(("variable", "value", "expected"), [
    ("HANDRAISE_SERVER__PORT", "eighty", "HANDRAISE_SERVER__PORT: must be a whole number"),
    ("HANDRAISE_SERVER__PROT", "8080", "HANDRAISE_SERVER__PROT: unknown key"),
    ("HANDRAISE_FEEDBACK__ENABLED", "maybe", "HANDRAISE_FEEDBACK__ENABLED: must be true or false"),
    ("HANDRAISE_SERVER__PUBLIC_URL", "ftp://hr.example.com", "HANDRAISE_SERVER__PUBLIC_URL: must be an absolute http"),
])
def test_environment_overrides_are_named_by_their_variable(tmp_path: Path, variable: str, value: str,
                                                           expected: str) -> None:
    line = one_line(handraise(tmp_path, "serve", env={variable: value}))
    assert line.startswith(f"handraise: config error: {expected}")


@pytest.mark.parametrize("url", ["http://", "hr.example.com", "https://hr.example.com/?x=1"])
def test_bad_public_url(tmp_path: Path, url: str) -> None:
    path = write(tmp_path, f'[server]\npublic_url = "{url}"\n')
    line = one_line(handraise(tmp_path, "--config", str(path), "serve"))
    assert "config.toml: server.public_url: must" in line


def test_unreachable_postgresql(tmp_path: Path) -> None:
    url = f"postgresql://postgres@127.0.0.1:{_closed_port()}/handraise"
    line = one_line(handraise(tmp_path, "serve", "--port", "0", env={"HANDRAISE_STORAGE__URL": url}))
    assert f"storage.url {url}: cannot open the store" in line and "check HANDRAISE_STORAGE__URL" in line


def test_unreachable_postgresql_hides_the_password(tmp_path: Path) -> None:
    url = f"postgresql://postgres:s3cret-pw@127.0.0.1:{_closed_port()}/handraise"
    path = write(tmp_path, f'[storage]\nurl = "{url}"\n')
    line = one_line(handraise(tmp_path, "--config", str(path), "keys", "list"))
    assert "s3cret-pw" not in line and "postgres:***@" in line and "check [storage] url" in line


def test_missing_postgresql_database(tmp_path: Path, pg_template: str) -> None:
    url = "postgresql://postgres@127.0.0.1:5432/hr_no_such_database"
    line = one_line(handraise(tmp_path, "keys", "list", env={"HANDRAISE_STORAGE__URL": url}))
    assert "cannot open the store" in line and "hr_no_such_database" in line


async def test_too_old_postgresql_is_refused(pg_url: str) -> None:
    dsn = pg_url
    major, _minor = await check_postgres_version(dsn)
    assert major >= 13
    with pytest.raises(UnavailableError) as info:
        await check_postgres_version(dsn, minimum=(major + 1, 0))
    assert info.value.message == (f"storage.url: PostgreSQL {major}.{_minor} is too old; "
                                  f"Handraise needs {major + 1} or newer")


def test_unwritable_sqlite_folder(tmp_path: Path) -> None:
    blocker = write(tmp_path, "a file where a folder should be", "blocker")
    url = f"sqlite:///{blocker}/sub/handraise.db"
    line = one_line(handraise(tmp_path, "keys", "list", env={"HANDRAISE_STORAGE__URL": url}))
    assert "cannot open the store" in line and "HANDRAISE_STORAGE__URL" in line


# -- connectors --------------------------------------------------------------------------


@pytest.mark.parametrize(("section", "expected"), [
    ('[telegram]\ntoken = ""\nchat_ids = [1]\nallowed_user_ids = [2]\n', "telegram.token: must be the bot token"),
    ('[telegram]\ntoken = "not-a-token"\nchat_ids = [1]\nallowed_user_ids = [2]\n',
     "telegram.token: must be the bot token"),
    ('[slack]\nbot_token = ""\nsigning_secret = "s"\n[slack.tenants.default]\nchannel = "C1"\n'
     'allowed_user_ids = ["U1"]\n', "slack"),
    ('[telegram]\ntoken = "1:x"\nmode = "push"\n', "telegram.mode: must be 'polling' or 'webhook'"),
    ('[telegram]\ntoken = "1:x"\nchat_ids = [1]\nallowed_user_ids = [2]\nmode = "webhook"\n',
     "webhook_secret is required in webhook mode"),
])
def test_malformed_connector_credentials(tmp_path: Path, section: str, expected: str) -> None:
    path = write(tmp_path, section)
    line = one_line(handraise(tmp_path, "--config", str(path), "serve", "--port", "0"))
    assert "config.toml: " in line and expected in line
    assert "telegram.:" not in line and "slack.:" not in line


def test_environment_credential_is_named_by_its_variable(tmp_path: Path) -> None:
    path = write(tmp_path, '[telegram]\nchat_ids = [1]\nallowed_user_ids = [2]\n')
    line = one_line(handraise(tmp_path, "--config", str(path), "serve", "--port", "0",
                              env={"HANDRAISE_TELEGRAM__TOKEN": "oops"}))
    assert line.startswith("handraise: config error: HANDRAISE_TELEGRAM__TOKEN: must be the bot token")


def test_missing_extra_for_an_enabled_connector(tmp_path: Path) -> None:
    # A stand-in "telegram" package that cannot be imported, as when handraise[telegram] is not installed.
    shadow = tmp_path / "shadow" / "telegram"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'telegram'\")\n")
    path = write(tmp_path, '[telegram]\ntoken = "1:x"\nchat_ids = [1]\nallowed_user_ids = [2]\n')
    line = one_line(handraise(tmp_path, "--config", str(path), "serve", "--port", "0",
                              pythonpath=tmp_path / "shadow"))
    assert "telegram: connector is configured but cannot be imported" in line
    assert "install handraise[telegram]" in line


# -- keys and ask ------------------------------------------------------------------------


def test_keys_create_mistakes(tmp_path: Path) -> None:
    assert "--scopes: must be among" in one_line(handraise(tmp_path, "keys", "create", "--scopes", "root"))
    assert "an ask key can never answer" in one_line(handraise(tmp_path, "keys", "create", "--scopes", "ask,answer"))
    assert "--tenant 'nope' is not configured" in one_line(
        handraise(tmp_path, "keys", "create", "--tenant", "nope", "--scopes", "ask"))
    assert handraise(tmp_path, "keys", "create", "--scopes", "ask", "--id", "a").returncode == 0
    assert "a key with id 'a' exists already" in one_line(
        handraise(tmp_path, "keys", "create", "--scopes", "read", "--id", "a"))
    path = write(tmp_path, '[[tenants]]\nid = "one"\n[[tenants]]\nid = "two"\n')
    assert "--tenant: name the tenant, several are configured (one, two)" in one_line(
        handraise(tmp_path, "--config", str(path), "keys", "create", "--scopes", "ask"))
    assert "no active stored key 'zz'" in one_line(handraise(tmp_path, "keys", "revoke", "zz"))


def test_ask_mistakes(tmp_path: Path) -> None:
    assert "a key with the ask scope is needed: --key or HANDRAISE_KEY" in one_line(
        handraise(tmp_path, "ask", "Question?"))
    key = {"HANDRAISE_KEY": "hr_whatever"}
    line = one_line(handraise(tmp_path, "ask", "Q?", "--schema", "{nope", env=key))
    assert "--schema: not valid JSON" in line
    line = one_line(handraise(tmp_path, "ask", "Q?", "--schema", "@missing.json", env=key))
    assert "--schema @missing.json: cannot read the file" in line
    assert "give one of --approval, --schema or --choices" in one_line(
        handraise(tmp_path, "ask", "Q?", "--approval", "--choices", "a,b", env=key))
    port = _closed_port()
    line = one_line(handraise(tmp_path, "ask", "Q?", env={**key, "HANDRAISE_URL": f"http://127.0.0.1:{port}"}))
    assert f"cannot reach http://127.0.0.1:{port}" in line and "HANDRAISE_URL" in line


def test_answer_needs_exactly_one_answer(tmp_path: Path) -> None:
    key = {"HANDRAISE_KEY": "hr_whatever"}
    assert "give the answer once" in one_line(handraise(tmp_path, "answer", "uid", env=key))
    assert "give the answer once" in one_line(handraise(tmp_path, "answer", "uid", "x", "--approve", env=key))
    assert "--json: not valid JSON" in one_line(handraise(tmp_path, "answer", "uid", "--json", "{", env=key))


def test_example_config_starts_nothing_it_cannot(tmp_path: Path) -> None:
    """The documented example is valid as a whole (each connector's section included)."""
    result = handraise(tmp_path, "--config", str(EXAMPLE), "keys", "list",
                       env={"HANDRAISE_STORAGE__URL": f"sqlite:///{tmp_path / 'h.db'}"})
    assert result.returncode == 0, result.stderr
    assert "agent-1\tacme\task\tconfig" in result.stdout
