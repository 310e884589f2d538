"""One redactor for untrusted text: secret-shaped material becomes ``[REDACTED]``, the rest stays.

Used before storing corrections, notes and chat replies (DESIGN invariant 9), by the chat
refusal (:func:`is_secret_shaped`) and over every log line: one detector, judged by the corpus in
tests/core/test_redaction_corpus.py.

What counts as secret-shaped, and what deliberately does not:

* Known token shapes (AWS key ids, GitHub, GitLab, Slack, JWT, OpenAI and
  Anthropic ``sk-…``, Stripe, SendGrid, Google, npm, PyPI, Hugging Face,
  Telegram bot tokens, PEM private keys), ``Bearer``/``Basic`` credentials, the
  password in a URL, and the value of ``password=``/``token:``/``api_key=``
  style pairs (the key name stays so a reader knows what was there).
* Codes after a code word: ``pin: 4821``, ``OTP=123456``, ``my pin is 4821``,
  ``verification code: 482 913``, ``cvv: 123`` (3 to 12 digits; ``GPIO pin: 13`` stays).
* Passwords said in words: ``my password is hunter2``, ``passwd is x1y2``, ``the
  pass is Winter2026!``, ``db_pass=…``, ``pw: …``, a line ``pass Winter2026!`` or
  ``pwd hunter2``. "password", "passwd", "passphrase", "pw" and "pwd" always
  name a password: after "is" a value goes when it has a digit or a symbol,
  is quoted, or is the last word of its sentence and not a word that describes
  a password (``the password is incorrect.``, ``…is case-sensitive``). "pass" is
  also a verb, a ticket and a test result, so after it only a password-shaped
  value goes (letters with digits or symbols, 4+ characters): ``pass the salt``,
  ``pass: 12``, ``the pass is valid`` stay.
* Payment card numbers: 13 to 19 digits, whole or in the usual groups
  (4-4-4-4…, Amex 4-6-5, Diners 4-6-4) with one space or dash throughout, when
  the Luhn check passes. Kept even then: numbers that start with 0 (no card
  does), and whole runs that read as something else: an epoch timestamp in
  ms/µs/ns (13/16/19 digits from 15…), a date-time (``20261201…``), an ISBN-13
  (978/979). IBANs are kept: they are handed out to be paid, not secrets, so
  the digit groups after an IBAN's ``DE89 `` head are never read as a card.
* ``sk-`` bodies of 16+ characters count when a part mixes letters and
  digits, one part is 16+ characters long, or the body looks random; so
  ``sk-canary-rfc0056-do-not-leak-abc123`` and ``sk-abcdefghijklmnop`` go and
  ``sk-learn-is-a-library`` stays.
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

__all__ = ["REDACTED", "is_secret_shaped", "redact", "redact_value"]

REDACTED = "[REDACTED]"

_PEM_BLOCK = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----"
    # A truncated paste has no END line: everything after BEGIN goes.
    r"(?:.*?-----END (?P=label)-----|.*\Z)",
    re.DOTALL,
)

# Whole-match token shapes. Each has a fixed prefix, so prose never matches.
# Public material: certificates and public keys are meant to be shown; their base64 is left alone.
_PUBLIC_PEM = re.compile(
    r"-----BEGIN (?P<label>CERTIFICATE|PUBLIC KEY|RSA PUBLIC KEY|X509 CRL|CERTIFICATE REQUEST"
    r"|NEW CERTIFICATE REQUEST|PGP PUBLIC KEY BLOCK|PGP SIGNATURE)-----.*?-----END (?P=label)-----",
    re.DOTALL,
)

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
            r"\bglpat-[A-Za-z0-9_-]{20,}",  # GitLab personal access token
            r"\bgl(?:dt|ptt|rt|cbt|oas)-[A-Za-z0-9_-]{20,}",  # GitLab deploy, trigger, runner, CI tokens
            r"\bSG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}",  # SendGrid
            r"\bnpm_[A-Za-z0-9]{36}\b",  # npm
            r"\bpypi-AgE[A-Za-z0-9_-]{16,}",  # PyPI (a macaroon: always "AgE…")
            r"\bhf_[A-Za-z0-9]{30,}\b",  # Hugging Face
        ]
    )
)
# Telegram bot token, also inside an API URL (".../bot<token>/sendMessage"). Apart from _TOKENS: a
# leading lookbehind there would cost the whole alternation its first-character shortcut.
_TELEGRAM_TOKEN = re.compile(r"(?:(?<![A-Za-z0-9])|(?<=bot))[0-9]{6,12}:AA[A-Za-z0-9_-]{33}(?![A-Za-z0-9_-])")
# OpenAI/Anthropic-style "sk-…" is checked apart: "sk-learn-is-a-library" must survive.
_SK_TOKEN = re.compile(r"\bsk-(?P<body>[A-Za-z0-9_-]{16,})")
_SK_PARTS = re.compile(r"[_-]")
_SK_LONG_PART = 16

_SECRET_NAMES = (
    r"(?:password|passwd|passphrase|passcode|pwd|secret|token|api[_-]?key|apikey"
    r"|(?:access|secret|private|signing|encryption|master|client)[_-]?key|credentials?"
    # The same words elsewhere: German, Dutch, Spanish, Portuguese, Swedish, Finnish, Italian.
    r"|passwort|kennwort|wachtwoord|contrase\u00f1a|senha|l\u00f6senord|salasana)"
)
# Words naming a short numeric code. The name ends at the separator and starts a word or follows
# "_", "-" or ".", so "spin: 3000" and "otp_length: 6" stay; the value must be 3 to 12 digits.
_CODE_NAMES = (
    r"(?:(?:[A-Za-z0-9_.-]*[_.-])?(?:pin|otp|totp|hotp|cvv2?|cvc2?|mfa|2fa)(?:[ _-]?(?:code|number|no))?"
    r"|(?:one[ _-]time|verification|security|auth(?:entication)?|login|sms|2fa|mfa)[ _-](?:code|pin|passcode))"
)
_CODE_PAIR = re.compile(
    r"(?<![A-Za-z0-9_.-])(?P<key>(?i:" + _CODE_NAMES + r"))"
    r"(?P<keyquote>[\"']?)(?P<sep>[ \t]*[:=][ \t]*|[ \t]{1,8}(?i:is|was)[ \t]{1,8})(?P<quote>[\"']?)"
    r"(?P<code>[0-9](?:[ -]?[0-9]){2,11})(?![A-Za-z0-9])"
)
# The name may carry a prefix (aws_secret_access_key, db.password, X-Auth-Token)
# but must end at the separator, so max_tokens= or token_type: stay.
_PAIR = re.compile(
    r"(?<![A-Za-z0-9_.-])(?P<key>(?i:[A-Za-z0-9_.-]*?" + _SECRET_NAMES + r"))"
    r"(?P<keyquote>[\"']?)(?P<sep>[ \t]*[:=][ \t]*)"
    r"(?:(?P<done>\[REDACTED\])|\"(?P<dq>[^\"\n]*)\"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s\"',;&<>)\]}]+))"
)
# Passwords said in words (module docstring). "pass" is the weak word: only a password-shaped value
# counts after it. Values are bounded (128) and so are the gaps, so no pattern rescans a long input.
_PASSWORD_WORD = r"(?P<word>(?i:password|passwd|passphrase|pwd|pw|pass))"
_STRONG_PASSWORD_WORDS = frozenset({"password", "passwd", "passphrase", "pwd", "pw"})
_PASSWORD_VALUE = r"(?P<value>\"[^\"\n]{1,128}\"|'[^'\n]{1,128}'|`[^`\n]{1,128}`|[^\s\"'`]{1,128})"
# "my password is hunter2", "the pw was x1", "passwd's hunter2", "password is now Summer2025!"
_PASSWORD_IS = re.compile(
    r"(?<![A-Za-z0-9_.-])(?P<head>" + _PASSWORD_WORD
    + r"(?:'s|[ \t]{1,8}(?i:is|was)(?:[ \t]{1,8}(?i:now|still|currently))?:?)[ \t]{1,8})" + _PASSWORD_VALUE
)
# "db_pass=…", "pw: …" ("password:" and friends are _PAIR's); "bypass:" and "compass=" are other words.
_PASSWORD_PAIR = re.compile(
    r"(?<![A-Za-z0-9])(?P<head>(?P<word>(?i:pw|pass))[\"']?[ \t]*[:=][ \t]*)" + _PASSWORD_VALUE
)
# A line that is only the word and the value: "pass Winter2026!", "my pwd hunter2".
_PASSWORD_LINE = re.compile(
    r"^(?P<head>[ \t]{0,8}(?:(?i:my|the|your|our|new|wifi|wi-fi)[ \t]{1,8})?" + _PASSWORD_WORD + r"[ \t]{1,8})"
    r"(?P<value>[^\s\"'`]{1,128})(?=[ \t\r]{0,8}(?:\n|\Z))",
    re.MULTILINE,
)
# Words that say something about a password rather than being one ("the password is incorrect").
_DESCRIBING = frozenset("""
    a an the not no too also still now just only very quite really so same different new old
    wrong right correct incorrect invalid valid ok okay fine good bad great weak strong safe unsafe secure
    insecure long short simple complex easy hard difficult obvious common unique random temporary default
    optional mandatory required necessary empty blank missing unknown known unset set reset gone lost
    broken here there below above attached inside enclosed elsewhere somewhere nowhere mine yours his hers
    ours theirs it this that these those what which none nothing something everything secret private
    personal confidential sensitive hidden visible encrypted hashed stored saved changed expired due
    ready case-sensitive case-insensitive outdated useless worthless irrelevant unchanged
""".split())
_DESCRIBING_ENDINGS = ("ed", "ing", "ly", "able", "ible", "ive", "ful", "less", "ous")
_NUMBER_WITH_UNIT = re.compile(r"[0-9]+(?:[.,][0-9]+)?[A-Za-z%]{1,6}")
_MIN_PASSWORD = 4
_SENTENCE_END = ".!?,;"
_KEPT_AFTER = ".,;"
_NOT_A_VALUE_START = "/~$<{[(-#"

# Payment card numbers (module docstring): whole, 4-4-4-4(-3), 4-6-5 or 4-6-4, one separator throughout,
# not glued to letters or to more of the same number, and not the groups after an IBAN's head.
_CARD = re.compile(
    # The leading digit first, so the scan skips ahead to digits; the lookbehinds judge what precedes it.
    r"(?P<card>[0-9](?<![A-Za-z0-9_+-][0-9])(?<![0-9][.,][0-9])(?<![0-9]{4}[ -][0-9])(?<![A-Z]{2}[0-9]{2}[ -][0-9])"
    r"(?:[0-9]{12,18}"
    r"|[0-9]{3}(?P<s>[ -])[0-9]{4}(?P=s)[0-9]{4}(?P=s)(?:[0-9]{4}(?P=s)[0-9]{1,3}|[0-9]{1,4})"
    r"|[0-9]{3}(?P<t>[ -])[0-9]{6}(?P=t)[0-9]{4,5}))"
    r"(?![A-Za-z0-9_]|[.,][0-9])(?!(?P=s)[0-9]{4})(?!(?P=t)[0-9])"
)
# Whole runs that are something else: epoch ms/µs/ns, a date-time, an ISBN-13.
_NOT_A_CARD = re.compile(
    r"1[5-9](?:[0-9]{11}|[0-9]{14}|[0-9]{17})|97[89][0-9]{10}"
    r"|(?:19|20)[0-9]{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])[0-9]{5,11}"
)

_SECRET_KEY = re.compile(r"(?i:[A-Za-z0-9_.-]*?" + _SECRET_NAMES + r"|" + _CODE_NAMES + r")")

_AUTH_SCHEME = re.compile(r"\b(?P<scheme>(?i:bearer|basic))[ \t]+(?P<token>[A-Za-z0-9._~+/=-]{8,})")
# Bounded scheme and user: unbounded ones rescan a long "x-x-x-…" from every
# position, which is quadratic.
_URL_PASSWORD = re.compile(
    r"(?P<head>(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s/:@]{1,256}:)(?P<password>[^\s/@]{1,256})@"
)
_SLACK_WEBHOOK = re.compile(r"(?P<head>https://hooks\.slack\.com/(?:services|workflows)/)[A-Za-z0-9/_-]+")

_RUN = re.compile(r"[A-Za-z0-9+/=_-]{32,}")
_EQUALS_PART = re.compile(r"[A-Za-z0-9+/_-]+=*|=+")
_CALL = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*[(\[]")
# Literals and the keywords that start an expression: `token = await fetchToken()`.
_NOT_VALUES = frozenset({"None", "null", "nil", "undefined", "true", "false", "True", "False", "NULL",
                         "await", "new", "yield"})
_ENV_REFERENCE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\{\{")
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
    if "-----BEGIN " in text and _PUBLIC_PEM.search(text):
        # Only the text around public blocks is judged; the blocks themselves stay whole.
        out, last = [], 0
        for block in _PUBLIC_PEM.finditer(text):
            out += [_redact(text[last:block.start()]), block[0]]
            last = block.end()
        return "".join([*out, _redact(text[last:])])
    return _redact(text)


def _redact(text: str) -> str:
    text = _PEM_BLOCK.sub(REDACTED, text)
    text = _TOKENS.sub(REDACTED, text)
    if ":AA" in text:
        text = _TELEGRAM_TOKEN.sub(REDACTED, text)
    text = _SK_TOKEN.sub(_redact_sk, text)
    text = _AUTH_SCHEME.sub(_redact_auth, text)
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{REDACTED}@", text)
    text = _SLACK_WEBHOOK.sub(lambda m: f"{m['head']}{REDACTED}", text)
    text = _PAIR.sub(_redact_pair, text)
    text = _CODE_PAIR.sub(lambda m: f"{m['key']}{m['keyquote']}{m['sep']}{m['quote']}{REDACTED}", text)
    lowered = text.lower()
    if "pw" in lowered or "pass" in lowered:
        text = _PASSWORD_IS.sub(_redact_password_is, text)
        text = _PASSWORD_PAIR.sub(_redact_password, text)
        text = _PASSWORD_LINE.sub(_redact_password, text)
    text = _CARD.sub(_redact_card, text)
    return _RUN.sub(_redact_run, text)


def is_secret_shaped(text: str) -> bool:
    """Whether :func:`redact` would change ``text``: the one test for "secret-shaped" (chat refusals)."""
    return redact(text) != text


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
    parts = [p for p in _SK_PARTS.split(body) if p]
    mixed = any(any(c.isdigit() for c in p) and any(c.isalpha() for c in p) for p in parts)
    if mixed or any(len(p) >= _SK_LONG_PART for p in parts) or _looks_random(body):
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
    bare = match["bare"]
    if match["done"] is not None or (bare is not None and _is_code_reference(bare)):
        return match[0]
    if match["dq"] is not None:
        return f'{head}"{REDACTED}"' if match["dq"] else match[0]
    if match["sq"] is not None:
        return f"{head}'{REDACTED}'" if match["sq"] else match[0]
    return f"{head}{REDACTED}"


def _redact_password_is(match: re.Match[str]) -> str:
    value = match["value"]
    after = match.string[match.end():match.end() + 10].lstrip(" \t\r")
    last_word = value[-1] in _SENTENCE_END or not after or after[0] == "\n"
    return _redact_password(match, plain_word=last_word)


def _redact_password(match: re.Match[str], *, plain_word: bool = False) -> str:
    """``head`` + ``[REDACTED]`` when the value after a password word is one; ``plain_word``: an ordinary word
    counts too (after a strong word and "is", at the end of a sentence; after "pw:")."""
    value, strong = match["value"], match["word"].lower() in _STRONG_PASSWORD_WORDS
    plain_word = plain_word or (strong and match.re is _PASSWORD_PAIR)
    if value[0] in "\"'`":
        # Quoted: the words inside are the value itself, whatever they say; after "pass" still only a password's.
        if strong or _is_password(value[1:-1], strong=False, plain_word=False):
            return f"{match['head']}{value[0]}{REDACTED}{value[0]}"
        return match[0]
    if _is_password(value, strong=strong, plain_word=plain_word):
        # A comma, full stop or semicolon ending the word ends the sentence, not the password.
        core = value.rstrip(_KEPT_AFTER)
        return f"{match['head']}{REDACTED}{value[len(core):] if core else ''}"
    return match[0]


def _is_password(value: str, *, strong: bool, plain_word: bool) -> bool:
    core = value.rstrip(_SENTENCE_END + ":)")
    if (not core or value.startswith(REDACTED) or core[0] in _NOT_A_VALUE_START or _is_code_reference(value)
            or _NUMBER_WITH_UNIT.fullmatch(core)):
        return False
    if not any(c.isalpha() for c in core):
        return strong and core.isdigit() and len(core) >= _MIN_PASSWORD
    # Hyphens, apostrophes and dots join words ("case-sensitive", "e.g."); other symbols are a password's.
    shaped = any(c.isdigit() or not (c.isalnum() or c in "-'.") for c in core)
    if shaped:
        return len(core) >= _MIN_PASSWORD
    word = core.lower()
    return strong and plain_word and word not in _DESCRIBING and not word.endswith(_DESCRIBING_ENDINGS)


def _redact_card(match: re.Match[str]) -> str:
    card = match["card"]
    digits = card.replace(" ", "").replace("-", "")
    if digits[0] == "0" or (card.isdigit() and _NOT_A_CARD.fullmatch(digits)):
        return match[0]
    # A longer grouped match may be a card and what follows it ("4111 1111 1111 1111 123", a code).
    if _luhn_valid(digits) or (not card.isdigit() and len(digits) > 16 and _luhn_valid(digits[:16])):
        return REDACTED
    return match[0]


def _luhn_valid(digits: str) -> bool:
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = ord(c) - 48
        total += (d * 2 - 9 if d > 4 else d * 2) if i % 2 else d
    return total % 10 == 0


def _is_code_reference(value: str) -> bool:
    # `password = os.environ[...]`, `token=get_token(...)`, `password=None`, `PASSWORD=${DB_PASSWORD}`:
    # source code and templates name where a secret comes from, not the secret.
    return _CALL.match(value) is not None or value in _NOT_VALUES or _ENV_REFERENCE.fullmatch(value) is not None


def _redact_run(match: re.Match[str]) -> str:
    run = match[0]
    inner = run.rstrip("=")
    if "=" in inner:
        # "sha512=<digest>", "a=<key>": judge what stands on each side of "=" apart.
        return "".join(_redact_run(part) if len(part[0]) >= _MIN_RUN else part[0]
                       for part in _EQUALS_PART.finditer(run))
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
