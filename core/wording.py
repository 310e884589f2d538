"""Every text a person reads about a request, in one place: outcomes, refusals, deadlines, hints.

Keyed by outcome code, plain text; each bot adds only its markup (HTML, mrkdwn) and the emoji of ``ICONS``.
"""

from __future__ import annotations

import datetime as dt
import math
import zoneinfo
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from handraise.core.schema.fields import FieldSpec, describe_field, fields

if TYPE_CHECKING:
    from handraise.core.api import RequestView

# What became of an answer (AnswerOutcome.code) and of a request, in words.
TEXTS: dict[str, str] = {
    "accepted": "Thanks, your answer was recorded.",
    "not_authorized": "You are not authorized to answer this.",
    "already_voted": "You voted already: your first vote counts, once; votes cannot be changed. Nothing was changed.",
    "voted": "Thanks, your vote was counted.",
    "four_eyes": "This was asked on your behalf, so someone else must approve it (you may still reject it). "
                 "Nothing was changed.",
    "not_found": "This question is no longer known.",
    "already_answered": "This was already answered.",
    "expired": "This question expired.",
    "cancelled": "This question was cancelled.",
    "button_invalid": "This button is no longer valid.",
    "text_only": "Please answer with a text reply.",
    "not_a_decision": ("Reply approve or reject (a reason may follow after a colon, e.g. “reject: too risky”). "
                       "Nothing was changed."),
    "use_buttons": "Use the Approve or Reject buttons on the question (“Answer here” adds a reason). "
                   "Nothing was changed.",
    "use_the_form": "This question is answered only in its form: use “Open form” on the question. "
                    "Nothing was changed.",
    "sensitive_removed": "Your reply was deleted: this answer is private and is only taken in the form.",
    "sensitive_kept": "This answer is private and is only taken in the form: please delete your reply.",
    "secret_removed": ("That reply looked like a secret (a key or token), so it was not taken and was deleted. "
                       "Secrets belong in the form, not in chat."),
    "secret_kept": ("That reply looked like a secret (a key or token), so it was not taken; please delete it. "
                    "Secrets belong in the form, not in chat."),
    "link": "Your own one-time link to the form: it works once, only for you, and only until the question "
            "is resolved.",
    "signin_note": "Your own sign-in link to the Handraise inbox: it works once, only for you, for a short while. "
                   "If you did not ask for it, ignore it.",
    "signin_button": "Sign in to the inbox",
    "signin_title": "Your sign-in link to the Handraise inbox",
    "link_title": "Your own link to answer a question",
    "link_button": "Open form",
    "person_required": "Only someone this team lists by name may approve this, and this account is not one of "
                       "them. Nothing was changed.",
    "link_failed": "The form link could not be sent to you privately; open a private chat with the bot and "
                   "try again.",
    "rating_not_authorized": "You are not authorized to rate this run.",
    "ratings_off": "Ratings are turned off.",
    "no_run": "This request belongs to no run, so there is nothing to rate.",
    "rating_lost": "Your rating was not recorded; please tap again.",
    "sensitive_question": "🔒 A private answer is needed. For your safety the question is shown only in the form.",
    "reminder": "Reminder: this question still needs an answer.",
    "rate_prompt": "Rate this run (1 = poor, 5 = great):",
    "invalid": "That answer is not valid.",
}

# The emoji each outcome carries on every messenger.
ICONS: dict[str, str] = {"approved": "✅", "rejected": "❌", "answered": "✅", "expired": "⌛", "cancelled": "🚫",
                         "pending": "⏳", "reminder": "⏰", "sensitive": "🔒"}

CHANNEL_NAMES = {"web": "the web form", "api": "the API", "telegram": "Telegram", "matrix": "Matrix",
                 "slack": "Slack", "webhooks": "a webhook", "email": "email", "inbox": "the inbox"}

def text(code: str) -> str:
    """The plain sentence for an outcome or refusal code."""
    return TEXTS[code]


def rated(rating: int, *, replaced: bool) -> str:
    return f"Thanks, rated {rating}/5." + (" It replaces your earlier rating." if replaced else "")


# --------------------------------------------------------------------------- times


def zone(name: str | None) -> dt.tzinfo:
    """A tenant's configured zone (checked at config load); UTC when unknown."""
    try:
        return zoneinfo.ZoneInfo(name or "UTC")
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return dt.UTC


def when(ts: float | None, tz: dt.tzinfo = dt.UTC) -> str:
    """A moment in the tenant's zone: ``2026-01-02 15:30 CET``."""
    if ts is None:
        return ""
    moment = dt.datetime.fromtimestamp(ts, tz)
    return moment.strftime("%Y-%m-%d %H:%M ") + (moment.tzname() or "UTC")


def deadline(view: RequestView, tz: dt.tzinfo = dt.UTC) -> str:
    return f"Answer by {when(view.expires_at, tz)}."


def time_left(seconds: float) -> str:
    """A remaining time, rounded up (1 min 1 s left reads "2 min", never less than what is left)."""
    s = max(0, math.ceil(seconds))
    if s < 60:
        return f"{s} s"
    minutes = math.ceil(s / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours + (1 if minutes else 0), 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def reminder(view: RequestView, *, now: float, tz: dt.tzinfo = dt.UTC) -> str:
    return f"{text('reminder')} {time_left(view.expires_at - now)} left ({deadline(view, tz)[:-1]})."


# --------------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Outcome:
    """How a terminal request ended, in words: ``code`` (approved, rejected, answered, expired,
    cancelled, pending) picks the emoji; ``lines`` are (title, value) of a non-sensitive answer in
    schema order, with an approval's reason."""

    code: str
    headline: str
    lines: tuple[tuple[str, str], ...] = ()

    @property
    def icon(self) -> str:
        return ICONS.get(self.code, "")

    def plain(self, *, icon: bool = True) -> str:
        """One paragraph: the headline, then one ``Title: value`` line each."""
        head = f"{self.icon} {self.headline}" if icon and self.icon else self.headline
        return "\n".join([head, *(f"{title}: {value}" for title, value in self.lines)])


def outcome_code(view: RequestView) -> str:
    if view.status != "answered":
        return view.status
    response = view.response if view.has_response and not view.sensitive else None
    if view.kind == "approval" and isinstance(response, dict):
        return {"approve": "approved", "reject": "rejected"}.get(str(response.get("decision")), "answered")
    return "answered"


def headline(view: RequestView, *, who: str | None = None, tz: dt.tzinfo | None = None) -> str:
    """``Approved by Alice (@alice) via Telegram`` (with `` on <when>`` when ``tz`` is given)."""
    at = f", {when(view.resolved_at, tz)}" if tz is not None and view.resolved_at else ""
    if view.status == "answered" and view.timed_out:
        return on_timeout_headline(view) + at
    if view.status == "answered":
        verb = {"approved": "Approved", "rejected": "Rejected"}.get(outcome_code(view), "Answered")
        voters = _quorum_by(view)
        if voters:
            return f"{verb} by {voters}" + at
        by = who or principal_label(view.resolved_by)
        via = CHANNEL_NAMES.get(view.resolved_channel or "", view.resolved_channel or "an unknown channel")
        return (f"{verb} by {by} via {via}" if by else f"{verb} via {via}") + at
    if view.status == "expired":
        return "Expired: no answer came in time" + at if tz is not None else "Expired"
    if view.status == "cancelled":
        return "Cancelled" + at
    return "Pending"


def tally(*, required: int, policy: str, approvers: list[str], rejecters: list[str],
          expected: list[str] | None) -> str:
    """A quorum request's votes so far: ``1 of 2 approved: Alice. Still expected: Bob, Carol.``"""
    line = f"🗳 {len(approvers)} of {required} approved" + (f": {_some(approvers)}" if approvers else "")
    if rejecters:
        line += f"; {len(rejecters)} of {required} rejected: {_some(rejecters)}"
    line += "."
    if expected:
        line += f" Still expected: {_some(expected)}."
    if policy == "any":
        line += " One rejection rejects it."
    return line


def _some(names: list[str], shown: int = 6) -> str:
    """``Alice, Bob`` or, past ``shown`` names, ``Alice, … Frank and 3 more``: a tally stays one line."""
    if len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[:shown])} and {len(names) - shown} more"


def _quorum_by(view: RequestView) -> str:
    """Who decided a quorum request: ``Alice via Telegram and Bob via Slack (2 of 2)``, or "" for another."""
    if view.approvals_required is None or not view.votes or view.status != "answered":
        return ""
    decision = {"approved": "approve", "rejected": "reject"}.get(outcome_code(view))
    side = [v for v in view.votes if v["decision"] == decision]
    if not side:
        return ""
    each = [f"{v['name']} via {CHANNEL_NAMES.get(v['channel'], v['channel'])}" for v in side]
    joined = each[0] if len(each) == 1 else ", ".join(each[:-1]) + " and " + each[-1]
    return f"{joined} ({len(side)} of {view.approvals_required})"


def on_timeout_headline(view: RequestView) -> str:
    """A request its ``on_timeout`` policy ended: nobody answered, and what the deadline did."""
    if outcome_code(view) == "rejected":
        return "Rejected automatically: no answer came in time"
    return "No answer came in time: the default answer applies"


def outcome(view: RequestView, *, who: str | None = None, tz: dt.tzinfo | None = None) -> Outcome:
    """The outcome of ``view`` for a withdrawn message; a sensitive answer is never shown."""
    lines: tuple[tuple[str, str], ...] = ()
    if view.status == "answered" and not view.sensitive and view.has_response:
        lines = tuple(answer_lines(view))
    return Outcome(outcome_code(view), headline(view, who=who, tz=tz), lines)


def answer_lines(view: RequestView, *, limit: int = 300) -> list[tuple[str, str]]:
    """(title, value) of a non-sensitive answer: field titles in schema order; an approval's reason."""
    value = view.response
    if view.sensitive or value is None:
        return []
    if view.kind == "approval":
        reason = value.get("reason") if isinstance(value, dict) else None
        return edited_lines(view, limit=limit) + ([("Reason", _clip(str(reason), limit))] if reason else [])
    specs = fields(view.schema)
    if view.schema is not None and view.schema.get("type") == "object" and isinstance(value, dict):
        return [(spec.title, "•••" if spec.masked else _clip(value_text(value[spec.name], spec), limit))
                for spec in specs if spec.name in value]
    return [("Answer", _clip(value_text(value, specs[0]), limit))]


def edited_lines(view: RequestView, *, limit: int = 300) -> list[tuple[str, str]]:
    """The fields of an approved proposal the approver changed: ``("Replicas (edited)", "2")``."""
    value = view.response
    if not (isinstance(value, dict) and value.get("edited") and isinstance(value.get("proposal"), dict)):
        return []
    original, approved = view.proposal or {}, value["proposal"]
    return [(f"{spec.title} (edited)", _clip(value_text(approved.get(spec.name), spec), limit))
            for spec in fields(view.proposal_schema) if approved.get(spec.name) != original.get(spec.name)]


def proposal_text(view: RequestView, *, limit: int = 300) -> str:
    """An approval's proposal as chat shows it, read-only, with where to change it ("" without one)."""
    if view.proposal is None or view.sensitive:
        return ""
    lines = [f"{spec.title}: {_clip(value_text(view.proposal[spec.name], spec), limit)}"
             for spec in fields(view.proposal_schema) if spec.name in view.proposal]
    how = ("Every approver approves it as proposed; to change it, reject with a reason."
           if (view.approvals_required or 1) >= 2 else "To change it before approving, open the form.")
    return "\n".join(["Proposed:", *lines, how])


def value_text(value: Any, spec: FieldSpec | None = None) -> str:
    """A typed value as a person reads it: yes/no, comma-separated lists, dates as given."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if spec is not None and spec.choices and isinstance(value, str):
        return spec.choice_title(value)  # a labelled choice reads as its title
    if isinstance(value, list):
        joiner = " to " if spec is not None and spec.widget == "date_range" else ", "
        return joiner.join(value_text(v, spec if spec is not None and spec.choices else None) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {value_text(v)}" for k, v in value.items())
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else " ".join(str(value).split())


def principal_label(principal: str | None) -> str:
    """A principal as shown when no display name is known (never a link id: "via the web form" says it)."""
    kind, _, rest = (principal or "").partition(":")
    if not principal or kind == "link":
        return ""
    if kind == "operator":
        return f"operator {rest}"
    if kind in ("telegram", "slack"):
        return f"{CHANNEL_NAMES[kind]} user {rest}"
    return rest or principal


# --------------------------------------------------------------------------- answering


def invalid_answer(problems: list[dict[str, Any]], message: str = "") -> str:
    """An invalid answer explained, one line per field; never quotes the value."""
    lines = []
    for problem in problems:
        field, why = problem.get("field") or "", problem.get("message") or ""
        lines.append(f"• {field}: {why}" if field else f"• {why}")
    if not lines:
        return f"That answer is not valid: {message}" if message else text("invalid")
    return "That answer is not valid:\n" + "\n".join(lines)


def form_only(view: RequestView) -> bool:
    """Sensitive requests and forms with a masked field are answered only in the hosted form."""
    return view.sensitive or any(spec.masked for spec in fields(view.schema, sensitive=view.sensitive))


def field_lines(view: RequestView) -> list[str]:
    """A form's fields as chat asks for them: ``name: what to enter (required)``, in schema order."""
    return [f"{spec.name}: {describe_field(spec)}{' (required)' if spec.required else ''}"
            for spec in fields(view.schema)]


def how_to_reply(view: RequestView) -> str:
    """What a chat reply to ``view`` should say (the bot says where: tap, react, reply)."""
    if view.kind == "approval":
        return "reply approve or reject (a reason may follow after a colon, e.g. “reject: too risky”)"
    if view.schema is None:
        return "reply with your answer"
    if view.schema.get("type") == "object":
        return "reply with one line per field (name: value)"
    return f"reply with {describe_field(fields(view.schema)[0])}"


def _clip(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"
