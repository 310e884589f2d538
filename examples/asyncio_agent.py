"""A plain asyncio agent that asks a human through Handraise before it acts.

    HANDRAISE_URL=http://127.0.0.1:8080 HANDRAISE_KEY=<ask key> python examples/asyncio_agent.py

The agent cleans up old files: it asks which directory, asks approval for what it would delete,
and deletes nothing unless approved (here it only reports; no files are touched).
"""

from __future__ import annotations

import asyncio
import json

from handraise.client import AsyncHandraise, Cancelled, Expired


async def run_agent(hr: AsyncHandraise, *, run_id: str) -> dict[str, object]:
    """One agent run; every question carries a unique_id derived from the run, so a rerun re-attaches."""
    directory = await hr.ask("Which directory should I clean up?", schema={"type": "string", "minLength": 1},
                             timeout=300, run_id=run_id, unique_id=f"{run_id}-directory")
    found = [f"{directory}/build.log", f"{directory}/cache.tmp"]  # what a real agent would have listed
    try:
        decision = await hr.approve(f"Delete {len(found)} files in {directory}", details={"files": ", ".join(found)},
                                    timeout=300, run_id=run_id, unique_id=f"{run_id}-approve")
    except (Expired, Cancelled) as e:
        return {"directory": directory, "deleted": [], "why": f"no decision: {e}"}
    if not decision.approved:
        return {"directory": directory, "deleted": [], "why": f"rejected: {decision.reason or 'no reason'}"}
    return {"directory": directory, "deleted": found, "why": f"approved by {decision.decided_by}"}


async def main() -> None:
    async with AsyncHandraise() as hr:  # HANDRAISE_URL, HANDRAISE_KEY
        print(json.dumps(await run_agent(hr, run_id="cleanup-1")))


if __name__ == "__main__":
    asyncio.run(main())
