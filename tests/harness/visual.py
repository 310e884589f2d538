"""Screenshots compared with checked-in baselines, so an unintended layout change fails a test.

``await compare_screens(page, "name")`` takes the page at phone and desktop width in light
and dark, writes each to ``test-artifacts/visual/`` (kept as CI artifacts), and compares it
with ``tests/webforms/baselines/<name>-<viewport>-<scheme>.png``: a different size fails,
and so does more than ``MAX_CHANGED`` of the pixels differing by more than ``TOLERANCE`` in a
channel (anti-aliasing and font hinting move a few pixels, a layout change moves many). A
failing screen also gets a ``-diff.png`` with the changed pixels in red.

Run with ``UPDATE_BASELINES=1`` to write the baselines after an intended change, then look
at each one before committing it.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.browser import ARTIFACTS_DIR, VIEWPORTS

if TYPE_CHECKING:
    from playwright.async_api import Locator, Page

BASELINES_DIR = Path(__file__).resolve().parents[1] / "webforms" / "baselines"
VISUAL_DIR = ARTIFACTS_DIR / "visual"
SCHEMES = ("light", "dark")
TOLERANCE = 48
MAX_CHANGED = 0.005


@dataclass(frozen=True)
class Difference:
    name: str
    reason: str


def pixel_difference(actual: bytes, expected: bytes) -> tuple[str | None, bytes | None]:
    """Why two PNGs differ beyond the threshold (None when they match) and a picture of the changes."""
    from PIL import Image, ImageChops

    new = Image.open(io.BytesIO(actual)).convert("RGB")
    old = Image.open(io.BytesIO(expected)).convert("RGB")
    if new.size != old.size:
        return f"size {new.size} instead of {old.size}", None
    delta = ImageChops.difference(new, old)
    # A pixel counts as changed when any channel moved by more than TOLERANCE.
    mask = delta.point(lambda v: 255 if v > TOLERANCE else 0).convert("L").point(lambda v: 255 if v else 0)
    changed = mask.histogram()[255]
    share = changed / (new.size[0] * new.size[1])
    if share <= MAX_CHANGED:
        return None, None
    overlay = Image.blend(new, Image.new("RGB", new.size, "white"), 0.7)
    overlay.paste(Image.new("RGB", new.size, (230, 0, 0)), mask=mask)
    out = io.BytesIO()
    overlay.save(out, format="PNG")
    return f"{changed} pixels ({share:.2%}) changed, more than {MAX_CHANGED:.2%}", out.getvalue()


async def compare_screens(page: Page, name: str, *, mask: list[Locator] | None = None) -> list[Difference]:
    """Shoot ``page`` at every viewport and scheme; return how each differs from its baseline."""
    VISUAL_DIR.mkdir(parents=True, exist_ok=True)
    update = os.environ.get("UPDATE_BASELINES") == "1"
    original = page.viewport_size
    differences: list[Difference] = []
    try:
        for scheme in SCHEMES:
            await page.emulate_media(color_scheme=scheme)
            for label, size in VIEWPORTS.items():
                await page.set_viewport_size(size)
                stem = f"{name}-{label}-{scheme}"
                shot = await page.screenshot(full_page=True, animations="disabled", caret="hide",
                                             mask=mask or [], mask_color="#888888")
                (VISUAL_DIR / f"{stem}.png").write_bytes(shot)
                baseline = BASELINES_DIR / f"{stem}.png"
                if update:
                    BASELINES_DIR.mkdir(parents=True, exist_ok=True)
                    baseline.write_bytes(shot)
                    continue
                if not baseline.is_file():
                    differences.append(Difference(stem, f"no baseline {baseline} (run with UPDATE_BASELINES=1)"))
                    continue
                reason, picture = pixel_difference(shot, baseline.read_bytes())
                if reason is not None:
                    if picture is not None:
                        (VISUAL_DIR / f"{stem}-diff.png").write_bytes(picture)
                    differences.append(Difference(stem, reason))
    finally:
        await page.emulate_media(color_scheme="light")
        if original is not None:
            await page.set_viewport_size(original)
    return differences
