"""``handraise journal``: print the chains' heads (an anchor to keep off-site) and verify against one."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from handraise.core.commands.base import EXIT_ERROR, settings_of, with_store
from handraise.core.errors import ConfigError


ANCHOR_FORMAT = "handraise.journal-anchor/1"


def cmd_journal_anchor(args: argparse.Namespace) -> int:
    """Print every tenant's chain head as one JSON line: keep it off this machine, verify against it later."""
    settings = settings_of(args)
    heads = asyncio.run(with_store(settings, lambda s: s.journal.anchor()))
    print(json.dumps({"format": ANCHOR_FORMAT, "at": int(time.time()), "heads": heads}, sort_keys=True))
    return 0


def _read_anchor(value: str) -> dict[str, Any]:
    """``--anchor``: the JSON line ``journal anchor`` printed, or a file holding it."""
    text = value
    if not value.lstrip().startswith("{"):
        try:
            text = Path(value).read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"--anchor {value}: {e}") from None
    try:
        anchor = json.loads(text)
        heads = anchor["heads"]
        if anchor.get("format") != ANCHOR_FORMAT or not all(
                isinstance(h, dict) and isinstance(h.get("seq"), int) and isinstance(h.get("hash"), str)
                for h in heads.values()):
            raise ValueError("not an anchor")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError("--anchor: not what 'handraise journal anchor' prints") from None
    return heads


def cmd_journal_verify(args: argparse.Namespace) -> int:
    """Walk every chain (against the anchor, when given) and cross-check the requests table with it, each
    answer recomputed (core/store/crosscheck.py); exit 1 naming each difference."""
    settings = settings_of(args)
    anchor = _read_anchor(args.anchor) if args.anchor else None

    async def verify(store: Any) -> tuple[list[str], dict[str, Any]]:
        return await store.verify_journal(anchor=anchor), await store.journal.anchor()

    problems, heads = asyncio.run(with_store(settings, verify))
    if problems:
        for problem in problems[:50]:
            print(f"journal: {problem}", file=sys.stderr)
        print(f"journal: BROKEN ({len(problems)} problem(s))", file=sys.stderr)
        return EXIT_ERROR
    count = sum(h["seq"] for h in heads.values())
    against = " and reaches the anchor" if anchor is not None else ""
    print(f"journal: intact ({count} entries in {len(heads)} tenant chain(s){against}; every answer, vote and "
          "proposal in the requests table matches it)")
    return 0
