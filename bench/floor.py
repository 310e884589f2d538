"""The floor: a bare aiohttp server with Handraise's three routes doing no work, so the bench can subtract the
cost of HTTP and the client loop itself. Run by ``bench/run.py`` as ``python bench/floor.py --port N``."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import resource

from aiohttp import web

# Parked waits and answered-but-unfetched requests, by id; unique_id -> id for the submit route.
REQUESTS: web.AppKey[dict[str, asyncio.Event]] = web.AppKey("requests")
BY_UNIQUE_ID: web.AppKey[dict[str, str]] = web.AppKey("by_unique_id")
ANSWERS: web.AppKey[dict[str, object]] = web.AppKey("answers")


async def create(request: web.Request) -> web.Response:
    body = await request.json()
    request_id = f"req_{next(_ids)}"
    request.app[REQUESTS][request_id] = asyncio.Event()
    request.app[BY_UNIQUE_ID][body["unique_id"]] = request_id
    return web.json_response({"id": request_id, "unique_id": body["unique_id"], "status": "pending"}, status=201)


async def submit(request: web.Request) -> web.Response:
    body = await request.json()
    request_id = request.app[BY_UNIQUE_ID].pop(body["unique_id"])
    request.app[ANSWERS][request_id] = body["response"]
    request.app[REQUESTS][request_id].set()
    return web.json_response({"accepted": True, "request": {"id": request_id, "status": "answered"}})


async def wait(request: web.Request) -> web.Response:
    request_id = request.match_info["id"]
    answered = request.app[REQUESTS][request_id]
    try:
        await asyncio.wait_for(answered.wait(), timeout=float(request.query.get("timeout", "60")))
    except TimeoutError:
        return web.json_response({"id": request_id, "status": "pending"})
    # Forget it once fetched: a long cycle run must not grow the floor's memory.
    request.app[REQUESTS].pop(request_id, None)
    return web.json_response({"id": request_id, "status": "answered", "response": request.app[ANSWERS].pop(request_id)})


async def healthz(_request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


_ids = itertools.count(1)


def build_app() -> web.Application:
    app = web.Application()
    app[REQUESTS] = {}
    app[BY_UNIQUE_ID] = {}
    app[ANSWERS] = {}
    app.router.add_post("/v1/requests", create)
    app.router.add_post("/api/human-feedback/submit", submit)
    app.router.add_get("/v1/requests/{id}/wait", wait)
    app.router.add_get("/healthz", healthz)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    # Same file-descriptor headroom as the real server gets from the bench (10,000 parked waits).
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    # Handraise's serve runs with aiohttp's defaults too (backlog, no access log below WARNING).
    web.run_app(build_app(), host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
