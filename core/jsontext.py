"""JSON text as ``json.dumps`` writes it, from encoders built once (``json.dumps`` with any argument builds one
per call): the API's bodies, the columns the server stores, and cache keys for schemas."""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import (  # type: ignore[attr-defined]
    c_make_encoder,
    encode_basestring,
    encode_basestring_ascii,
)
from typing import Any

__all__ = ["dumps", "dumps_unicode"]


def _encoder(*, ensure_ascii: bool) -> Callable[[Any], str]:
    if c_make_encoder is None:  # an interpreter without the C accelerator
        return lambda value: json.dumps(value, ensure_ascii=ensure_ascii)
    # json.dumps's defaults (", " and ": ", NaN allowed, insertion order) without its check for circular
    # references: what the server writes is a tree it built or parsed.
    encode = c_make_encoder(None, json.JSONEncoder().default,
                            encode_basestring_ascii if ensure_ascii else encode_basestring, None, ": ", ", ",
                            False, False, True)
    return lambda value: "".join(encode(value, 0))


# ``json.dumps(value)``, byte for byte.
dumps = _encoder(ensure_ascii=True)
# ``json.dumps(value, ensure_ascii=False)``, byte for byte.
dumps_unicode = _encoder(ensure_ascii=False)
