"""The message catalogue: every sentence of the code is in it, English is shipped, a translation is used."""

from __future__ import annotations

from pathlib import Path

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po

from handraise.core.i18n import LOCALE_DIR, Catalogue, parse_accept_language
from handraise.webforms.pages import FormPage, Pages
from handraise.webforms.render import field_views, form_specs

REPO = Path(__file__).resolve().parents[2]
METHODS = [("**.py", "python"), ("**.html", "jinja2")]
OPTIONS = {"**.html": {"extensions": "jinja2.ext.i18n", "trimmed": "true"}}
KEYWORDS = {"_": None, "gettext": None, "ngettext": (1, 2), "N_": None}


def _msgids_in_code() -> set[str]:
    found: set[str] = set()
    for folder in ("core", "webforms", "templates"):
        for _, _, message, _, _ in extract_from_dir(REPO / folder, METHODS, OPTIONS, KEYWORDS):
            found.add(message[0] if isinstance(message, tuple) else message)
    return found


def _msgids_in(path: Path) -> set[str]:
    with path.open("rb") as f:
        return {m.id[0] if isinstance(m.id, tuple) else m.id for m in read_po(f) if m.id}


def test_the_template_holds_every_sentence_of_the_code() -> None:
    # When this fails, run: pybabel extract -F core/locale/babel.cfg -k N_ --no-location --omit-header
    #   --sort-output -o core/locale/handraise.pot core webforms templates
    assert _msgids_in(LOCALE_DIR / "handraise.pot") == _msgids_in_code()


def test_english_is_shipped_for_every_sentence() -> None:
    assert _msgids_in(LOCALE_DIR / "en" / "LC_MESSAGES" / "handraise.po") >= _msgids_in(LOCALE_DIR / "handraise.pot")
    assert "en" in Catalogue().locales


@pytest.mark.parametrize(("header", "languages"), [
    ("de-DE,de;q=0.9,en;q=0.8", ["de_DE", "de", "en"]),
    ("en;q=0.5, fr", ["fr", "en"]),
    ("fr;q=0, de", ["de"]),
    ("*", []),
    ("", []),
    (None, []),
    ("x" * 5000, []),
    ("de;q=abc, <script>, en", ["en"]),
    (",".join(["de"] * 100), ["de"] * 16),
])
def test_accept_language_is_read_in_order_of_preference(header: str | None, languages: list[str]) -> None:
    assert parse_accept_language(header) == languages


GERMAN = r'''
msgid ""
msgstr ""
"Language: de\n"
"Plural-Forms: nplurals=2; plural=(n != 1);\n"
"Content-Type: text/plain; charset=utf-8\n"

msgid "Send answer"
msgstr "Antwort senden"

#, python-format
msgid "Question from %(name)s"
msgstr "Frage von %(name)s"

#, python-format
msgid "At most %(n)d character"
msgid_plural "At most %(n)d characters"
msgstr[0] "Höchstens %(n)d Zeichen"
msgstr[1] "Höchstens %(n)d Zeichen"

msgid "{m} min {s} s"
msgstr "{m} Min. {s} Sek."
'''


@pytest.fixture
def german(tmp_path: Path) -> Catalogue:
    folder = tmp_path / "de" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    (folder / "handraise.po").write_text(GERMAN, encoding="utf-8")
    return Catalogue(tmp_path)


def test_a_translation_is_chosen_by_the_browser_then_the_tenant(german: Catalogue) -> None:
    assert german.locales == ("de", "en")
    assert german.negotiate(["de_AT", "en"]) == "de"
    assert german.negotiate(["fr"], fallback="de") == "de"
    assert german.negotiate(["fr"], fallback="it") == "en"
    assert german.negotiate([], fallback=None) == "en"
    assert german.negotiate(["en", "de"], fallback="de") == "en"


def test_a_page_speaks_the_chosen_language(german: Catalogue) -> None:
    pages = Pages(catalogue=german)
    specs = form_specs({"type": "string", "maxLength": 5}, sensitive=False)

    def page(locale: str) -> str:
        views = field_views(specs, translations=pages.translations(locale))
        return pages.form(FormPage(question="Q?", fields=views, csrf="c", seconds_left=90, expires_at=1.8e9,
                                   tenant_name="Acme"), locale=locale)

    de, en = page("de"), page("en")
    assert 'lang="de"' in de and "Antwort senden" in de and "Frage von Acme" in de
    assert "Höchstens 5 Zeichen" in de and "1 Min. 30 Sek." in de
    # The countdown script reads the same wording from the page.
    assert 'data-format-m="{m} Min. {s} Sek."' in de
    assert 'lang="en"' in en and "Send answer" in en and "At most 5 characters" in en
    # A sentence nobody translated stays English.
    assert "Time left:" in de


def test_validation_messages_and_the_scripts_checks_speak_the_page_language(german: Catalogue, tmp_path: Path) -> None:
    po = tmp_path / "de" / "LC_MESSAGES" / "handraise.po"
    po.write_text(po.read_text(encoding="utf-8") + '\nmsgid "Enter an answer."\nmsgstr "Bitte eine Antwort eingeben."\n',
                  encoding="utf-8")
    catalogue = Catalogue(tmp_path)
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    german_t = catalogue.translations("de")
    views = field_views(form_specs(schema, sensitive=False), schema=schema, translations=german_t)
    assert views[0].data_attrs["data-msg-required"] == "Bitte eine Antwort eingeben."
    from handraise.core.schema import validate_answer

    assert validate_answer(schema, {}, t=german_t)[0].message == "Bitte eine Antwort eingeben."
