"""String formats as a human means them: wall-clock time, a strict email address, an absolute URI."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator, FormatChecker

# --------------------------------------------------------------------------- formats


def _build_format_checker() -> FormatChecker:
    # Draft 2020-12's own checkers: the class-wide FormatChecker registry holds
    # draft 3's "time" (HH:MM:SS only) under the same name.
    library = Draft202012Validator.FORMAT_CHECKER.checkers
    # These come from the format-nongpl extra; without it jsonschema silently
    # accepts anything, which would let bad dates resume an agent.
    missing = [name for name in ("date", "time", "date-time", "uri") if name not in library]
    if missing:
        raise ImportError(
            f"jsonschema cannot check formats {', '.join(missing)}; install 'jsonschema[format-nongpl]'"
        )
    checker = FormatChecker(formats=())
    for name in ("date", "date-time"):
        checker.checkers[name] = library[name]
    library_time, time_raises = library["time"]
    library_uri, uri_raises = library["uri"]

    @checker.checks("time")
    def _is_time(value: object) -> bool:
        if not isinstance(value, str):
            return True
        if _WALL_TIME.fullmatch(value):
            return True
        try:
            return bool(library_time(value))
        except time_raises:
            return False

    @checker.checks("email")
    def _is_email(value: object) -> bool:
        if not isinstance(value, str):
            return True
        return _is_email_address(value)

    @checker.checks("uri")
    def _is_uri(value: object) -> bool:
        if not isinstance(value, str):
            return True
        try:
            if not library_uri(value):
                return False
            parts = urlsplit(value)
        except (ValueError, *uri_raises):
            return False
        scheme = parts.scheme.lower()
        if scheme in ("javascript", "data", "vbscript"):
            return False
        if scheme in ("http", "https", "ftp", "ftps", "ws", "wss") and not parts.hostname:
            return False
        return True

    return checker


_WALL_TIME = re.compile(r"([01]\d|2[0-3]):[0-5]\d(:([0-5]\d|60)(\.\d{1,9})?)?")
_EMAIL_LOCAL = re.compile(r"[^@\s\"(),:;<>\[\\\]]{1,64}")
_EMAIL_LABEL = re.compile(r"(?!-)[^\W_](?:[\w-]{0,61}[^\W_])?(?<!-)", re.UNICODE)


def _is_email_address(value: str) -> bool:
    local, at, domain = value.rpartition("@")
    if not at or not _EMAIL_LOCAL.fullmatch(local) or local.startswith(".") or local.endswith("."):
        return False
    if ".." in local or len(domain) > 253:
        return False
    labels = domain.split(".")
    if len(labels) < 2 or not all(_EMAIL_LABEL.fullmatch(label) for label in labels):
        return False
    # The top-level domain is letters (or an IDN "xn--" label), never all digits.
    return not labels[-1].isdigit()


FORMAT_CHECKER = _build_format_checker()
