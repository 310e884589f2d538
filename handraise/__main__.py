"""``python -m handraise``: the same command line as ``handraise``."""

from __future__ import annotations

from handraise.core.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
