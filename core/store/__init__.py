"""Storage: the store (``store.py``: lifecycle and queries), its SQLite database thread (``sqlite.py``),
the journal (``journal.py``), key/value state (``state.py``), leader locks (``leadership.py``) and the
units of work every connection runs (``units.py``)."""

from handraise.core.store.journal import JournalEntry
from handraise.core.store.store import NOTIFY_CHANNEL, Store, to_async_url
from handraise.core.store.units import StoreConnection

__all__ = ["NOTIFY_CHANNEL", "JournalEntry", "Store", "StoreConnection", "to_async_url"]
