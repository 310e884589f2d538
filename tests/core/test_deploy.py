"""The deployment recipes, as far as they can be checked without a container engine: compose.yaml parses
and runs two instances on one PostgreSQL, and the Dockerfile copies every mapped folder and runs the
same entrypoint CI runs in a virtualenv (tests/core/test_wheel.py)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_runs_two_instances_on_one_postgresql() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    instances = {name: s for name, s in services.items() if name.startswith("handraise")}
    assert len(instances) == 2 and "postgres" in services
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    urls = set()
    for service in instances.values():
        assert service["build"] == "." and service["restart"] == "unless-stopped"
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        env = service["environment"]
        assert env["HANDRAISE_STORAGE__URL"].startswith("postgresql://handraise:")
        assert "@postgres:5432/handraise" in env["HANDRAISE_STORAGE__URL"]
        urls.add(env["HANDRAISE_SERVER__PUBLIC_URL"])
    assert len(urls) == 1  # one public address in front of both
    ports = {p for s in instances.values() for p in s["ports"]}
    assert len(ports) == 2 and all(p.endswith(":8080") for p in ports)


def test_dockerfile_builds_the_wheel_the_way_ci_does() -> None:
    text = (ROOT / "Dockerfile").read_text()
    mapped = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values())
    copied = set(re.findall(r"^COPY (\S+) \./\1$", text, re.M))
    assert mapped <= copied, mapped - copied
    assert "pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ." in text
    assert re.search(r"^FROM python:3\.\d+-slim", text, re.M)
    assert re.search(r"^USER handraise$", text, re.M)
    assert 'HEALTHCHECK' in text and '"handraise-entrypoint", "healthcheck"' in text
    assert "COPY deploy/entrypoint.sh /usr/local/bin/handraise-entrypoint" in text
    assert re.search(r'^ENTRYPOINT \["handraise-entrypoint"\]$', text, re.M)
