"""``handraise serve`` with the journal's old global lock put back, to measure the chain per tenant
against it: every PostgreSQL append first takes one transaction-level advisory lock (held to COMMIT),
as every write did before the keyed journal (c49e4ad). Run through ``BENCH_SERVE_SCRIPT``:

    BENCH_SERVE_SCRIPT=bench/global_chain_lock.py python bench/sustained.py --agents 0 --tenants 2
"""

from __future__ import annotations

import sys
from typing import Any

from sqlalchemy import text

from handraise.core.store import journal

_chained_append = journal._append
_GLOBAL_LOCK = text("SELECT pg_advisory_xact_lock(7215)")


def _append_under_one_lock(c: Any, key: bytes, dialect: str, row: dict[str, Any], notify: Any = None) -> Any:
    if dialect == "postgresql":
        c.execute(_GLOBAL_LOCK)
    return _chained_append(c, key, dialect, row, notify)


if __name__ == "__main__":
    journal._append = _append_under_one_lock
    from handraise.core.cli import main

    sys.exit(main(sys.argv[1:]))
