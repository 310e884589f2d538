"""A LangGraph graph whose tool node asks a human through Handraise, and survives a process restart.

    HANDRAISE_KEY=<ask key> python examples/langgraph_agent.py --thread deploy-42 --db graph.sqlite

State is checkpointed to SQLite after every step. If the process dies while the tool node waits for
the human, running the same command again resumes the graph at that node; the tool's unique_id is
derived from the thread and the tool call id (both checkpointed), so it re-attaches to the same
request and gets the one answer instead of asking again. No model is involved: the planning node
is a fixed step, standing in for one.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from typing_extensions import TypedDict

from handraise.client import Cancelled, Expired, Handraise


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


@tool
def request_approval(action: str, config: RunnableConfig, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Ask a human to approve an action; returns APPROVED or REJECTED (an expiry is never approval)."""
    thread = config["configurable"]["thread_id"]
    with Handraise() as hr:  # HANDRAISE_URL, HANDRAISE_KEY
        try:
            decision = hr.approve(action, timeout=600, unique_id=f"lg-{thread}-{tool_call_id}", run_id=thread)
        except (Expired, Cancelled) as e:
            return f"NOT APPROVED: {type(e).__name__.lower()}"
    return "APPROVED" if decision.approved else f"REJECTED: {decision.reason or ''}".strip()


def plan(state: State, config: RunnableConfig) -> dict[str, Any]:
    """Stands in for a model: asks for approval of the deploy it was told about."""
    thread = config["configurable"]["thread_id"]
    task = state["messages"][-1].content
    call = {"name": "request_approval", "args": {"action": f"Deploy: {task}"}, "id": f"call-{thread}-1"}
    return {"messages": [AIMessage(content="", tool_calls=[call])]}


def act(state: State) -> dict[str, Any]:
    verdict = next(m for m in reversed(state["messages"]) if isinstance(m, ToolMessage)).content
    outcome = "deployed" if verdict == "APPROVED" else "not deployed"
    return {"messages": [AIMessage(content=f"{outcome} ({verdict})")]}


def build(checkpointer: SqliteSaver) -> Any:
    graph = StateGraph(State)
    graph.add_node("plan", plan)
    graph.add_node("tools", ToolNode([request_approval]))
    graph.add_node("act", act)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "tools")
    graph.add_edge("tools", "act")
    graph.add_edge("act", END)
    return graph.compile(checkpointer=checkpointer)


def run(*, thread: str, db: str, task: str) -> str:
    """Start the thread, or resume it where the last process stopped; returns the final message."""
    with sqlite3.connect(db, check_same_thread=False) as conn:
        app = build(SqliteSaver(conn))
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        pending = app.get_state(config).next
        state = app.invoke(None if pending else {"messages": [HumanMessage(content=task)]}, config)
    return str(state["messages"][-1].content)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--thread", required=True)
    parser.add_argument("--db", default="graph.sqlite")
    parser.add_argument("--task", default="release 1.4 to production")
    args = parser.parse_args()
    print(json.dumps({"result": run(thread=args.thread, db=args.db, task=args.task)}), flush=True)


if __name__ == "__main__":
    main()
