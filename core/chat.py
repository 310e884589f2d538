"""The one path of a chat answer, for every chat connector: who, which request, what they said, what became of it.

A bot turns its messenger's event into a :class:`Sender` and text (or a button's value) and calls
:meth:`ChatConnector.answer_from_chat`; it supplies only what its messenger does differently
(removing a message, sending a person a private link) and renders the :class:`AnswerOutcome`.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from handraise.core import wording
from handraise.core.api import RequestView
from handraise.core.config import Settings
from handraise.core.connectors import Connector
from handraise.core.errors import AlreadyAnsweredError, ConfigError, GoneError, NotFoundError
from handraise.core.outcomes import AnswerOutcome, said, terminal_outcome
from handraise.core.people import GROUP_PREFIX, expand, is_reference, person_of
from handraise.core.ratings import RatingButtons
from handraise.core.redaction import is_secret_shaped
from handraise.core.schema import coerce_text, parse_field_lines, validate_answer
from handraise.core.schema.chat import parse_decision

# Durable state: principal -> the display name their messenger last gave, for "Approved by …".
NAMES = "chat.names"
# Durable state: "<channel>:<request>:<principal>" -> "1" once a stranger was told, so they are told once.
TOLD = "chat.told"
_MISSING: Any = object()


@dataclass(frozen=True)
class Sender:
    """Who acted in a chat: the messenger's own id (for the allowlist), the principal core records,
    and a name to show people ("Alice (@alice)")."""

    user_id: str
    principal: str
    display: str


class TenantRoute(BaseModel):
    """One tenant's part of a connector's routing: where its requests go and who answers them.
    Subclasses name the fields; ``places`` and ``people`` read them.

    ``people`` may name the tenant's people (``alice``) and groups (``group:oncall``) besides raw
    ids (those matching ``raw_id``); :meth:`RoutedSettings.check_tenants` turns them into this
    channel's ids once, at load, and ``allowed`` answers from that.
    """

    model_config = ConfigDict(extra="forbid")

    # A raw id of this channel as ``people`` lists it; anything else is a person or group reference.
    raw_id: ClassVar[re.Pattern[str]] = re.compile(r".+")
    _resolved: tuple[str, ...] | None = PrivateAttr(default=None)

    def places(self) -> list[str]:
        raise NotImplementedError

    def people(self) -> list[str]:
        raise NotImplementedError

    def resolved_people(self) -> list[str]:
        """This channel's ids of the people who may answer, in order: raw ids as given, references
        resolved (a person named twice, directly and through a group, once)."""
        return list(self._resolved if self._resolved is not None else dict.fromkeys(self.people()))

    def allowed(self) -> frozenset[str]:
        return frozenset(self.resolved_people())

    def resolve_people(self, app_settings: Settings, *, tenant_id: str, channel: str) -> str | None:
        """Resolve the references in ``people`` to this channel's ids; the problem in words, or None."""
        allowed: list[str] = []
        for entry in self.people():
            if self.raw_id.fullmatch(entry) or not is_reference(entry):
                allowed.append(entry)
                continue
            found = expand(app_settings, tenant_id, [entry])
            if found.unknown:
                what = "no person of this tenant is in that group" if entry.startswith(GROUP_PREFIX) \
                    else "not a person of this tenant"
                return f"{entry}: {what} ([[tenants.people]] of {tenant_id})"
            tenant = app_settings.tenant(tenant_id)
            assert tenant is not None
            ids = [i for i in (tenant.person(p).identity(channel) for p in found.people  # type: ignore[union-attr]
                               ) if i is not None]
            if not ids:
                return f"{entry}: nobody it names has a {channel} identity in [[tenants.people]]"
            allowed.extend(ids)
        self._resolved = tuple(dict.fromkeys(allowed))
        return None


class RoutedSettings(BaseModel):
    """The routing part of a chat connector's section: ``tenants`` of :class:`TenantRoute`.

    Checked once here: no chat, room or channel serves two tenants (its members would read
    another tenant's questions, DESIGN invariant 7); ``check_tenants`` checks every tenant exists.
    """

    model_config = ConfigDict(extra="forbid")

    tenants: dict[str, Any] = Field(default_factory=dict)
    # What a place is called in messages about this section ("chat", "room", "channel").
    place_word: ClassVar[str] = "place"

    @model_validator(mode="after")
    def _one_tenant_per_place(self) -> RoutedSettings:
        owner: dict[str, str] = {}
        for tenant_id, route in self.tenants.items():
            for place in route.places():
                if place in owner and owner[place] != tenant_id:
                    raise ValueError(f"{self.place_word} {place} is configured for tenants {owner[place]} "
                                     f"and {tenant_id}: each {self.place_word} serves one tenant")
                owner[place] = tenant_id
        return self

    def check_tenants(self, app_settings: Settings, *, section: str) -> None:
        """Every tenant exists, and the people and groups each names are its own (resolved here)."""
        for tenant_id, route in self.tenants.items():
            if app_settings.tenant(tenant_id) is None:
                raise ConfigError(f"{section}.tenants.{tenant_id}: no tenant with this id in [[tenants]]")
            problem = route.resolve_people(app_settings, tenant_id=tenant_id, channel=section)
            if problem is not None:
                raise ConfigError(f"{section}.tenants.{tenant_id}: {problem}")
        try:
            # Places that name people became addresses just now: one tenant per place, again.
            self._one_tenant_per_place()
        except ValueError as e:
            raise ConfigError(f"{section}.tenants: {e}") from None

    def tenant_of(self, place: str) -> str | None:
        return next((t for t, route in self.tenants.items() if place in route.places()), None)


RoutedT = TypeVar("RoutedT", bound=RoutedSettings)


class ChatConnector(Connector[RoutedT]):
    """A connector whose people answer in a chat. Routing comes from its :class:`RoutedSettings`;
    inbound answers go through :meth:`answer_from_chat`, personal form links through
    :meth:`personal_link`, outcome words through :meth:`outcome_of`, rating taps through
    ``ratings`` (:class:`~handraise.core.ratings.RatingButtons`)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ratings = RatingButtons(channel=self.name, enabled=bool(getattr(self.settings, "rating_buttons", False)),
                                     service=self.service, state=self.state, chat_refs=self.chat_refs,
                                     annotations=self.annotations, may_rate=self.may_answer, log=self.log)

    @classmethod
    def load_settings(cls, app_settings: Settings) -> Any:
        settings: RoutedSettings = super().load_settings(app_settings)
        settings.check_tenants(app_settings, section=cls.name)
        return settings

    # -- routing -----------------------------------------------------------------

    def targets(self, tenant_id: str) -> list[str]:
        route = self.settings.tenants.get(tenant_id)
        return route.places() if route is not None else []

    def may_answer(self, tenant_id: str, user_id: str) -> bool:
        route = self.settings.tenants.get(tenant_id)
        return route is not None and user_id in route.allowed()

    def serves(self, tenant_id: str) -> bool:
        """A tenant's places, or, where assigned requests reach people directly, one of its people here: a
        tenant served only in people's DMs (``assigned_delivery = "direct"``, no place) is served too."""
        if self.targets(tenant_id):
            return True
        if getattr(self.settings, "assigned_delivery", "room") == "room":
            return False
        route = self.settings.tenants.get(tenant_id)
        tenant = self.app_settings.tenant(tenant_id)
        if route is None or tenant is None:
            return False
        allowed = route.allowed()
        return any(identity in allowed and self.direct_target(identity) is not None
                   for identity in (person.identity(self.name) for person in tenant.people) if identity is not None)

    def targets_for(self, request: RequestView) -> list[str]:
        """The tenant's places and the people this channel reaches directly (``direct_target``): those an
        assigned request names, and those of the escalation steps it reached (core/escalation.py), as
        ``assigned_delivery`` says: ``room_and_direct`` (default where a connector has the setting),
        ``direct`` (an assigned request's room only when nobody of it is reachable), ``room``."""
        places = self.targets(request.tenant_id)
        mode = getattr(self.settings, "assigned_delivery", "room")
        people = self.people_reached(request)
        if not people or mode == "room":
            return places
        direct = self._direct(request.tenant_id, people)
        if mode == "direct" and direct and request.assign_to is not None:
            return direct
        return places + [t for t in direct if t not in places]

    def fallback_targets(self, request: RequestView) -> list[str]:
        """``direct``: an assigned request posted only in its people's DMs goes to the tenant's places when
        not one of those DMs could be posted (blocked bot, unknown user), so that somebody sees it."""
        if getattr(self.settings, "assigned_delivery", "room") != "direct" or request.assign_to is None:
            return []
        chosen = self.targets_for(request)
        return [place for place in self.targets(request.tenant_id) if place not in chosen]

    def people_reached(self, request: RequestView) -> list[str]:
        """The people a request is meant to reach directly: its assignment (grown by any escalation step
        reached), or for an unassigned one the people of the steps it reached."""
        refs = request.assign_to if request.assign_to is not None else (
            request.schedule.reached_refs() if request.schedule is not None else [])
        return list(expand(self.app_settings, request.tenant_id, refs).people) if refs else []

    def _direct(self, tenant_id: str, person_ids: tuple[str, ...] | list[str]) -> list[str]:
        route = self.settings.tenants.get(tenant_id)
        allowed = route.allowed() if route is not None else frozenset()
        tenant = self.app_settings.tenant(tenant_id)
        direct: list[str] = []
        for person_id in person_ids:
            person = tenant.person(person_id) if tenant is not None else None
            identity = person.identity(self.name) if person is not None else None
            # Only people this channel lets answer: a DM to anyone else would invite a refused tap.
            target = self.direct_target(identity) if identity is not None and identity in allowed else None
            if target is not None and target not in direct:
                direct.append(target)
        return direct

    def direct_target(self, user_id: str) -> str | None:
        """Where a message reaches this person alone (their DM), or None where the messenger has no such
        place for a bot (the default)."""
        return None

    def timezone(self, tenant_id: str) -> dt.tzinfo:
        tenant = self.app_settings.tenant(tenant_id)
        return wording.zone(tenant.timezone if tenant is not None else None)

    # -- what a bot supplies -----------------------------------------------------

    async def remove_message(self, message: Any) -> bool:
        """Delete (or redact) a person's message; False where the messenger does not let the bot."""
        return False

    # -- the one path of an answer -------------------------------------------------

    async def answer_from_chat(self, *, tenant_id: str, request_id: str, sender: Sender, text: str | None = None,
                               value: Any = _MISSING, message: Any = None, decides_approvals: bool = True
                               ) -> AnswerOutcome:
        """allowlist -> terminal -> sensitive refusal -> secret-shaped refusal -> parse -> journal -> submit.

        ``text`` is a typed reply (``message`` is the bot's handle on it, for removal); ``value`` a
        button's typed value. A reply that must not stay in the chat (to a form-only request, or
        secret-shaped) is removed whoever sent it, before anything else is decided: a stranger's
        secret in a shared room leaks as much as anyone's. ``decides_approvals=False``: typed text
        never approves or rejects here (the messenger has buttons with a confirm for that).
        """
        try:
            view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        except NotFoundError:
            return said("not_found")
        typed = value is _MISSING
        removed: bool | None = None
        kept_out = typed and text is not None and must_not_stay(view, text)
        if kept_out:
            removed = await self.remove_message(message)
        if not typed or text is None:
            refused = await self.gate(view, sender, removed=removed)
            if refused is not None:
                return refused
            return await self._submit(view, sender, value) if not typed else said("text_only", view)
        refused = await self.gate(view, sender, removed=removed, form_only_too=False)
        if refused is not None:
            return refused
        if wording.form_only(view):
            await self._journal(view, sender, "chat_reply_refused", reason="sensitive", removed=removed)
            return said("sensitive_removed" if removed else "sensitive_kept", view)
        if kept_out:
            await self._journal(view, sender, "chat_reply_refused", reason="secret_shaped", removed=removed)
            return said("secret_removed" if removed else "secret_kept", view)
        if view.kind == "approval" and not decides_approvals:
            return said("use_buttons", view)
        answer, problems = read_reply(view, text)
        if problems is not None:
            await self._journal(view, sender, "invalid_attempt", errors=problems)
            if view.kind == "approval":
                return said("not_a_decision", view)
            return AnswerOutcome("invalid", wording.invalid_answer(problems), view)
        return await self._submit(view, sender, answer)

    async def gate(self, view: RequestView, sender: Sender, *, removed: bool | None = None,
                   form_only_too: bool = True) -> AnswerOutcome | None:
        """The refusal before anything is read (not on the allowlist, no longer pending, and with
        ``form_only_too`` answered only in the form), or None: they may go on (a button, a modal)."""
        if not self.may_answer(view.tenant_id, sender.user_id):
            await self._journal(view, sender, "answer_refused", reason="not_authorized", removed=removed)
            self.log.info("answer refused: not on the allowlist", extra={"request_id": view.id, "channel": self.name})
            return said("not_authorized", view)
        if not self.service.may_answer(view, sender.principal):
            # Assigned to other people: refused as a stranger is, before any form or modal opens.
            await self._journal(view, sender, "answer_refused", reason="not_assigned", removed=removed)
            self.log.info("answer refused: not assigned", extra={"request_id": view.id, "channel": self.name})
            return said("not_authorized", view)
        terminal = terminal_outcome(view)
        if terminal is not None:
            return terminal
        if form_only_too and wording.form_only(view):
            return said("use_the_form", view)  # never a tap or a modal for what only the form may take
        return None

    async def submit_value(self, view: RequestView, sender: Sender, answer: Any) -> AnswerOutcome:
        """Submit an answer read from the messenger's own widgets (a modal), after ``gate``."""
        return await self._submit(view, sender, answer)

    async def _submit(self, view: RequestView, sender: Sender, answer: Any) -> AnswerOutcome:
        await self.remember_sender(sender)
        outcome = await self.submit_answer(tenant_id=view.tenant_id, request_id=view.id, user_id=sender.user_id,
                                           response=answer, principal=sender.principal)
        # Every outcome names its request (a refusal as it stood before the answer), for the bot's reply.
        return outcome if outcome.view is not None else replace(outcome, view=view)

    async def _journal(self, view: RequestView, sender: Sender, event: str, **data: Any) -> None:
        await self.service.journal(tenant_id=view.tenant_id, event=event, request_id=view.id, run_id=view.run_id,
                                   principal=sender.principal, channel=self.name,
                                   data={k: v for k, v in data.items() if v is not None})

    # -- personal links ------------------------------------------------------------

    def recipient_of(self, sender: Sender) -> str:
        """How a personal link names the person it was minted for (shown on the form, journaled). One label
        per person wherever they asked on this channel: reuse matches on it, so two would be two links."""
        return sender.principal

    def recipient_known_as(self, sender: Sender) -> tuple[str, ...]:
        """Labels older releases gave the same person's links here: a live one is still handed back."""
        return ()

    async def personal_link(self, *, tenant_id: str, request_id: str, sender: Sender,
                            kept: str | None = None) -> AnswerOutcome:
        """A one-time form link for this person only (``link``, with ``url`` and ``link_id``), or why not.

        The link carries the person: the hosted form records the answer as theirs, through this
        channel. Only people on the allowlist get one, so sharing the chat's message shares nothing.
        Asked again (a second tap, wherever they tap), it is the live link this person was given here
        before, if unused (``recipient_of`` labels it).
        ``kept``: the id of the link a message already carries, rendered again while its request is
        pending (a quorum tally edit): the same link, neither minted nor journaled again.
        """
        if kept is not None:
            return AnswerOutcome("link", wording.text("link"), url=self.service.link_url(kept), link_id=kept)
        try:
            view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        except NotFoundError:
            return said("not_found")
        allowed = self.may_answer(tenant_id, sender.user_id)
        if not allowed or not self.service.may_answer(view, sender.principal):
            # Nobody gets a link they could not answer with: not on the allowlist, or assigned to others.
            reason = "not_authorized" if not allowed else "not_assigned"
            await self._journal(view, sender, "answer_refused", reason=reason, what="form link")
            return said("not_authorized", view)
        try:
            minted = await self.service.mint_link(tenant_id=tenant_id, request_id=request_id,
                                                  principal=f"{self.name}:bot", recipient=self.recipient_of(sender),
                                                  for_principal=sender.principal, reuse=True,
                                                  known_as=self.recipient_known_as(sender))
        except NotFoundError:
            return said("not_found")
        except (GoneError, AlreadyAnsweredError):  # answered is a 409 to an agent, not a GoneError
            view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
            return terminal_outcome(view) or said("not_found")
        await self.remember_sender(sender)
        return AnswerOutcome("link", wording.text("link"), url=minted.url, link_id=minted.link_id)

    # -- people and outcomes ---------------------------------------------------------

    async def remember_sender(self, sender: Sender) -> None:
        """Keep the person's display name before their answer: the withdrawn message ("Approved by …")
        may be written before the submit call returns."""
        if not sender.display:
            return
        key, display = sender.principal[:200], sender.display[:200]
        # The first write is atomic (two taps at once both land here); a changed name is an update.
        if await self.state.set_if_absent(NAMES, key, display) != display:
            await self.state.set(NAMES, key, display)

    async def display_of(self, principal: str | None, *, tenant_id: str | None = None) -> str | None:
        """The name people read for ``principal``: one of ``tenant_id``'s people by their configured
        name (whatever channel they used), else as their messenger last showed them."""
        if not principal:
            return None
        person = person_of(self.app_settings, tenant_id, principal) if tenant_id is not None else None
        if person is not None:
            return person.display
        return await self.state.get(NAMES, principal[:200])

    async def outcome_of(self, view: RequestView) -> wording.Outcome:
        """How ``view`` ended, with the person's display name."""
        who = await self.display_of(view.resolved_by, tenant_id=view.tenant_id)
        return wording.outcome(view, who=who)

    async def first_time_told(self, view: RequestView, sender: Sender) -> bool:
        """True the first time this person is told something about this request (strangers are told once)."""
        key = f"{self.name}:{view.id}:{sender.principal}"[:200]
        mark = secrets.token_hex(8)
        return await self.state.set_if_absent(TOLD, key, mark, request_id=view.id) == mark


def must_not_stay(view: RequestView, text: str) -> bool:
    """A typed reply that must leave the chat whoever sent it, as far as the messenger lets the bot:
    one to a request answered only in the form, or one shaped like a secret (DESIGN invariants 5, 9)."""
    return wording.form_only(view) or is_secret_shaped(text)


def read_reply(view: RequestView, text: str) -> tuple[Any, list[dict[str, str]] | None]:
    """A chat reply as the typed answer, or the problems reading it (None when it reads).

    An approval must be a decision on its own ("approve", "reject: too risky"); a form's lines
    must each name a field. What reads is validated by core's submit, like every answer.
    """
    schema = view.schema
    if view.kind == "approval":
        found = parse_decision(text)
        if found is None:
            value = coerce_text(schema, text)  # "decision: reject" lines
            if isinstance(value, dict):
                return value, None
            return None, [{"field": "decision", "message": "reply approve or reject"}]
        decision, reason = found
        return ({"decision": decision, "reason": reason} if reason else {"decision": decision}), None
    if isinstance(schema, dict) and schema.get("type") == "object":
        value, line_errors = parse_field_lines(schema, text)
        if not line_errors:
            return value, None
        problems = [e.to_json() for e in line_errors]
        seen = {p["field"] for p in problems}
        problems += [e.to_json() for e in validate_answer(schema, value) if e.field not in seen]
        return value, problems
    return coerce_text(schema, text), None
