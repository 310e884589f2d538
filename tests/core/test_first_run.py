"""The README's "A first question", run as written: serve, keys, ask, answer; the agent prints the answer.

The commands are read from the README's ``sh`` blocks of that section, so the
README cannot drift from what works. The only additions are the environment: a
data folder of the test's own (XDG_DATA_HOME) and a free port
(HANDRAISE_SERVER__PORT), which every command reads, as the README says.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def section_commands(readme: str, title: str) -> list[str]:
    """The command lines of the ``sh`` blocks under ``## title``, in order."""
    body = readme.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return [line for block in re.findall(r"```sh\n(.*?)```", body, re.S) for line in block.splitlines()
            if line.strip()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Shell:
    """Just enough of a shell for the README: ``export``, ``VAR=value cmd`` and ``<placeholders>``."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd = cwd
        self.env = env
        self.values: dict[str, str] = {}
        self.background: list[subprocess.Popen[str]] = []

    def words(self, line: str) -> tuple[dict[str, str], list[str]]:
        for placeholder, value in self.values.items():
            line = line.replace(placeholder, value)
        assert not re.search(r"<the \w+'s key>", line), f"unresolved placeholder in {line!r}"
        words = shlex.split(line, comments=True)
        assigned: dict[str, str] = {}
        while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
            name, _, value = words.pop(0).partition("=")
            assigned[name] = value
        return assigned, words

    def start(self, words: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
        assert words[0] == "handraise", words
        proc = subprocess.Popen([str(BIN / "handraise"), *words[1:]], cwd=self.cwd, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.background.append(proc)
        return proc


def test_the_readme_first_question_ends_with_the_answer(tmp_path: Path) -> None:
    commands = section_commands((ROOT / "README.md").read_text(), "A first question")
    assert [c.split()[:2] for c in commands][:1] == [["handraise", "serve"]]
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANDRAISE_")}
    env.update(XDG_DATA_HOME=str(tmp_path / "xdg"), HANDRAISE_SERVER__PORT=str(port),
               PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
    folder = tmp_path / "empty"
    folder.mkdir()
    shell = Shell(folder, env)
    asking: subprocess.Popen[str] | None = None
    try:
        for line in commands:
            assigned, words = shell.words(line)
            if words[0] == "export":
                name, _, value = words[1].partition("=")
                shell.env[name] = value
                continue
            run_env = {**shell.env, **assigned}
            if words[:2] == ["handraise", "serve"]:
                server = shell.start(words, run_env)
                assert server.stdout is not None
                first = server.stdout.readline()
                assert f"serving on http://127.0.0.1:{port}" in first, first + server.stderr.read()
                store = server.stdout.readline()
                assert str(tmp_path / "xdg" / "handraise" / "handraise.db") in store
                server.stdout.readline()  # public_url
                inbox = server.stdout.readline()  # the README's "open the inbox link it prints"
                assert re.search(rf"inbox: +http://127\.0\.0\.1:{port}/inbox/signin/\S+$", inbox), inbox
            elif words[:2] == ["handraise", "ask"]:
                asking = shell.start(words, run_env)
                assert asking.stderr is not None
                told = asking.stderr.readline()  # the request is stored once this line is out
                assert re.search(r"asked req_\S+ \(unique_id login-otp-1\)", told), told
                hint = asking.stderr.readline() + asking.stderr.readline() + asking.stderr.readline()
                assert f"http://127.0.0.1:{port}/inbox/r/req_" in hint, hint
                assert "handraise answer login-otp-1" in hint and "handraise link req_" in hint
            else:
                done = subprocess.run([str(BIN / "handraise"), *words[1:]], cwd=folder, env=run_env,
                                      capture_output=True, text=True, timeout=60)
                assert done.returncode == 0, (line, done.stderr)
                if words[1:3] == ["keys", "create"]:
                    key_id = words[words.index("--id") + 1]
                    key = re.search(r"^key:\s+(\S+)$", done.stdout, re.M)
                    assert key is not None, done.stdout
                    shell.values[f"<the {key_id}'s key>"] = key.group(1)
                    assert "store: " + str(tmp_path / "xdg" / "handraise" / "handraise.db") in done.stderr
        assert asking is not None, "the section never asks"
        out, err = asking.communicate(timeout=60)
        assert asking.returncode == 0, err
        assert out.strip() == '"123456"'
    finally:
        deadline = time.monotonic() + 10
        for proc in shell.background:
            if proc.poll() is None:
                proc.terminate()
        for proc in shell.background:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
