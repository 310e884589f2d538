"""The connector interface every channel implements, and discovery through entry points.

A connector delivers requests to humans somewhere (a chat, a webhook, the hosted
form) and submits their correlated answers through the lifecycle service. It is
found by the entry-point group ``handraise.connectors`` and enabled by its
config section, so a connector's optional dependency is imported only when that
connector is enabled.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from aiohttp import ClientSession, web
from pydantic import BaseModel, ValidationError

from handraise.core import wording
from handraise.core.api import RequestView
from handraise.core.config import Settings
from handraise.core.errors import (
    AlreadyAnsweredError,
    ConfigError,
    ConflictError,
    ExpiredError,
    FourEyesError,
    InvalidAnswerError,
    NotAssignedError,
    NotFoundError,
    RequestCancelledError,
)

if TYPE_CHECKING:
    from handraise.core.annotations import AnnotationService
    from handraise.core.service import RequestService

ENTRY_POINT_GROUP = "handraise.connectors"
T = TypeVar("T")

# Rating buttons: the values 1..5 behind their tokens, and durable state (person -> their newest
# rating's annotation id; request -> the buttons' tokens).
RATINGS = range(1, 6)
RATING_STATE = "ratings"
RATING_TOKENS = "ratings.tokens"
# How long Connector.stop waits for its cancelled tasks before cancelling them again.
STOP_RECANCEL_SECONDS = 5.0


@dataclass(frozen=True)
class AnswerOutcome:
    """What became of a human's answer from chat, with a short text to show them.

    ``code`` is one of: ``accepted``, ``not_authorized``, ``not_found``, ``already_answered``,
    ``expired``, ``cancelled``, ``invalid`` (``message`` then says what is wrong, field by field),
    the chat refusals of ``core.chat`` (``not_a_decision``, ``sensitive_removed`` ...), ``link``
    (``url`` is a personal form link), and for a rating tap also ``unavailable``. ``message`` is
    the wording owner's sentence for it (``core.wording``).
    """

    code: str
    message: str
    view: RequestView | None = None
    url: str | None = None
    # For ``invalid``: core's per-field problems (``{"field", "message"}``), for a form that marks fields.
    problems: tuple[dict[str, Any], ...] = ()

    @property
    def accepted(self) -> bool:
        return self.code == "accepted"


def _said(code: str, view: RequestView | None = None) -> AnswerOutcome:
    return AnswerOutcome(code, wording.text(code), view)


class Backoff:
    """Capped, jittered exponential delays: the one retry and reconnect policy (connectors and dispatcher)."""

    def __init__(self, *, initial: float, cap: float) -> None:
        self.initial = initial
        self.cap = cap
        self._delay = initial

    def next(self) -> float:
        """The next pause: between half and all of the current delay, which then doubles up to the cap."""
        pause = self._delay * (0.5 + random.random() / 2)
        self._delay = min(self._delay * 2, self.cap)
        return pause

    def reset(self) -> None:
        self._delay = self.initial


class Connector(ABC):
    """One channel. Subclasses set ``name`` and ``settings_model`` and implement deliver/withdraw."""

    name: ClassVar[str]
    settings_model: ClassVar[type[BaseModel] | None] = None
    # Routes mount under /bots/{name}/ unless a connector serves its own absolute paths.
    mount_prefix: ClassVar[str | None] = None
    # Reconnect backoff (capped, jittered), shared by every loop a connector runs.
    backoff_initial: ClassVar[float] = 0.5
    backoff_cap: ClassVar[float] = 30.0

    def __init__(self, *, settings: Any, service: RequestService, http: ClientSession,
                 log: logging.Logger, app_settings: Settings, annotations: AnnotationService | None = None) -> None:
        self.settings = settings
        self.service = service
        self.http = http
        self.log = log
        self.app_settings = app_settings
        # The run-annotation side-store, for rating buttons on resolved requests (None: no ratings).
        self.annotations = annotations
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- enabling --------------------------------------------------------------

    @classmethod
    def section(cls, app_settings: Settings) -> Any:
        return app_settings.connector_section(cls.name)

    @classmethod
    def is_enabled(cls, app_settings: Settings) -> bool:
        """Enabled when its config section is present (and not ``enabled = false``)."""
        section = cls.section(app_settings)
        if section is None:
            return False
        if isinstance(section, dict) and section.get("enabled") is False:
            return False
        return True

    @classmethod
    def load_settings(cls, app_settings: Settings) -> Any:
        if cls.settings_model is None:
            return None
        raw = cls.section(app_settings)
        raw = {k: v for k, v in raw.items() if k != "enabled"} if isinstance(raw, dict) else (raw or {})
        try:
            return cls.settings_model.model_validate(raw)
        except ValidationError as e:
            raise app_settings.config_error(e, section=(cls.name,)) from None

    @classmethod
    async def check(cls, settings: Any, *, app_settings: Settings, http: ClientSession) -> list[str] | None:
        """``handraise doctor``: try the credentials live, change nothing; each problem is one line with its fix.

        None means this connector has nothing to try (the default); ``[]`` means every check passed.
        """
        return None

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Connect; long-running loops are started with ``spawn``."""

    async def stop(self) -> None:
        tasks = list(self._tasks)
        running = tasks
        while running:
            for task in running:
                task.cancel()
            # Cancelled again until done: a library (or Python 3.11's asyncio.wait_for) may swallow one
            # cancellation, and a loop that carries on after it would hold stop() forever (a Matrix
            # sync loop waited for the batch lock that stop() holds). Not sooner than a few seconds:
            # a task's own cleanup (a finally that stops polling, releases a lock) gets to finish.
            await asyncio.wait(running, timeout=STOP_RECANCEL_SECONDS)
            running = [t for t in running if not t.done()]
        for task in tasks:
            if not task.cancelled():
                task.exception()  # retrieved: a loop's last failure was logged where it happened
        self._tasks.clear()

    async def retry(self, step: Callable[[], Awaitable[T]], *, what: str) -> T:
        """Call ``step`` until it succeeds, with the same capped, jittered backoff; return its result."""
        backoff = Backoff(initial=self.backoff_initial, cap=self.backoff_cap)
        while True:
            try:
                return await step()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                pause = backoff.next()
                self.log.warning("%s failed (%s); retrying in %.1fs", what, type(e).__name__, pause)
            await asyncio.sleep(pause)

    def spawn(self, coro: Awaitable[Any], *, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.name}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def run_forever(self, step: Callable[[], Awaitable[None]], *, what: str) -> None:
        """Run ``step`` again whenever it returns or fails, after a capped, jittered backoff."""
        backoff = Backoff(initial=self.backoff_initial, cap=self.backoff_cap)
        while True:
            try:
                await step()
                backoff.reset()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.log.warning("%s failed (%s)", what, type(e).__name__)
            await asyncio.sleep(backoff.next())

    # -- routing ---------------------------------------------------------------

    def serves(self, tenant_id: str) -> bool:
        return bool(self.targets(tenant_id))

    @abstractmethod
    def targets(self, tenant_id: str) -> list[str]:
        """Where this connector posts a tenant's requests (chat ids, room ids, URLs)."""

    def targets_for(self, request: RequestView) -> list[str]:
        """Where this connector posts ``request``: its tenant's places, and where a connector reaches
        the people a request is assigned to directly (a DM), those too (``ChatConnector``)."""
        return self.targets(request.tenant_id)

    def may_answer(self, tenant_id: str, user_id: str) -> bool:
        """Whether a messenger user may answer this tenant's requests (the allowlist)."""
        return False

    def principal(self, user_id: str) -> str:
        """Who acted, as journaled: ``telegram:<user id>``, ``slack:<team>/<user>`` ..."""
        return f"{self.name}:{user_id}"

    # -- inbound answers -------------------------------------------------------

    async def submit_answer(self, *, tenant_id: str, request_id: str, user_id: str,
                            response: Any, principal: str | None = None) -> AnswerOutcome:
        """Check the allowlist, then submit through core (validation, one winner, journal).

        Every inbound answer of every chat connector goes through here, so a stranger is
        refused the same way everywhere and nothing about the request changes for them.
        """
        principal = principal or self.principal(user_id)
        if not self.may_answer(tenant_id, user_id):
            self.log.info("answer refused: not on the allowlist",
                          extra={"request_id": request_id, "channel": self.name})
            # Audited, never applied: the request itself does not change.
            await self.service.journal(tenant_id=tenant_id, event="answer_refused", request_id=request_id,
                                       principal=principal, channel=self.name,
                                       data={"reason": "not_authorized"})
            return _said("not_authorized")
        try:
            view = await self.service.submit(tenant_id=tenant_id, request_id=request_id, response=response,
                                             principal=principal, channel=self.name)
        except InvalidAnswerError as e:
            return AnswerOutcome("invalid", invalid_answer_text(e), problems=tuple(e.fields))
        except NotAssignedError:
            return _said("not_authorized")  # assigned to other people: refused as a stranger is
        except FourEyesError:
            return _said("four_eyes")
        except AlreadyAnsweredError:
            return _said("already_answered")
        except ExpiredError:
            return _said("expired")
        except RequestCancelledError:
            return _said("cancelled")
        except NotFoundError:
            return _said("not_found")
        return _said("accepted", view)

    # -- rating buttons (RFC 0056 annotations from chat) -----------------------

    def offers_ratings(self, view: RequestView) -> bool:
        """Whether the withdrawn message of ``view`` carries rating buttons: the connector's
        ``rating_buttons`` setting, feedback enabled, and an answered request that names its run."""
        return (bool(getattr(self.settings, "rating_buttons", False)) and self.annotations is not None
                and self.annotations.enabled and view.status == "answered" and view.run_id is not None)

    async def rating_tokens(self, view: RequestView) -> list[str]:
        """Button tokens for ratings 1..5 of the request's run, the same for every withdraw of it:
        a repeated withdraw then edits nothing (Telegram answers "not modified")."""
        key = f"{self.name}:{view.id}"
        kept = await self.service.get_state(RATING_TOKENS, key)
        if kept is not None:
            return json.loads(kept)
        tokens = await self.service.create_chat_actions(tenant_id=view.tenant_id, request_id=view.id,
                                                        channel=self.name, values=[{"rate": n} for n in RATINGS])
        await self.service.set_state(RATING_TOKENS, key, json.dumps(tokens), request_id=view.id)
        return tokens

    async def rate(self, *, tenant_id: str, request_id: str, user_id: str, principal: str,
                   rating: int) -> AnswerOutcome:
        """Record a rating tap as an annotation of the request's run; ``accepted`` when recorded.

        Only people on the allowlist may rate. Each person's newest rating from one request's
        message supersedes their previous one (RFC 0056: annotations are append-only).
        """
        if not self.may_answer(tenant_id, user_id):
            self.log.info("rating refused: not on the allowlist",
                          extra={"request_id": request_id, "channel": self.name})
            await self.service.journal(tenant_id=tenant_id, event="rating_refused", request_id=request_id,
                                       principal=principal, channel=self.name, data={"reason": "not_authorized"})
            return AnswerOutcome("not_authorized", wording.text("rating_not_authorized"))
        if self.annotations is None or not self.annotations.enabled:
            return AnswerOutcome("unavailable", wording.text("ratings_off"))
        try:
            view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        except NotFoundError:
            return _said("not_found")
        if view.run_id is None:
            return AnswerOutcome("unavailable", wording.text("no_run"))
        key = f"{self.name}:{request_id}:{principal.partition(':')[2]}"
        previous = await self.service.get_state(RATING_STATE, key)
        for _ in range(3):
            body: dict[str, Any] = {"signal": {"kind": "rating", "rating": rating}}
            if previous is not None:
                body["supersedes"] = previous
            try:
                annotation = await self.annotations.record(tenant_id=tenant_id, run_id=view.run_id,
                                                           principal=principal, body=body, channel=self.name)
            except ConflictError:
                # A simultaneous tap (here or on another instance) superseded it first: follow the chain.
                assert previous is not None
                previous = await self._newest_of_chain(tenant_id, view.run_id, previous)
                continue
            await self.service.set_state(RATING_STATE, key, annotation["annotationId"], request_id=request_id)
            return AnswerOutcome("accepted", wording.rated(rating, replaced=previous is not None), view)
        return AnswerOutcome("unavailable", wording.text("rating_lost"))

    async def _newest_of_chain(self, tenant_id: str, run_id: str, annotation_id: str) -> str:
        assert self.annotations is not None
        successor = {a["supersedes"]: a["annotationId"]
                     for a in await self.annotations.all_for_run(tenant_id=tenant_id, run_id=run_id)
                     if "supersedes" in a}
        while annotation_id in successor:
            annotation_id = successor[annotation_id]
        return annotation_id

    @staticmethod
    def terminal_outcome(view: RequestView) -> AnswerOutcome | None:
        """The refusal for an answer to a request that is no longer pending, or None while it is."""
        code = {"answered": "already_answered", "expired": "expired", "cancelled": "cancelled"}.get(view.status)
        return None if code is None else _said(code, view)

    # -- delivery --------------------------------------------------------------

    @abstractmethod
    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        """Post the question; return what identifies the posted message (kept for withdraw).

        Raise ``ConnectorError`` (with ``retry_after`` or ``permanent``) on failure.
        """

    @abstractmethod
    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        """The request is terminal: show its outcome where it was posted and remove its buttons.

        Must be idempotent: a retry after a lost reply edits again. Instances never both call it for one
        delivery (the dispatcher claims it first: ``Store.claim_withdrawal``).
        """

    async def remind(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> dict[str, Any] | None:
        """Ping a still-pending request once more (``remind_after_seconds``); default: post it again.

        Return the ref of anything posted that must be withdrawn too (the dispatcher keeps it
        beside the original's and calls ``withdraw`` for both), or None.
        """
        return await self.deliver(request, target=target)

    def remind_after(self) -> float | None:
        value = getattr(self.settings, "remind_after_seconds", None)
        return float(value) if value else None

    def routes(self) -> list[web.AbstractRouteDef]:
        return []


def discover() -> dict[str, EntryPoint]:
    """The connectors' entry points by name; ``ep.load()`` imports a class only when it is wanted."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_enabled(app_settings: Settings) -> list[type[Connector]]:
    """The classes of the enabled connectors; an enabled one that cannot be imported is a ConfigError."""
    classes: list[type[Connector]] = []
    for name, ep in sorted(discover().items()):
        section = app_settings.connector_section(name)
        if name != "web" and section is None:
            continue
        try:
            cls = ep.load()
        except ImportError as e:
            raise ConfigError(
                f"{name}: connector is configured but cannot be imported ({e}); install handraise[{name}]"
            ) from None
        if name == "web" or cls.is_enabled(app_settings):
            classes.append(cls)
    return classes


def rating_value(value: Any) -> int | None:
    """The rating a chat button token stands for (``{"rate": n}``), or None for any other button.

    No answer button has this shape (answers are bare values or ``{"decision": …}``/``{"answer": …}``),
    so a rating tap can never submit an answer, nor an answer tap record a rating.
    """
    if isinstance(value, dict) and set(value) == {"rate"}:
        n = value["rate"]
        if isinstance(n, int) and not isinstance(n, bool) and n in RATINGS:
            return n
    return None


def outcome_text(view: RequestView, *, who: str | None = None) -> str:
    """One line on how a terminal request ended ("Approved by Alice via Telegram"); ``core.wording``
    owns it. A sensitive answer is never shown."""
    return wording.headline(view, who=who)


def invalid_answer_text(error: InvalidAnswerError) -> str:
    """An invalid answer explained to the human, one line per field; never quotes the value."""
    return wording.invalid_answer(error.fields, error.message)
