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

__all__ = ["dumps", "dumps_sorted_compact", "dumps_unicode"]


def _encoder(*, ensure_ascii: bool, sort_keys: bool = False,
             separators: tuple[str, str] = (", ", ": ")) -> Callable[[Any], str]:
    if c_make_encoder is None:  # an interpreter without the C accelerator
        return lambda value: json.dumps(value, ensure_ascii=ensure_ascii, sort_keys=sort_keys, separators=separators)
    # json.dumps with these arguments (NaN allowed) without its check for circular references: what the server
    # writes is a tree it built or parsed.
    item_separator, key_separator = separators
    encode = c_make_encoder(None, json.JSONEncoder().default,
                            encode_basestring_ascii if ensure_ascii else encode_basestring, None, key_separator,
                            item_separator, sort_keys, False, True)
    return lambda value: "".join(encode(value, 0))


# ``json.dumps(value)``, byte for byte.
dumps = _encoder(ensure_ascii=True)
# ``json.dumps(value, ensure_ascii=False)``, byte for byte.
dumps_unicode = _encoder(ensure_ascii=False)
# ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``: canonical JSON's fast path.
dumps_sorted_compact = _encoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))
