"""The message catalogue: every sentence a person reads goes through gettext, with Babel's catalogues.

Source strings are English, so English needs no translation file. A translation is a
``core/locale/<locale>/LC_MESSAGES/handraise.po`` (compiled in memory when first used, so
no binary ``.mo`` lives in the repository); ``core/locale/handraise.pot`` is the template,
regenerated with the two ``pybabel`` commands the README gives (a test keeps the template and
the English catalogue in step with the code). Tables of sentences mark theirs with :func:`N_`
and translate when they are shown.

A page's locale: the first language of the browser's ``Accept-Language`` that we have a
catalogue for, else the tenant's ``locale``, else English.
"""

from __future__ import annotations

import gettext as _gettext
import importlib.resources
import io
import re
from collections.abc import Iterable
from pathlib import Path

from babel import Locale, UnknownLocaleError
from babel.core import negotiate_locale
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.support import Translations

__all__ = ["DEFAULT_LOCALE", "DOMAIN", "LOCALE_DIR", "Catalogue", "N_", "parse_accept_language"]

DOMAIN = "handraise"
DEFAULT_LOCALE = "en"
LOCALE_DIR = Path(str(importlib.resources.files("handraise.core"))) / "locale"
# A header longer than this, or with more entries, is read only in part: it is the client's, not ours.
_MAX_HEADER = 512
_MAX_ENTRIES = 16
_LANGUAGE_RANGE = re.compile(r"[A-Za-z]{1,8}(?:-[A-Za-z0-9]{1,8})*|\*")


def N_(message: str) -> str:  # noqa: N802 (gettext's own name for "mark, translate later")
    """Mark a sentence for the catalogue without translating it here."""
    return message


def parse_accept_language(header: str | None) -> list[str]:
    """The languages of an ``Accept-Language`` header, most wanted first (``q=0`` left out)."""
    if not header:
        return []
    weighted: list[tuple[float, int, str]] = []
    for index, part in enumerate(header[:_MAX_HEADER].split(",")[:_MAX_ENTRIES]):
        tag, _, params = part.strip().partition(";")
        tag = tag.strip()
        if not _LANGUAGE_RANGE.fullmatch(tag) or tag == "*":
            continue
        quality = 1.0
        name, _, value = params.strip().partition("=")
        if name.strip().lower() == "q":
            try:
                quality = float(value)
            except ValueError:
                continue
        if 0 < quality <= 1:
            weighted.append((-quality, index, tag.replace("-", "_")))
    return [tag for _, _, tag in sorted(weighted)]


class Catalogue:
    """The translations found in ``directory``, each compiled once; English is always there."""

    def __init__(self, directory: Path = LOCALE_DIR) -> None:
        self.directory = directory
        found = {DEFAULT_LOCALE}
        if directory.is_dir():
            found |= {p.parent.parent.name for p in directory.glob(f"*/LC_MESSAGES/{DOMAIN}.po")}
        self.locales: tuple[str, ...] = tuple(sorted(found))
        self._compiled: dict[str, _gettext.NullTranslations] = {}

    def translations(self, locale: str) -> _gettext.NullTranslations:
        """The gettext object for ``locale``; an unknown one gets English (the source strings)."""
        if locale not in self._compiled:
            self._compiled[locale] = self._compile(locale)
        return self._compiled[locale]

    def _compile(self, locale: str) -> _gettext.NullTranslations:
        po = self.directory / locale / "LC_MESSAGES" / f"{DOMAIN}.po"
        if locale not in self.locales or not po.is_file():
            return _gettext.NullTranslations()
        with po.open("rb") as f:
            catalog = read_po(f, locale=locale, domain=DOMAIN)
        buffer = io.BytesIO()
        write_mo(buffer, catalog)
        buffer.seek(0)
        return Translations(fp=buffer, domain=DOMAIN)

    def negotiate(self, preferred: Iterable[str], fallback: str | None = None) -> str:
        """The locale to speak: the first of ``preferred`` we have, else ``fallback`` if we have it, else English."""
        choice = negotiate_locale(list(preferred), list(self.locales), sep="_")
        if choice is None and fallback:
            choice = negotiate_locale([fallback.replace("-", "_")], list(self.locales), sep="_")
        return choice or DEFAULT_LOCALE

    @staticmethod
    def babel_locale(locale: str) -> Locale:
        """Babel's Locale for dates and numbers; an unparsable name speaks English."""
        try:
            return Locale.parse(locale, sep="_")
        except (UnknownLocaleError, ValueError, TypeError):
            return Locale.parse(DEFAULT_LOCALE)
