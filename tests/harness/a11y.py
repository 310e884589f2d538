"""An accessibility scan of the page a browser test has open: axe-core (vendored in harness/axe/) run in the page.

The pages' Content-Security-Policy refuses inline scripts, so the scan needs a context made
with ``bypass_csp=True``; the page under test is otherwise the real one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.async_api import Page

AXE_SOURCE = Path(__file__).resolve().parent / "axe" / "axe.min.js"
# WCAG 2.x A and AA and the best practices axe checks by default.
_RUN_OPTIONS = {"resultTypes": ["violations"]}
SERIOUS = frozenset({"serious", "critical"})


async def axe_violations(page: Page) -> list[dict[str, Any]]:
    """Every violation axe finds on the page as it stands, with the nodes it names."""
    if not await page.evaluate("typeof window.axe !== 'undefined'"):
        await page.add_script_tag(content=AXE_SOURCE.read_text(encoding="utf-8"))
    result = await page.evaluate("options => window.axe.run(document, options)", _RUN_OPTIONS)
    return list(result["violations"])


def describe(violations: list[dict[str, Any]]) -> str:
    lines = []
    for v in violations:
        targets = ", ".join(" ".join(node["target"]) for node in v["nodes"][:5])
        lines.append(f"{v['impact']}: {v['id']} ({v['help']}) at {targets}")
    return "\n".join(lines)


async def assert_no_serious_violations(page: Page) -> list[dict[str, Any]]:
    """Fail on a serious or critical violation; return the lesser ones (moderate, minor) for a look."""
    violations = await axe_violations(page)
    serious = [v for v in violations if v.get("impact") in SERIOUS]
    assert not serious, f"axe on {page.url}:\n{describe(serious)}"
    return violations
