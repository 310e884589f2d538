"""Canonical JSON (RFC 8785) and the answer hash, checked against the RFC's own examples."""

from __future__ import annotations

import hashlib
import struct
import time

import pytest

from handraise.core.canonical import CanonicalizationError, answer_sha256, canonical_bytes, canonical_json


def from_ieee(bits: str) -> float:
    return struct.unpack(">d", bytes.fromhex(bits))[0]


def test_rfc8785_section_3_2_2_sample():
    value = {
        "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/",
        "literals": [None, True, False],
    }
    assert canonical_json(value) == (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )


def test_rfc8785_section_3_2_3_property_sorting_by_utf16_code_units():
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001F600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    assert canonical_json(value) == (
        '{"\\r":"Carriage Return","1":"One","\u0080":"Control","ö":"Latin Small Letter O With Diaeresis",'
        '"€":"Euro Sign","\U0001F600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}'
    )


@pytest.mark.parametrize(
    "bits, text",
    [
        # RFC 8785 Appendix B.
        ("0000000000000000", "0"),
        ("8000000000000000", "0"),
        ("0000000000000001", "5e-324"),
        ("8000000000000001", "-5e-324"),
        ("7fefffffffffffff", "1.7976931348623157e+308"),
        ("ffefffffffffffff", "-1.7976931348623157e+308"),
        ("4340000000000000", "9007199254740992"),
        ("c340000000000000", "-9007199254740992"),
        ("4430000000000000", "295147905179352830000"),
        ("44b52d02c7e14af5", "9.999999999999997e+22"),
        ("44b52d02c7e14af6", "1e+23"),
        ("44b52d02c7e14af7", "1.0000000000000001e+23"),
        ("444b1ae4d6e2ef4e", "999999999999999700000"),
        ("444b1ae4d6e2ef4f", "999999999999999900000"),
        ("444b1ae4d6e2ef50", "1e+21"),
        ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
        ("3eb0c6f7a0b5ed8d", "0.000001"),
        ("41b3de4355555553", "333333333.3333332"),
        ("41b3de4355555554", "333333333.33333325"),
        ("41b3de4355555555", "333333333.3333333"),
        ("41b3de4355555556", "333333333.3333334"),
        ("41b3de4355555557", "333333333.33333343"),
        ("becbf647612f3696", "-0.0000033333333333333333"),
        ("43143ff3c1cb0959", "1424953923781206.2"),
    ],
)
def test_rfc8785_appendix_b_numbers(bits, text):
    assert canonical_json(from_ieee(bits)) == text


@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"])
def test_rfc8785_appendix_b_nan_and_infinity_are_errors(bits):
    with pytest.raises(CanonicalizationError):
        canonical_json(from_ieee(bits))


def test_key_order_and_whitespace_do_not_matter():
    a = {"b": [1, 2.0, {"y": 1, "x": 2}], "a": "é"}
    b = {"a": "é", "b": [1.0, 2, {"x": 2, "y": 1}]}
    assert canonical_json(a) == canonical_json(b) == '{"a":"é","b":[1,2,{"x":2,"y":1}]}'
    assert answer_sha256(a) == answer_sha256(b)


def test_unicode_is_kept_as_utf8_not_escaped():
    assert canonical_json("Grüße 👋 \u2028") == '"Grüße 👋 \u2028"'
    assert canonical_bytes("ü") == b'"\xc3\xbc"'
    assert canonical_json("\u0000\u001f\u007f") == '"\\u0000\\u001f\u007f"'


def test_primitives_and_tuples():
    assert canonical_json(None) == "null"
    assert canonical_json(True) == "true"
    assert canonical_json("a") == '"a"'
    assert canonical_json(-0.0) == "0"
    assert canonical_json((1, "x")) == '[1,"x"]'
    assert canonical_json(9007199254740991) == "9007199254740991"


@pytest.mark.parametrize(
    "value",
    [2**53, {1: "a"}, b"bytes", {"a": object()}, "\ud800", float("nan")],
)
def test_values_without_a_canonical_form_raise(value):
    with pytest.raises(CanonicalizationError):
        canonical_json(value)
    with pytest.raises(ValueError):  # the error is a ValueError for callers that catch that
        answer_sha256(value)


def test_answer_sha256_is_the_hex_digest_of_the_canonical_bytes():
    assert answer_sha256({}) == hashlib.sha256(b"{}").hexdigest()
    assert answer_sha256({"decision": "approve"}) == hashlib.sha256(b'{"decision":"approve"}').hexdigest()
    assert answer_sha256("123456") == hashlib.sha256(b'"123456"').hexdigest()
    digest = answer_sha256([1, 2])
    assert len(digest) == 64 and int(digest, 16) >= 0
    assert answer_sha256("a") != answer_sha256("b")


def test_the_fast_path_spells_every_value_as_rfc8785_does():
    """canonical_json takes the C encoder for plain values: byte for byte what rfc8785 writes."""
    import random

    import rfc8785

    rng = random.Random(19)
    alphabet = ["a", "Z", "0", " ", "\"", "\\", "/", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "€", "\U0001F600",
                "\ufb33", "\u2028"]

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))

    def value(depth: int) -> object:
        kind = rng.randint(0, 8 if depth < 3 else 5)
        if kind == 0:
            return text()
        if kind == 1:
            return rng.choice([0, -1, 7, 2**53 - 1, -(2**53 - 1), 10**15])
        if kind == 2:
            return rng.choice([True, False, None])
        if kind == 3:
            return rng.choice([1.0, 0.5, 1e21, -0.0, 333333333.33333329, 1e-4, 9.99e-5, 1e16, 9999999999999998.0,
                               1794812971.385682, -0.1, 0.30000000000000004, 1e-7, 123456.789e10, 5e-324,
                               rng.uniform(-1e6, 1e6), rng.uniform(0, 1) * 10 ** rng.randint(-8, 22),
                               time.time()])
        if kind in (4, 5):
            return rng.choice(["123456", "approve", ""])
        if kind in (6, 7):
            return {text(): value(depth + 1) for _ in range(rng.randint(0, 4))}
        return [value(depth + 1) for _ in range(rng.randint(0, 4))]

    for _ in range(3000):
        v = value(0)
        assert canonical_json(v) == rfc8785.dumps(v).decode("utf-8"), v
    # Floats alone, across every binade the fast path takes and those around it.
    for _ in range(20000):
        f = rng.choice([1, -1]) * rng.uniform(1, 10) * 10.0 ** rng.randint(-9, 23)
        assert canonical_json(f) == rfc8785.dumps(f).decode("utf-8"), f
        assert canonical_json({"at": f}) == rfc8785.dumps({"at": f}).decode("utf-8"), f
    for bad in (2**53, {1: "x"}, float("nan"), "\ud800", {"k": ["\udfff"]}):
        with pytest.raises(CanonicalizationError):
            canonical_json(bad)


def test_text_of_every_script_takes_the_c_encoder_and_spells_as_rfc8785(monkeypatch: pytest.MonkeyPatch):
    """Text values of any code point but a lone surrogate take the fast path, byte for byte rfc8785's form;
    object names beyond ASCII (UTF-16 order) and lone surrogates still go to rfc8785."""
    import sys

    import rfc8785

    from handraise.core import canonical

    chunks = ["".join(chr(c) for c in range(start, min(start + 4096, sys.maxunicode + 1))
                      if not 0xD800 <= c <= 0xDFFF) for start in range(0, sys.maxunicode + 1, 4096)]
    expected = [rfc8785.dumps({"text": chunk, "list": [chunk]}).decode("utf-8") for chunk in chunks]
    slow: list[object] = []
    full = canonical.rfc8785.dumps
    monkeypatch.setattr(canonical.rfc8785, "dumps", lambda v: slow.append(v) or full(v))
    assert [canonical_json({"text": chunk, "list": [chunk]}) for chunk in chunks] == expected
    assert slow == []
    # A name beyond ASCII: UTF-16 order puts the astral one first, code-point order the other.
    names = {"\ue000": 1, "\U0001F600": 2}
    assert canonical_json(names) == '{"\U0001F600":2,"\ue000":1}' and slow == [names]
    for bad in ("é\ud800", {"k": "€\udfff"}):
        with pytest.raises(CanonicalizationError):
            canonical_json(bad)
