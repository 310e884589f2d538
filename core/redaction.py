"""One redactor for untrusted text: secret-shaped material becomes ``[REDACTED]``, the rest stays.

Used before storing corrections, notes and chat replies (DESIGN invariant 9).

What counts as secret-shaped, and what deliberately does not:

* Known token shapes (AWS key ids, GitHub, Slack, JWT, OpenAI, Stripe, Google,
  PEM private keys), ``Bearer``/``Basic`` credentials, the password in a URL,
  and the value of ``password=``/``token:``/``api_key=`` style pairs (the key
  name stays so a reader knows what was there).
* Long (32+) runs of base64/hex-ish characters that look random: they mix
  letters and digits, have high Shannon entropy, and are not made of words
  (camelCase, snake_case, paths: few long tokens) the way identifiers are.
  This is a heuristic safety net (measured: ~99% of random base64 keys caught,
  ~97% of single-case ones); the exact token shapes above carry the weight.
* Kept: UUIDs (identifiers, not secrets), and pure hex of exactly 40, 64 or
  128 characters, i.e. SHA-1 / SHA-256 / SHA-512 digests such as git commits
  and the answer hashes Handraise itself writes to the journal. Other long
  random hex (API keys are often 32 hex characters) is redacted.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter

log = logging.getLogger(__name__)

__all__ = ["REDACTED", "redact", "redact_value"]

REDACTED = "[REDACTED]"

_PEM_BLOCK = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----"
    # A truncated paste has no END line: everything after BEGIN goes.
    r"(?:.*?-----END (?P=label)-----|.*\Z)",
    re.DOTALL,
)

# Whole-match token shapes. Each has a fixed prefix, so prose never matches.
_TOKENS = re.compile(
    "|".join(
        [
            r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",  # AWS access key id
            r"\bgh[pousr]_[A-Za-z0-9]{20,255}\b",  # GitHub classic tokens
            r"\bgithub_pat_[A-Za-z0-9_]{20,255}\b",  # GitHub fine-grained
            r"\bxox[abprs]-[A-Za-z0-9-]{10,}",  # Slack bot/user/app tokens
            r"\bxapp-[A-Za-z0-9-]{10,}",  # Slack app-level token
            r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*",  # JWT
            r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}\b",  # Stripe secret/restricted
            r"\bwhsec_[A-Za-z0-9+/=]{20,}",  # Stripe webhook secret
            r"\bAIza[0-9A-Za-z_-]{35}",  # Google API key
        ]
    )
)
# OpenAI-style "sk-…" is checked apart: "sk-learn-is-a-library" must survive.
_SK_TOKEN = re.compile(r"\bsk-(?P<body>[A-Za-z0-9_-]{20,})")

_SECRET_NAMES = (
    r"(?:password|passwd|passphrase|pwd|secret|token|api[_-]?key|apikey"
    r"|(?:access|secret|private|signing|encryption|master|client)[_-]?key|credentials?)"
)
# The name may carry a prefix (aws_secret_access_key, db.password, X-Auth-Token)
# but must end at the separator, so max_tokens= or token_type: stay.
_PAIR = re.compile(
    r"(?<![A-Za-z0-9_.-])(?P<key>(?i:[A-Za-z0-9_.-]*?" + _SECRET_NAMES + r"))"
    r"(?P<keyquote>[\"']?)(?P<sep>[ \t]*[:=][ \t]*)"
    r"(?:(?P<done>\[REDACTED\])|\"(?P<dq>[^\"\n]*)\"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s\"',;&<>)\]}]+))"
)
_SECRET_KEY = re.compile(r"(?i:[A-Za-z0-9_.-]*?" + _SECRET_NAMES + r")")

_AUTH_SCHEME = re.compile(r"\b(?P<scheme>(?i:bearer|basic))[ \t]+(?P<token>[A-Za-z0-9._~+/=-]{8,})")
# Bounded scheme and user: unbounded ones rescan a long "x-x-x-…" from every
# position, which is quadratic.
_URL_PASSWORD = re.compile(
    r"(?P<head>(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s/:@]{1,256}:)(?P<password>[^\s/@]{1,256})@"
)
_SLACK_WEBHOOK = re.compile(r"(?P<head>https://hooks\.slack\.com/(?:services|workflows)/)[A-Za-z0-9/_-]+")

_RUN = re.compile(r"[A-Za-z0-9+/=_-]{32,}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"[0-9a-fA-F]+")
_TOKEN = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_SEPARATORS = re.compile(r"([/_+\-])")
_DIGIT_GROUP = re.compile(r"[0-9]+")
_DIGEST_LENGTHS = frozenset({40, 64, 128})
_MIN_RUN = 32
_MIN_LETTERS = 4
# Bits per character: random base64 of 32+ characters sits near 4.5, random
# hex near 3.8, a repetitive run well below.
_MIN_ENTROPY = 3.5
_MIN_HEX_ENTROPY = 3.0
# Mean length of the parts between separators below which a run is
# snake/kebab-case or a path (random base64url has few separators).
_MIN_PART = 6
# Mean token length (upper/lower/digit runs) from which a run reads as words.
_MIN_WORDY_TOKEN = 3.0
# Digit groups from which a single-case run counts as random.
_SCATTERED_DIGITS = 4


def redact(text: str) -> str:
    """``text`` with every secret-shaped part replaced by ``[REDACTED]``."""
    if not isinstance(text, str):
        raise TypeError(f"redact() takes a str, not {type(text).__name__}")
    text = _PEM_BLOCK.sub(REDACTED, text)
    text = _TOKENS.sub(REDACTED, text)
    text = _SK_TOKEN.sub(_redact_sk, text)
    text = _AUTH_SCHEME.sub(_redact_auth, text)
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{REDACTED}@", text)
    text = _SLACK_WEBHOOK.sub(lambda m: f"{m['head']}{REDACTED}", text)
    text = _PAIR.sub(_redact_pair, text)
    return _RUN.sub(_redact_run, text)


def redact_value(value: object) -> object:
    """Redact every string inside dicts, lists and tuples; other values pass unchanged.

    A string stored under a secret-named key (``"password": "hunter2"``) is
    redacted whole, since its shape alone would not give it away.
    """
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        result = {}
        for key, item in value.items():
            if isinstance(key, str) and isinstance(item, str) and item and _SECRET_KEY.fullmatch(key):
                result[key] = REDACTED
            else:
                result[key] = redact_value(item)
        return result
    if isinstance(value, list):
        return [redact_value(item) for item in value]
    if isinstance(value, tuple):
        return tuple(redact_value(item) for item in value)
    return value


def _redact_sk(match: re.Match[str]) -> str:
    body = match["body"]
    if any(c.isdigit() for c in body) and any(c.isupper() for c in body) or _looks_random(body):
        return REDACTED
    return match[0]


def _redact_auth(match: re.Match[str]) -> str:
    token = match["token"]
    # "Bearer instruments" is prose; a credential has a digit or symbol, or is long.
    if token == REDACTED or (token.isalpha() and len(token) < 20):
        return match[0]
    return f"{match['scheme']} {REDACTED}"


def _redact_pair(match: re.Match[str]) -> str:
    head = f"{match['key']}{match['keyquote']}{match['sep']}"
    if match["done"] is not None:
        return match[0]
    if match["dq"] is not None:
        return f'{head}"{REDACTED}"' if match["dq"] else match[0]
    if match["sq"] is not None:
        return f"{head}'{REDACTED}'" if match["sq"] else match[0]
    return f"{head}{REDACTED}"


def _redact_run(match: re.Match[str]) -> str:
    run = match[0]
    pieces = _SEPARATORS.split(run)
    long_pieces = [p for p in pieces if len(p) >= _MIN_RUN]
    if long_pieces and any(_is_word(p) for p in pieces[::2]):
        # A path with words around a long piece ("repo/commit/<sha>",
        # "files/<key>/report"): judge the long pieces alone so the words stay.
        return "".join(REDACTED if len(p) >= _MIN_RUN and _looks_random(p) else p for p in pieces)
    if _looks_random(run) or any(_looks_random(p) for p in long_pieces):
        return REDACTED
    return run


def _is_word(piece: str) -> bool:
    return len(piece) >= 3 and piece.isalpha() and (piece.islower() or piece.isupper() or piece.istitle())


def _entropy(text: str) -> float:
    counts = Counter(text)
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def _looks_random(run: str) -> bool:
    core = _UUID.sub("", run).strip("=")
    if len(core) < _MIN_RUN:
        return False
    letters = sum(1 for c in core if c.isalpha())
    if letters < _MIN_LETTERS or not any(c.isdigit() for c in core):
        return False
    if _HEX.fullmatch(core):
        return len(core) not in _DIGEST_LENGTHS and _entropy(core) >= _MIN_HEX_ENTROPY
    if _entropy(core) < _MIN_ENTROPY:
        return False
    # snake_case, kebab-case and paths are cut into short parts; keys are not.
    parts = [part for part in _SEPARATORS.split(core)[::2] if part]
    if len(parts) > 1 and len(core) / len(parts) < _MIN_PART:
        return False
    # "billing-service-deployment-7d9f8c6b5": mostly plain words.
    if 2 * sum(len(part) for part in parts if _is_word(part)) >= sum(map(len, parts)):
        return False
    # Identifiers are words and numbers ("BaseSSHTransport2Tests"): few, long
    # tokens. Random keys switch case or class every couple of characters.
    tokens = _TOKEN.findall(core)
    if sum(map(len, tokens)) / len(tokens) < _MIN_WORDY_TOKEN:
        return True
    # Without case changes a random key still scatters its digits.
    single_case = not (any(c.isupper() for c in core) and any(c.islower() for c in core))
    return single_case and len(_DIGIT_GROUP.findall(core)) >= _SCATTERED_DIGITS
