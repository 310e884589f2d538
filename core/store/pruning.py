"""Pruning: what a finished request leaves behind (chat button tokens, chat message refs, one-time links,
connector state about it), and the inbox's expired sign-in links, sessions and sign-ins through the identity
provider, are deleted once older than the retention, by the sweeper.

A row goes when it is older than the cut-off and its request is not pending; a pending request's rows
stay whatever their age. Each table is read through an index on the row's age (migration 0008), so a
pass reads the rows it deletes and the few of long-pending requests, never the whole table; each pass
deletes at most ``limit`` rows per table, so a first pass over a large backlog stays short.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, delete, exists, select, tuple_
from sqlalchemy.engine import Connection

from handraise.core.models import (
    ChatActionRow,
    InboxSessionRow,
    InboxSigninRow,
    LinkRow,
    MessageRefRow,
    OidcLoginRow,
    RequestRow,
    StateRow,
)

requests_t = RequestRow.__table__


def _prune(table: Any, age: Any, *conditions: Any) -> Any:
    pending = exists().where(requests_t.c.id == table.c.request_id, requests_t.c.status == "pending")
    key = list(table.primary_key.columns)
    old = (select(*key).where(age < bindparam("before"), *conditions, ~pending)
           .order_by(age).limit(bindparam("limit")))
    target = key[0] if len(key) == 1 else tuple_(*key)
    return delete(table).where(target.in_(old))


def _prune_expired(table: Any, cut_off: str = "before") -> Any:
    """Rows that expired before the cut-off (the inbox's sign-ins and sessions: about no request)."""
    old = (select(table.c.id).where(table.c.expires_at < bindparam(cut_off))
           .order_by(table.c.expires_at).limit(bindparam("limit")))
    return delete(table).where(table.c.id.in_(old))


def _statements() -> dict[str, Any]:
    chat_actions, message_refs = ChatActionRow.__table__, MessageRefRow.__table__
    links, state = LinkRow.__table__, StateRow.__table__
    return {
        "chat_actions": _prune(chat_actions, chat_actions.c.created_at),
        "message_refs": _prune(message_refs, message_refs.c.created_at),
        "links": _prune(links, links.c.created_at),
        # Only state about one request: a sync position or the server secret has no request_id.
        "kv_state": _prune(state, state.c.updated_at, state.c.request_id.is_not(None)),
        # An inbox sign-in link, used or not, and a session, ended or not, once past their absolute end.
        "inbox_signins": _prune_expired(InboxSigninRow.__table__),
        "inbox_sessions": _prune_expired(InboxSessionRow.__table__),
        # A sign-in through the identity provider, finished or abandoned, as soon as it is past its end: anyone
        # may start one, so none is kept for the retention (and starts are rate-limited per address).
        "oidc_logins": _prune_expired(OidcLoginRow.__table__, "now"),
    }


_PRUNE = _statements()


def prune_spent(c: Connection, before: float, limit: int, now: float) -> dict[str, int]:
    return {name: c.execute(stmt, {"before": before, "now": now, "limit": limit}).rowcount
            for name, stmt in _PRUNE.items()}
