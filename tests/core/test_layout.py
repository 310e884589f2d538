"""The house rules the tree keeps, read from the source with ast (never by importing it): ``core/`` imports
nothing from ``bots/`` or ``webforms/``, inside ``core/`` no layer imports a layer above it, and no module
of the service grows past ``MAX_LINES`` (one concept per module)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core"

# core's layers, lowest first: a module may import its own layer and those below, never one above.
# A unit is a module of core/ or a whole subpackage (store, schema, http, mcp, ...). A new module of core/
# goes in the lowest layer that holds everything it imports at run time (imports under TYPE_CHECKING,
# annotations only, do not count).
LAYERS: tuple[tuple[str, frozenset[str]], ...] = tuple((name, frozenset(units.split())) for name, units in (
    # Words and rules everything uses: errors, text, canonical JSON, configuration (with the escalation
    # schedule it checks), the tables' shape, which network addresses may be called.
    ("basics", "errors text canonical jsontext problems i18n cursors attempts backoff redaction scopes config "
               "serversecret sealing people names models schedule addresses"),
    # The form-schema subset, and the answer policies built on it (the deadline, proposals).
    ("schema", "schema timeouts proposals"),
    # Storage: the store and its migrations.
    ("storage", "store migrations"),
    # The small interfaces over the store that connectors and the dispatcher are handed: key/value state,
    # leadership, the signing key, chat references, the delivery log.
    ("records", "state leadership signingkey chatrefs deliveries"),
    # What the lifecycle hands around: views and bodies, the words people read, events, the app's typed keys.
    ("shapes", "api wording signedpost events appkeys logs defaults"),
    # The lifecycle: requests, annotations, runs, the inbox's access, the HITL protocol, callbacks, metrics,
    # escalation on the clock, quorum votes, the views held for the call that comes next.
    ("lifecycle", "service held links sweeper annotations runs inbox hitl callbacks metrics escalation quorum "
                  "apikeys"),
    # Reaching humans: channels, connectors, the dispatcher (its recovery pass, what a bounce sets off),
    # the shared chat-answer path, its outcomes and rating buttons.
    ("delivery", "channels connectors personal dispatch recovery bounces chat outcomes ratings"),
    # How agents and operators reach the service: the HTTP API and MCP.
    ("interfaces", "http mcp"),
    # The app factory that wires it all.
    ("assembly", "app"),
    # The command line.
    ("commands", "cli commands doctor"),
))
LEVEL = {unit: level for level, (_, units) in enumerate(LAYERS) for unit in units}


def modules(folder: Path) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(folder.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported(tree: ast.Module, *, runtime_only: bool) -> Iterator[tuple[int, str]]:
    """Every module name an import names (``from a import b`` names ``a`` and ``a.b``), with its line.
    ``runtime_only`` leaves out ``if TYPE_CHECKING:`` blocks: annotations, not dependencies."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if runtime_only and isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            yield from ((node.lineno, f"{node.module}.{a.name}") for a in node.names)
        stack.extend(ast.iter_child_nodes(node))


def unit_of(name: str) -> str | None:
    """``handraise.core.store.journal`` → ``store``; None outside core (or core's own package)."""
    parts = name.split(".")
    return parts[2] if parts[:2] == ["handraise", "core"] and len(parts) > 2 else None


def test_core_imports_nothing_from_bots_or_webforms() -> None:
    offenders = [f"{path}:{line}: {name}" for path, tree in modules(CORE)
                 for line, name in imported(tree, runtime_only=False)
                 if name.split(".")[:2] in (["handraise", "bots"], ["handraise", "webforms"])
                 or name.split(".")[0] in ("bots", "webforms")]
    assert offenders == []


def test_every_core_module_has_a_layer() -> None:
    units = {p.stem if p.is_file() else p.name for p in CORE.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    assert sorted(units - set(LEVEL)) == [], "put each new module of core/ in one of LAYERS"
    assert sorted(set(LEVEL) - units) == [], "LAYERS names a module core/ no longer has"


def test_no_layer_of_core_imports_one_above_it() -> None:
    offenders = []
    for path, tree in modules(CORE):
        here = unit_of("handraise." + path.removesuffix(".py").removesuffix("/__init__").replace("/", "."))
        if here is None or here not in LEVEL:
            continue
        for line, name in imported(tree, runtime_only=True):
            there = unit_of(name)
            if there in LEVEL and LEVEL[there] > LEVEL[here]:
                offenders.append(f"{path}:{line}: {here} ({LAYERS[LEVEL[here]][0]}) imports {name} "
                                 f"({LAYERS[LEVEL[there]][0]})")
    assert offenders == []


@pytest.mark.parametrize(("source", "expected"), [
    ("from handraise.core.service import RequestService", ["handraise.core.service",
                                                           "handraise.core.service.RequestService"]),
    ("import handraise.bots.telegram", ["handraise.bots.telegram"]),
    ("def f():\n    from handraise.core import app", ["handraise.core", "handraise.core.app"]),
    ("if TYPE_CHECKING:\n    from handraise.core.app import x\nelse:\n    import json", ["json"]),
    ("from . import sibling", []),
])
def test_the_walk_sees_every_runtime_import(source: str, expected: list[str]) -> None:
    assert sorted(name for _, name in imported(ast.parse(source), runtime_only=True)) == sorted(expected)


def test_an_upward_import_would_be_caught() -> None:
    tree = ast.parse("def f():\n    from handraise.core.app import create_app\n")
    names = [unit_of(name) for _, name in imported(tree, runtime_only=True)]
    assert "app" in names and LEVEL["app"] > LEVEL["store"]


# A module past this many lines holds more than one concept: split it by concept (issue 20).
MAX_LINES = 600
SOURCE_FOLDERS = ("core", "bots", "webforms", "handraise")


def test_no_module_outside_the_tests_is_over_max_lines() -> None:
    sizes = {path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
             for folder in SOURCE_FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))}
    assert len(sizes) > 50, "the source folders were not found"
    assert {path: lines for path, lines in sizes.items() if lines > MAX_LINES} == {}
