"""A tenant's looks on its forms: an accent colour and a logo, served from our own origin.

The accent becomes a small stylesheet (the page's Content-Security-Policy allows no inline
style) with text colours chosen for contrast, and a lighter variant for dark mode. Both the
stylesheet and the logo are addressed by a hash of their content, so they cache forever
and their URLs name no tenant.
"""

from __future__ import annotations

import colorsys
import hashlib
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["LOGO_TYPES", "MAX_LOGO_BYTES", "Asset", "Theme", "TenantLooks", "build_theme", "contrast"]

MAX_LOGO_BYTES = 256 * 1024
LOGO_TYPES = {".svg": "image/svg+xml", ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
              ".webp": "image/webp"}
# WCAG AA for text: the accent's text and the accent as text on the card.
_TEXT_CONTRAST = 4.5
_LIGHT_CARD = (1.0, 1.0, 1.0)
_DARK_CARD = (0x1B / 255, 0x1E / 255, 0x25 / 255)
_DARK_TEXT = (0x0B / 255, 0x10 / 255, 0x20 / 255)


class TenantLooks(BaseModel):
    """``[web.tenants.<tenant id>]``: how that tenant's forms look."""

    model_config = ConfigDict(extra="forbid")

    # "#0b6e4f": buttons, links, focus and selection; darkened or lightened where text must stay readable.
    accent_color: str | None = Field(default=None, pattern=r"^#[0-9a-fA-F]{6}$")
    # A local SVG, PNG, JPEG or WebP file (at most 256 KB), shown above the question.
    logo: Path | None = None

    @field_validator("logo")
    @classmethod
    def _logo_file(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        if value.suffix.lower() not in LOGO_TYPES:
            raise ValueError(f"must be one of {', '.join(LOGO_TYPES)}")
        if not value.is_file():
            raise ValueError(f"{value} is not a readable file")
        if value.stat().st_size > MAX_LOGO_BYTES:
            raise ValueError(f"is larger than {MAX_LOGO_BYTES // 1024} KB")
        return value


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str

    @classmethod
    def of(cls, body: bytes, content_type: str) -> Asset:
        return cls(body=body, content_type=content_type, etag=hashlib.sha256(body).hexdigest()[:16])


@dataclass(frozen=True)
class Theme:
    """What a tenant's pages add: a stylesheet and a logo (each an asset name, or None)."""

    stylesheet: str | None = None
    logo: str | None = None


def _rgb(hex_colour: str) -> tuple[float, float, float]:
    value = hex_colour.lstrip("#")
    return (int(value[0:2], 16) / 255, int(value[2:4], 16) / 255, int(value[4:6], 16) / 255)


def _hex(rgb: tuple[float, float, float]) -> str:
    return "#" + "".join(f"{round(max(0.0, min(1.0, c)) * 255):02x}" for c in rgb)


def _luminance(rgb: tuple[float, float, float]) -> float:
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    """WCAG contrast ratio of two colours (1 to 21)."""
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def _readable_on(rgb: tuple[float, float, float], background: tuple[float, float, float],
                 *, lighter: bool) -> tuple[float, float, float]:
    """``rgb`` moved in lightness (same hue) until it reads as text on ``background``."""
    h, lightness, s = colorsys.rgb_to_hls(*rgb)
    for _ in range(40):
        candidate = colorsys.hls_to_rgb(h, lightness, s)
        if contrast(candidate, background) >= _TEXT_CONTRAST:
            return candidate
        lightness = min(1.0, lightness + 0.025) if lighter else max(0.0, lightness - 0.025)
    return colorsys.hls_to_rgb(h, lightness, s)


def _text_on(rgb: tuple[float, float, float]) -> str:
    white = contrast((1.0, 1.0, 1.0), rgb)
    dark = contrast(_DARK_TEXT, rgb)
    return "#ffffff" if white >= dark else _hex(_DARK_TEXT)


def accent_css(accent: str) -> str:
    """Custom properties for ``accent`` in light and dark mode, every text on it readable."""
    light = _readable_on(_rgb(accent), _LIGHT_CARD, lighter=False)
    dark = _readable_on(_rgb(accent), _DARK_CARD, lighter=True)
    return (
        f":root {{ --accent: {_hex(light)}; --accent-text: {_text_on(light)}; }}\n"
        "@media (prefers-color-scheme: dark) {\n"
        f"  :root {{ --accent: {_hex(dark)}; --accent-text: {_text_on(dark)}; }}\n"
        "}\n"
    )


def build_theme(looks: TenantLooks | None) -> tuple[Theme, dict[str, Asset]]:
    """A tenant's theme and the assets it needs, named by content (``theme-<hash>.css``)."""
    if looks is None:
        return Theme(), {}
    assets: dict[str, Asset] = {}
    stylesheet = logo = None
    if looks.accent_color:
        asset = Asset.of(accent_css(looks.accent_color).encode(), "text/css")
        stylesheet = f"theme-{asset.etag}.css"
        assets[stylesheet] = asset
    if looks.logo is not None:
        suffix = looks.logo.suffix.lower()
        asset = Asset.of(looks.logo.read_bytes(), LOGO_TYPES[suffix])
        logo = f"logo-{asset.etag}{'.jpg' if suffix == '.jpeg' else suffix}"
        assets[logo] = asset
    return Theme(stylesheet=stylesheet, logo=logo), assets
