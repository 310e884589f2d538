"""Test helpers for the client: a human who answers a request as soon as it is created."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
from harness.live import OPERATOR_KEY, READER_KEY

from handraise.client import AsyncHandraise, Handraise, RequestRecord


class AnsweringHuman(threading.Thread):
    """Subscribes to the event stream (operator key), then answers ``unique_id`` once it is created.

    ``respond`` is the answer, or a function of the created request giving it. ``join()`` re-raises
    anything that went wrong in the thread.
    """

    def __init__(self, url: str, unique_id: str, respond: Callable[[RequestRecord], Any] | Any, *,
                 key: str = OPERATOR_KEY) -> None:
        super().__init__(daemon=True, name=f"human-{unique_id}")
        self.url, self.unique_id, self.respond, self.key = url, unique_id, respond, key
        self.subscribed = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Handraise(self.url, self.key) as hr, hr.events(types=["request.created"]) as events:
                self.subscribed.set()
                for event in events:
                    record = event.request
                    if record is not None and record.unique_id == self.unique_id:
                        hr.submit(self.unique_id, self.respond(record) if callable(self.respond) else self.respond)
                        return
        except BaseException as e:  # noqa: BLE001  (re-raised by join())
            self.error = e
        finally:
            self.subscribed.set()

    def begin(self) -> AnsweringHuman:
        self.start()
        assert self.subscribed.wait(30), "the event stream did not open"
        return self

    def join(self, timeout: float | None = 30) -> None:
        super().join(timeout)
        if self.error is not None:
            raise self.error
        assert not self.is_alive(), "the human never saw the request"


async def answer_when_created(url: str, unique_id: str, response: Any, *, ready: Any,
                              key: str = OPERATOR_KEY) -> RequestRecord:
    """Async: subscribe (then set ``ready``), answer ``unique_id`` when created; returns the answered request."""
    async with AsyncHandraise(url, key) as hr, hr.events(types=["request.created"]) as events:
        ready.set()
        async for event in events:
            record = event.request
            if record is not None and record.unique_id == unique_id:
                return await hr.submit(unique_id, response)
    raise AssertionError("the event stream ended")


def count_requests(url: str, unique_id: str) -> int:
    """How many requests the server holds with ``unique_id`` (a reader's listing)."""
    listing = httpx.get(url + "/v1/requests", params={"limit": "500"},
                        headers={"Authorization": f"Bearer {READER_KEY}"}, timeout=30).json()["requests"]
    return [r["unique_id"] for r in listing].count(unique_id)
