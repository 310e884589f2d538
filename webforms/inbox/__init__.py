"""The operator inbox in the browser: pending questions live, answered in place (``/inbox``)."""

from handraise.webforms.inbox.handlers import Inbox

__all__ = ["Inbox"]
