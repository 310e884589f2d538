"""An OpenAI Agents SDK function tool that asks a human through Handraise.

    from agents import Agent
    agent = Agent(name="ops", instructions="...", tools=[ask_human, request_approval])

The model calls the tools; each call blocks until a human answers. Expiry comes back to the model
as an error string it must respect (never as an answer), and the tool call id makes the unique_id,
so a run replayed after a crash re-attaches instead of asking twice.
"""

from __future__ import annotations

from typing import Any

from agents import RunContextWrapper, function_tool
from agents.tool_context import ToolContext

from handraise.client import AsyncHandraise, Cancelled, Expired


def _unique_id(ctx: RunContextWrapper[Any], kind: str) -> str | None:
    call_id = getattr(ctx, "tool_call_id", None)
    return f"oai-{kind}-{call_id}" if isinstance(call_id, str) and call_id else None


@function_tool
async def ask_human(ctx: ToolContext[Any], question: str, timeout_seconds: int = 300, sensitive: bool = False) -> str:
    """Ask a human something only a human can answer, and wait for the answer.

    Args:
        question: The question, in plain words the human can answer without your context.
        timeout_seconds: How long to wait; the shortest realistic time.
        sensitive: True for secrets (codes, passwords): answered in a masked form, never in chat.
    """
    async with AsyncHandraise() as hr:
        try:
            answer = await hr.ask(question, timeout=timeout_seconds, sensitive=sensitive,
                                  unique_id=_unique_id(ctx, "ask"))
        except Expired:
            return "ERROR: no answer, the question expired. Do not assume one."
        except Cancelled:
            return "ERROR: no answer, the question was cancelled."
    return answer if isinstance(answer, str) else str(answer)


@function_tool
async def request_approval(ctx: ToolContext[Any], action: str, details: str = "", timeout_seconds: int = 300) -> str:
    """Ask a human to approve an action before you take it. Proceed only on APPROVED.

    Args:
        action: What you will do if approved, in one sentence.
        details: Specifics the human needs to decide.
        timeout_seconds: How long to wait for the decision.
    """
    async with AsyncHandraise() as hr:
        try:
            decision = await hr.approve(action, details=details or None, timeout=timeout_seconds,
                                        unique_id=_unique_id(ctx, "approve"))
        except (Expired, Cancelled) as e:
            return f"NOT APPROVED: no decision ({type(e).__name__.lower()}). Do not take the action."
    verdict = "APPROVED" if decision.approved else "REJECTED"
    return f"{verdict}{': ' + decision.reason if decision.reason else ''}"
