"""A line decoder for Server-Sent Events (the subset ``GET /v1/events`` writes: id, event, data, comments)."""

from __future__ import annotations

import json

from handraise.client.results import Event


class SseDecoder:
    def __init__(self) -> None:
        self._type = "message"
        self._id: str | None = None
        self._data: list[str] = []

    def feed(self, line: str) -> Event | None:
        """Feed one line (without its end); returns an event at the blank line that ends one."""
        if not line:
            if not self._data:
                self._type = "message"
                return None
            text = "\n".join(self._data)
            try:
                data = json.loads(text)
            except ValueError:
                data = text
            event = Event(type=self._type, data=data, id=self._id)
            self._type, self._data = "message", []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._type = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        return None
