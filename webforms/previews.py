"""Fetches that are not a person opening a form: chat unfurlers, mail scanners, crawlers, prefetches.

They still get the page (GET decides nothing), but they do not count as the request's first open
(``opened_at``, the journal's ``opened``, the HITL protocol's ``review.opened``): a link posted in
Slack or Telegram is fetched by the messenger's previewer within a second, long before anyone reads it.
"""

from __future__ import annotations

import re

from aiohttp import web

# Substrings of the User-Agent of link previewers and scanners (matched case-insensitively).
_PREVIEWERS = re.compile("|".join(re.escape(s) for s in (
    # Messengers' unfurlers (an app's in-app browser, where a person reads, never says "bot" like these).
    "slackbot", "slack-imgproxy", "telegrambot", "twitterbot", "facebookexternalhit", "facebot", "discordbot",
    "whatsapp/", "linkedinbot", "skypeuripreview", "microsoftpreview", "mattermost-bot", "synapse (bot;",
    "outlook-ios-linkpreview", "vkshare", "redditbot", "embedly", "iframely",
    # Crawlers.
    "googlebot", "google-pagerenderer", "bingbot", "bingpreview", "applebot", "yandexbot", "duckduckbot",
    "baiduspider",
    # Mail link scanners.
    "barracuda", "proofpoint", "mimecast", "safelinks", "urldefense",
)), re.IGNORECASE)
# Browsers announce speculative fetches (a hovered link, a prerender) with one of these.
_PREFETCH_HEADERS = (("Sec-Purpose", "prefetch"), ("Purpose", "prefetch"), ("X-Purpose", "preview"),
                     ("X-Moz", "prefetch"))


def is_preview(request: web.Request) -> bool:
    """Whether this fetch of a form is a machine's (a previewer, a scanner, a prefetch): not a person's."""
    if request.method == "HEAD":
        return True
    for header, word in _PREFETCH_HEADERS:
        if word in request.headers.get(header, "").lower():
            return True
    agent = request.headers.get("User-Agent", "")
    return not agent or _PREVIEWERS.search(agent) is not None
