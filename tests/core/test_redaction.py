"""The redactor: each secret shape goes, the text around it stays, ordinary text is untouched."""

from __future__ import annotations

import hashlib
import secrets
import string
import time
import uuid

import pytest

from handraise.core.redaction import REDACTED, redact, redact_value

# Fake credentials are assembled at run time so secret scanners do not flag this file.
ALNUM = string.ascii_letters + string.digits
RANDOM_36 = "R4nd0mT0k3nV4lu3xYz9QwErTy8UiOpAsD7f"
assert len(RANDOM_36) == 36


def token(prefix: str, body: str = RANDOM_36) -> str:
    return prefix + body


AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_STS_ID = "ASIA" + "Y34FZKBOKMUTVV7A"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"  # AWS's documented example
RANDOM_SECRET = "XdYxmElfraZyUBIJzB6vsTypbj" + "aRATO/Dq+W2M7L"  # same shape, really random
JWT = (
    "eyJ" + "hbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    + ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = (
    "-----BEGIN " + "RSA PRIVATE KEY-----\n"
    "MIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n"
    "KUpRKfFLfRYC9AIKjbJTWit+CqvjWYzvQwECAwEAAQ==\n"
    "-----END " + "RSA PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    "secret",
    [
        AWS_ID,
        AWS_STS_ID,
        token("ghp_"),
        token("gho_"),
        token("ghs_"),
        token("ghu_"),
        token("ghr_"),
        "github_pat_" + "11ABCDEFG0" + "a1B2c3D4e5F6g7H8i9J0k1_L2m3N4o5P6q7R8s9T0u1V2w3X4y5Z6a7B8c9D0e1F2g3H4i5J6k7L8",
        "xoxb-" + "1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
        "xoxp-" + "1234567890-1234567890-1234567890123-abcdef0123456789abcdef0123456789",
        "xoxa-" + "2-1234567890-abcdefABCDEF",
        "xoxr-" + "1234567890-abcdefABCDEF",
        "xapp-" + "1-A0123456789-1234567890123-abcdef0123456789abcdef",
        JWT,
        "sk-" + "proj-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0UvWxYz",
        "sk-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0UvWxYz12345678",
        "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "sk_test_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "rk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    ],
)
def test_known_token_shapes_are_redacted_with_the_text_around_them_kept(secret):
    text = f"Deploy failed. The key was {secret} — please rotate it."
    assert redact(text) == f"Deploy failed. The key was {REDACTED} — please rotate it."


def test_pem_private_key_block_goes_whole():
    text = f"here is the key:\n{PEM}\nthanks"
    assert redact(text) == f"here is the key:\n{REDACTED}\nthanks"


@pytest.mark.parametrize("label", ["PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "PGP PRIVATE KEY BLOCK"])
def test_every_private_key_label(label):
    block = f"-----BEGIN {label}-----\nabc\ndef\n-----END {label}-----"
    assert redact(f"a {block} b") == f"a {REDACTED} b"


def test_a_truncated_pem_block_is_redacted_to_the_end():
    assert redact("key: -----BEGIN " + "PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC") == f"key: {REDACTED}"


def test_public_material_is_not_a_private_key():
    cert = "-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----"
    assert redact(cert) == cert


@pytest.mark.parametrize(
    "text, expected",
    [
        ("password=hunter2", f"password={REDACTED}"),
        ("Password: hunter2 and more", f"Password: {REDACTED} and more"),
        ("passwd: hunter2", f"passwd: {REDACTED}"),
        ("secret=abc", f"secret={REDACTED}"),
        ("token=abc123", f"token={REDACTED}"),
        ("api_key=abc123", f"api_key={REDACTED}"),
        ("API-KEY: abc123", f"API-KEY: {REDACTED}"),
        ("apikey: abc123", f"apikey: {REDACTED}"),
        ("client_secret = s3cr3t", f"client_secret = {REDACTED}"),
        ("DB_PASSWORD=hunter2;Server=db", f"DB_PASSWORD={REDACTED};Server=db"),
        ("X-Auth-Token: abc123", f"X-Auth-Token: {REDACTED}"),
        (f"aws_secret_access_key={AWS_SECRET}", f"aws_secret_access_key={REDACTED}"),
        (f"aws_secret_access_key = {AWS_SECRET}", f"aws_secret_access_key = {REDACTED}"),
        ('{"password": "hunter2 with spaces", "user": "bob"}', f'{{"password": "{REDACTED}", "user": "bob"}}'),
        ("{'api_key': 'abc'}", f"{{'api_key': '{REDACTED}'}}"),
        ("https://example.com/cb?token=abc123&state=xyz", f"https://example.com/cb?token={REDACTED}&state=xyz"),
        ("access_token=abc, refresh_token=def", f"access_token={REDACTED}, refresh_token={REDACTED}"),
        ('password=""', 'password=""'),
    ],
)
def test_secret_pairs_keep_the_key_name(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    ["max_tokens=500", "token_type: bearer", "tokens: 5", "password_hint: your pet", "passwords are hard", "the secret santa"],
)
def test_lookalike_keys_are_left_alone(text):
    assert redact(text) == text


def test_bearer_keeps_the_word():
    assert redact("Authorization: Bearer abc123def456ghi") == f"Authorization: Bearer {REDACTED}"
    assert redact("curl -H 'authorization: bearer abc.def-ghi_jkl'") == f"curl -H 'authorization: bearer {REDACTED}'"
    assert redact(f"Authorization: Bearer {JWT}") == f"Authorization: Bearer {REDACTED}"
    assert redact("Authorization: Basic dXNlcjpwYXNzd29yZA==") == f"Authorization: Basic {REDACTED}"


def test_bearer_in_prose_is_kept():
    for text in ["Bearer of bad news", "The bearer instruments were sold", "basic understanding"]:
        assert redact(text) == text


def test_password_in_a_url_goes_and_the_rest_stays():
    assert redact("postgres://app:s3cret@db.internal:5432/app") == f"postgres://app:{REDACTED}@db.internal:5432/app"
    assert redact("https://example.com:8443/path") == "https://example.com:8443/path"


def test_slack_webhook_path_goes():
    url = "https://hooks.slack.com/services/" + "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
    assert redact(f"post to {url} now") == f"post to https://hooks.slack.com/services/{REDACTED} now"


@pytest.mark.parametrize(
    "blob",
    [
        RANDOM_SECRET,
        secrets.token_urlsafe(32),
        "Zx8" + "qL2vN7pR4tY1wB6mK9cF3hJ5sD0gA8eU",
        "a1b2c3d4e5f60718293a4b5c6d7e8f90",  # 32 hex: an API key, not a digest length
        "SGVsbG8gd29ybGQsIHRoaXMgaXMgYSB0ZXN0IG1lc3NhZ2U=",
    ],
)
def test_long_high_entropy_strings_are_redacted(blob):
    assert redact(f"value {blob} end") == f"value {REDACTED} end"


def test_random_keys_are_caught_reliably():
    # The entropy net is a heuristic; it must still catch nearly every random key.
    rng = secrets.SystemRandom()
    samples = [secrets.token_urlsafe(32) for _ in range(300)]
    samples += ["".join(rng.choice(ALNUM) for _ in range(40)) for _ in range(300)]
    caught = sum(1 for s in samples if REDACTED in redact(s))
    assert caught / len(samples) > 0.97


def test_a_random_piece_of_a_url_path_goes_and_the_words_stay():
    key = "AbCdEf1234567890GhIjKlMnOpQrStUv9x"
    assert redact(f"https://cdn.example.com/files/{key}/report.pdf") == f"https://cdn.example.com/files/{REDACTED}/report.pdf"


@pytest.mark.parametrize("algorithm, length", [("sha1", 40), ("sha256", 64), ("sha512", 128)])
def test_digests_are_identifiers_and_kept(algorithm, length):
    digest = hashlib.new(algorithm, b"x").hexdigest()
    assert len(digest) == length
    assert redact(f"sha: {digest}") == f"sha: {digest}"


def test_uuids_are_kept():
    ids = " ".join(str(uuid.uuid4()) for _ in range(5))
    assert redact(ids) == ids


def test_several_secrets_in_one_text():
    text = f"id {AWS_ID} secret {RANDOM_SECRET} token {token('ghp_')} jwt {JWT}"
    assert redact(text) == f"id {REDACTED} secret {REDACTED} token {REDACTED} jwt {REDACTED}"


def test_redaction_is_idempotent():
    text = f"password={token('ghp_')} Bearer {JWT} {PEM} {RANDOM_SECRET}"
    once = redact(text)
    assert redact(once) == once
    assert once.count(REDACTED) == 4


def test_passwords_in_words_and_cards_are_redacted_once():
    for text in ["my password is hunter2.", 'the pass is "Winter2026!"', "pass Winter2026!", "pw: letmein",
                 "card 4111 1111 1111 1111 exp 12/28", "my pin is 4821"]:
        once = redact(text)
        assert REDACTED in once and redact(once) == once, once


def test_redact_value_recurses_and_keeps_other_types():
    value = {
        "note": f"use {AWS_ID}",
        "list": ["ok", f"Bearer {JWT}", 5, None, True],
        "nested": {"deeper": [{"x": token("ghp_")}]},
        "tuple": ("a", AWS_ID),
        "n": 1.5,
        7: "int key",
    }
    assert redact_value(value) == {
        "note": f"use {REDACTED}",
        "list": ["ok", f"Bearer {REDACTED}", 5, None, True],
        "nested": {"deeper": [{"x": REDACTED}]},
        "tuple": ("a", REDACTED),
        "n": 1.5,
        7: "int key",
    }


def test_redact_value_redacts_strings_under_secret_named_keys():
    assert redact_value({"password": "hunter2", "api_key": "x", "max_tokens": "500", "user": "bob"}) == {
        "password": REDACTED, "api_key": REDACTED, "max_tokens": "500", "user": "bob",
    }
    assert redact_value({"token": ""}) == {"token": ""}
    assert redact_value({"token": 12345}) == {"token": 12345}


def test_redact_value_passes_scalars_and_none():
    assert redact_value(None) is None
    assert redact_value(3) == 3
    assert redact_value("plain") == "plain"


def test_redact_refuses_non_text():
    with pytest.raises(TypeError):
        redact(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        redact(b"bytes")  # type: ignore[arg-type]


def test_huge_and_weird_input_is_fast():
    # 200 kB each: a quadratic pattern would take minutes here, a linear one milliseconds.
    rng = secrets.SystemRandom()
    chunks = ["".join(rng.choice(ALNUM + "-_/+=") for _ in range(rng.randint(1, 60))) for _ in range(6000)]
    size = 200_000
    adversarial = [
        "a" * size,
        "password" * (size // 8),
        "-----BEGIN PRIVATE KEY-----" * (size // 27),
        "x-" * (size // 2),
        "a:" * (size // 2),
        "http://u:" * (size // 9),
        "eyJ" + "a" * size + ".",
        "sk-" * (size // 3),
        "=" * size,
        " ".join(chunks),
        # The password and card rules: their words and digits over and over, and long gaps after a word.
        "my password is " * (size // 15),
        "pass x1y2z3w4\n" * (size // 14),
        ("\n" + " " * 8 + "pass ") * (size // 14),
        "pw:" * (size // 3),
        "password" + " " * size + "is x",
        "4" * size,
        "4111 " * (size // 5),
        "4111-111111-" * (size // 12),
        "1234 5678 9012 3452 " * (size // 20),
    ]
    for text in adversarial:
        started = time.monotonic()
        result = redact(text)
        assert time.monotonic() - started < 2, text[:30]
        assert isinstance(result, str)
    assert redact("\x00\u202e\udcff 🙂") == "\x00\u202e\udcff 🙂"
