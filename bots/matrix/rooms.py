"""What a Matrix room allows the bot: power levels from its state, and the problems they make, in words.

Also the correlation key of a card, bound to its room."""

from __future__ import annotations

import hashlib
import math
from typing import Any


def message_key(room_id: str, event_id: str) -> str:
    """The correlation key of a card: its event id, bound to its room.

    ``m.in_reply_to`` is plain content any sender can fill in, so a reply in
    another room naming a card's event id must not find that card.
    """
    room = hashlib.sha256(room_id.encode()).hexdigest()[:16]
    return f"{event_id}@{room}"


def creators_have_infinite_power(room_version: str) -> bool:
    """Room version 12 (and its hydra predecessor) gives creators power above any level."""
    if room_version == "org.matrix.hydra.11":
        return True
    return room_version.isdigit() and int(room_version) >= 12


def power_of(user_id: str, state: list[dict[str, Any]]) -> float:
    """A user's power level from a room's state events (``math.inf`` for a v12+ creator)."""
    create = next((e for e in state if e.get("type") == "m.room.create" and e.get("state_key") == ""), None)
    levels = next((e for e in state if e.get("type") == "m.room.power_levels" and e.get("state_key") == ""), None)
    create_content = (create or {}).get("content") or {}
    creators = {(create or {}).get("sender")} | set(create_content.get("additional_creators") or [])
    if creators_have_infinite_power(str(create_content.get("room_version", "1"))) and user_id in creators:
        return math.inf
    if levels is None:
        return 100 if user_id == (create or {}).get("sender") else 0
    content = levels.get("content") or {}
    return float((content.get("users") or {}).get(user_id, content.get("users_default", 0)))


def level_needed(state: list[dict[str, Any]], *, event_type: str, redact: bool = False) -> float:
    """The power needed to send ``event_type`` (and, with ``redact``, to redact others' events)."""
    levels = next((e for e in state if e.get("type") == "m.room.power_levels" and e.get("state_key") == ""), None)
    content = (levels or {}).get("content") or {}
    events = content.get("events") or {}
    needed = float(events.get(event_type, content.get("events_default", 0)))
    if redact:
        needed = max(needed, float(content.get("redact", 50)))
    return needed


def level_text(value: float) -> str:
    """A power level as people read it."""
    return "creator (unlimited)" if math.isinf(value) else str(int(value))


def room_problems(room_id: str, user_id: str, state: list[dict[str, Any]]) -> list[str]:
    """What would stop the bot in a room, from its state (doctor's words for what start() logs)."""
    problems = []
    if any(e.get("type") == "m.room.encryption" for e in state):
        problems.append(f"room {room_id} is end-to-end encrypted, which Handraise cannot read; use an "
                        "unencrypted room")
    power = power_of(user_id, state)
    for event_type, what in (("m.room.message", "post cards"), ("m.reaction", "react")):
        needed = level_needed(state, event_type=event_type)
        if power < needed:
            problems.append(f"room {room_id}: the bot cannot {what} (power {level_text(power)}, needs "
                            f"{level_text(needed)}); raise its power level")
    needed = level_needed(state, event_type="m.room.redaction", redact=True)
    if power < needed:
        problems.append(f"room {room_id}: the bot cannot redact chat replies to sensitive requests (power "
                        f"{level_text(power)}, needs {level_text(needed)}); give it power level "
                        f"{level_text(needed)}")
    return problems
