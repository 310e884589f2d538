"""Who may use the operator inbox: one-time sign-in links that become server-side browser sessions.

No accounts: an operator with an ``answer`` key (or the CLI, on the server's own
store) mints a short-lived link for a name; opening it once makes a session for
that tenant acting as ``operator:<name>``, which is nobody in particular. A link
bound to a person (minted by that person's own key, or sent to their own channel)
makes a session acting as ``person:<id>``, as does a sign-in through the identity
provider (``open_session``). Tokens are random and shown once; the store keeps
their sha256 only. The pages themselves live in ``webforms/inbox/``.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from handraise.core.api import RequestView
from handraise.core.config import Settings
from handraise.core.cursors import KEY_PURPOSE as CURSOR_KEY_PURPOSE
from handraise.core.cursors import CursorSigner, Position
from handraise.core.errors import (
    ExpiredError,
    LinkUsedError,
    NotFoundError,
    PersonMismatchError,
    PersonNotBoundError,
    ValidationFailedError,
)
from handraise.core.people import require_person
from handraise.core.store import Store

__all__ = ["SESSION_SCOPES", "SIGNIN_PATH", "HistoryPage", "InboxAccess", "InboxSession", "MintedSignin", "check_name",
           "principal_of"]

log = logging.getLogger(__name__)

# Followed by the link's token; core/logs.py masks what follows it in every log line.
SIGNIN_PATH = "/inbox/signin/"
# Printable, no control or format characters, no ':' (the principal's separator) and no '<>'.
_NAME = re.compile(r"^[^\x00-\x1f\x7f-\x9f:<>\u200b-\u200f\u2028-\u202e\u2066-\u2069]{1,64}$")
# A session's last-seen time is written at most this often (one write per minute, not per request).
_TOUCH_EVERY = 60.0


def check_name(name: object) -> str:
    """The operator's name as the journal will show it (``operator:<name>``), or ValidationFailedError."""
    text = name.strip() if isinstance(name, str) else ""
    if not _NAME.match(text):
        raise ValidationFailedError(
            "name must be 1 to 64 printable characters without ':', '<' or '>'",
            fields=[{"field": "name", "message": "1 to 64 printable characters, without ':', '<' or '>'"}])
    return text


def _scopes(text: str) -> frozenset[str]:
    return frozenset(s for s in text.split(",") if s in SESSION_SCOPES)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class HistoryPage:
    """A page of the inbox's history and the cursors of the pages beside it (None: no such page)."""

    views: list[RequestView]
    older: str | None
    newer: str | None


@dataclass(frozen=True)
class MintedSignin:
    id: str
    url: str
    expires_at: float
    name: str
    person: str | None = None


# What a session may do: answer and read always; annotate only when whoever minted the link could.
SESSION_SCOPES = ("answer", "read", "annotate")


@dataclass(frozen=True)
class InboxSession:
    id: str
    tenant_id: str
    name: str
    created_at: float
    expires_at: float
    scopes: frozenset[str] = frozenset({"answer", "read"})
    # The proven person the session acts as, or None: an operator session, nobody in particular.
    person: str | None = None

    @property
    def principal(self) -> str:
        """Who the session acts as, in the journal and on answers (DESIGN.md's principal list)."""
        return principal_of(self.name, self.person)


def principal_of(name: str, person: str | None) -> str:
    """``person:<id>`` for a session bound to a proven person, else ``operator:<name>``."""
    return f"person:{person}" if person is not None else f"operator:{name}"


class InboxAccess:
    """Mint, redeem and check sign-ins; every step is journaled under the tenant."""

    def __init__(self, *, settings: Settings, store: Store, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self._cursors: CursorSigner | None = None

    async def mint(self, *, tenant_id: str, name: str | None = None, person: str | None = None, created_by: str,
                   scopes: frozenset[str] | set[str] = frozenset(SESSION_SCOPES),
                   private: bool = False) -> MintedSignin:
        """``scopes``: the minter's; the session gets answer and read, and annotate if the minter had it.

        ``person``: the session will act as that person. The caller has proven the link reaches only
        them (their own key asks, or it goes to their own channel: ``private``, journaled where it went by
        core/personal.py); this only checks they are the tenant's. A name that is one of the tenant's people's ids
        is refused for an operator session: it would read as that person and be nobody."""
        tenant = self.settings.tenant(tenant_id)
        if tenant is None:
            raise NotFoundError(f"no tenant {tenant_id!r}")
        if person is not None:
            found = require_person(self.settings, tenant_id, person)
            name = check_name(name if name is not None else found.display)
        else:
            name = check_name(name)
        # A name that reads as someone else would show them where they never acted.
        named = next((p for p in tenant.people if name.casefold() in (p.id.casefold(), p.display.casefold())), None)
        if named is not None and person is None:
            raise PersonNotBoundError(f"{name} is one of this tenant's people: a sign-in in their name is minted by "
                                      'their own key, or sent to their own channel ({"person": "%s", "deliver": '
                                      "true})" % named.id)
        if named is not None and named.id != person:
            raise PersonMismatchError(f"{name} is {named.display}: a session of {person} is not named after them")
        granted = [s for s in SESSION_SCOPES if s in scopes or s in ("answer", "read")]
        token = secrets.token_urlsafe(32)
        now = self.clock()
        row = {"id": f"sgn_{secrets.token_urlsafe(12)}", "tenant_id": tenant_id, "name": name,
               "token_sha256": _digest(token), "scopes": ",".join(granted), "created_by": created_by,
               "created_at": now, "person": person,
               "expires_at": now + self.settings.inbox.signin_link_seconds, "used_at": None}
        data = {"signin_id": row["id"], "for": principal_of(name, person),
                **({"private": True} if private else {})}
        async with self.store.transaction() as conn:
            await self.store.inbox.insert_signin(conn, row)
            await self.store.append_journal(conn, tenant_id=tenant_id, event="inbox_link_minted",
                                            principal=created_by, channel="inbox", data=data, at=now)
        log.info("inbox sign-in link minted", extra={"signin_id": row["id"], "tenant_id": tenant_id})
        return MintedSignin(id=row["id"], url=f"{self.settings.server.public_url}{SIGNIN_PATH}{token}",
                            expires_at=row["expires_at"], name=name, person=person)

    async def pending_signin(self, token: str) -> dict[str, str | None]:
        """What a sign-in link is for (``tenant_id``, ``name``, ``person``), without using it; raises like
        ``redeem``."""
        row = await self._signin(token)
        return {"tenant_id": row["tenant_id"], "name": row["name"], "person": row.get("person")}

    async def redeem(self, token: str) -> tuple[str, InboxSession]:
        """Use the link once: a new session and its cookie token. NotFoundError, LinkUsedError, ExpiredError."""
        row = await self._signin(token)
        now = self.clock()
        session_token = secrets.token_urlsafe(32)
        settings = self.settings.inbox
        person = row.get("person")
        session = {"id": f"ses_{secrets.token_urlsafe(12)}", "tenant_id": row["tenant_id"], "name": row["name"],
                   "token_sha256": _digest(session_token), "signin_id": row["id"], "scopes": row["scopes"],
                   "created_at": now, "person": person,
                   "last_seen_at": now, "expires_at": now + settings.session_max_seconds, "ended_at": None}
        async with self.store.transaction() as conn:
            won = await self.store.inbox.use_signin(conn, signin_id=row["id"], now=now)
            if won:
                await self.store.inbox.insert_session(conn, session)
                await self.store.append_journal(conn, tenant_id=row["tenant_id"], event="inbox_signed_in",
                                                principal=principal_of(row["name"], person), channel="inbox",
                                                data={"signin_id": row["id"], "session_id": session["id"]}, at=now)
        if not won:
            # Another tab used it a moment ago, or it expired in between: say which.
            await self._signin(token)
            raise LinkUsedError("this sign-in link was used already")
        log.info("inbox signed in", extra={"session_id": session["id"], "tenant_id": row["tenant_id"]})
        return session_token, InboxSession(session["id"], row["tenant_id"], row["name"], now, session["expires_at"],
                                           _scopes(row["scopes"]), person)

    async def open_session(self, *, tenant_id: str, person: str, via: str,
                           detail: dict[str, str] | None = None) -> tuple[str, InboxSession]:
        """A session for ``person``, proven by ``via`` (``"oidc"``: the identity provider's sign-in mapped
        to them); no sign-in link. The session may answer and read. Journaled ``inbox_signed_in`` with
        ``via`` and ``detail`` (the claim that mapped them, never a token)."""
        tenant = self.settings.tenant(tenant_id)
        found = tenant.person(person) if tenant is not None else None
        if found is None:
            raise NotFoundError(f"{person} is not one of tenant {tenant_id}'s people")
        now = self.clock()
        session_token = secrets.token_urlsafe(32)
        name = check_name(found.display[:64])
        session = {"id": f"ses_{secrets.token_urlsafe(12)}", "tenant_id": tenant_id, "name": name,
                   "token_sha256": _digest(session_token), "signin_id": via, "scopes": "answer,read",
                   "created_at": now, "person": person, "last_seen_at": now,
                   "expires_at": now + self.settings.inbox.session_max_seconds, "ended_at": None}
        async with self.store.transaction() as conn:
            await self.store.inbox.insert_session(conn, session)
            await self.store.append_journal(conn, tenant_id=tenant_id, event="inbox_signed_in",
                                            principal=principal_of(name, person), channel="inbox",
                                            data={"via": via, "session_id": session["id"], **(detail or {})}, at=now)
        log.info("inbox signed in", extra={"session_id": session["id"], "tenant_id": tenant_id, "via": via})
        return session_token, InboxSession(session["id"], tenant_id, name, now, session["expires_at"],
                                           frozenset({"answer", "read"}), person)

    async def session(self, token: str | None) -> InboxSession | None:
        """The live session a cookie names, or None (unknown, signed out, idle too long, past its end)."""
        if not token or len(token) > 128:
            return None
        row = await self.store.inbox.session_by_hash(_digest(token))
        if row is None:
            return None
        now = self.clock()
        idle_end = row["last_seen_at"] + self.settings.inbox.session_idle_seconds
        if now >= row["expires_at"] or now >= idle_end or self.settings.tenant(row["tenant_id"]) is None:
            return None
        if now - row["last_seen_at"] >= _TOUCH_EVERY:
            await self.store.inbox.touch_session(row["id"], now=now)
        return InboxSession(row["id"], row["tenant_id"], row["name"], row["created_at"], row["expires_at"],
                            _scopes(row["scopes"]), row.get("person"))

    async def sign_out(self, session: InboxSession) -> None:
        now = self.clock()
        if await self.store.inbox.end_session(session.id, now=now):
            async with self.store.transaction() as conn:
                await self.store.append_journal(conn, tenant_id=session.tenant_id, event="inbox_signed_out",
                                                principal=session.principal, channel="inbox",
                                                data={"session_id": session.id}, at=now)

    # -- what the inbox lists (read-only; answers go through the lifecycle service) ----------

    async def requests(self, session: InboxSession, *, statuses: tuple[str, ...], run_id: str | None = None,
                       channel: str | None = None, created_by: str | None = None, since: float | None = None,
                       until: float | None = None, limit: int = 50) -> list[RequestView]:
        """The session's tenant's newest requests, each with its deliveries."""
        pending_only = statuses == ("pending",)
        rows = await self.store.inbox.requests_page(
            session.tenant_id, statuses=statuses, run_id=run_id, channel=channel, created_by=created_by, since=since,
            until=until, unexpired_at=self.clock() if pending_only else None, limit=limit)
        return await self._views(session, rows)

    async def history(self, session: InboxSession, *, statuses: tuple[str, ...], run_id: str | None = None,
                      channel: str | None = None, created_by: str | None = None, since: float | None = None,
                      until: float | None = None, older: str | None = None, newer: str | None = None,
                      limit: int = 25) -> HistoryPage:
        """A page of the session's tenant's finished requests, newest first: the newest, or the one just
        older than the cursor ``older`` or just newer than ``newer`` (cursors a previous page gave out for
        these same filters; another one is BadRequestError). Every page is an index range, not an OFFSET."""
        scope = {"list": "inbox history", "tenant": session.tenant_id, "statuses": ",".join(statuses),
                 "run_id": run_id, "channel": channel, "created_by": created_by,
                 "since": None if since is None else repr(since), "until": None if until is None else repr(until)}
        signer = self._signer()
        older_pos = signer.decode(older, scope=scope) if older is not None else None
        newer_pos = signer.decode(newer, scope=scope) if newer is not None and older_pos is None else None
        rows = await self.store.inbox.requests_page(
            session.tenant_id, statuses=statuses, run_id=run_id, channel=channel, created_by=created_by, since=since,
            until=until, limit=limit + 1,
            older_than=None if older_pos is None else (older_pos.created_at, older_pos.id),
            newer_than=None if newer_pos is None else (newer_pos.created_at, newer_pos.id))
        more = len(rows) > limit
        # Paging newer, the extra row is the newest (the rows come newest first): drop it, not the oldest.
        rows = rows[1:] if more and newer_pos is not None else rows[:limit]
        views = await self._views(session, rows)

        def cursor(view: RequestView) -> str:
            return signer.encode(Position(view.created_at, view.id), scope=scope)

        has_older = more if newer_pos is None else True
        has_newer = (older_pos is not None) if newer_pos is None else more
        return HistoryPage(views=views, older=cursor(views[-1]) if views and has_older else None,
                           newer=cursor(views[0]) if views and has_newer else None)

    def _signer(self) -> CursorSigner:
        if self._cursors is None:
            self._cursors = CursorSigner(self.store.secret.key(CURSOR_KEY_PURPOSE))
        return self._cursors

    async def _views(self, session: InboxSession, rows: list[dict]) -> list[RequestView]:
        deliveries = await self.store.deliveries.for_requests(session.tenant_id, [r["id"] for r in rows])
        return [RequestView.from_row(r, deliveries=deliveries.get(r["id"], [])) for r in rows]

    async def last_event_id(self, tenant_id: str) -> int:
        """The newest journal seq of this tenant: a list read after it misses no event the stream sends."""
        return await self.store.inbox.journal_head(tenant_id)

    async def _signin(self, token: str) -> dict:
        if not token or len(token) > 128:
            raise NotFoundError("no such sign-in link")
        row = await self.store.inbox.signin_by_hash(_digest(token))
        if row is None or self.settings.tenant(row["tenant_id"]) is None:
            raise NotFoundError("no such sign-in link")
        if row["used_at"] is not None:
            raise LinkUsedError("this sign-in link was used already")
        if row["expires_at"] <= self.clock():
            raise ExpiredError("this sign-in link expired")
        return row
