"""The ``handraise`` command: serve, ask, answer, link, inbox-link, keys, journal, doctor. With the subcommands
in ``core/commands/`` (one module per concept), the only place that prints and exits; this module parses,
dispatches and turns every error into one line and an exit code."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from handraise import __version__
from handraise.core.commands.access import cmd_inbox_link, cmd_keys_create, cmd_keys_list, cmd_keys_revoke
from handraise.core.commands.base import EXIT_ERROR, EXIT_USAGE, say, settings_of
from handraise.core.commands.client import cmd_answer, cmd_ask, cmd_link, cmd_mcp
from handraise.core.commands.journal import cmd_journal_anchor, cmd_journal_verify
from handraise.core.commands.serve import cmd_serve
from handraise.core.scopes import ALL_SCOPES
from handraise.core.errors import ConfigError, HandraiseError


def cmd_doctor(args: argparse.Namespace) -> int:
    from handraise.core import doctor

    try:
        settings = settings_of(args)
    except ConfigError as e:
        print(doctor.failed("config", e.message).line())
        return EXIT_ERROR
    findings = asyncio.run(doctor.run(settings))
    for finding in findings:
        print(finding.line(), flush=True)
    problems = sum(not f.ok for f in findings)
    warnings = sum(f.warning for f in findings)
    advice = f"; {warnings} warning(s): each WARN line says what to change" if warnings else ""
    say(f"{problems} problem(s); each FAIL line says how to fix it{advice}" if problems
        else f"every check passed{advice}")
    return EXIT_ERROR if problems else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="handraise", description="Ask a human; wait for a validated answer.")
    parser.add_argument("--version", action="version", version=f"handraise {__version__}")
    config_help = "TOML config file (default: $HANDRAISE_CONFIG, else the embedded default)"
    parser.add_argument("--config", help=config_help)
    # Every command takes --config after its name too, and shows it in its --help.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help=config_help, default=argparse.SUPPRESS)
    client = argparse.ArgumentParser(add_help=False, parents=[common])
    client.add_argument("--url", help="server base URL (default: $HANDRAISE_URL, else the config's server)")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", parents=[common], help="run the HTTP API and every enabled connector")
    serve.add_argument("--host", help="interface to listen on (default: [server] host, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default: [server] port, 8080; 0: any free port)")
    serve.set_defaults(fn=cmd_serve)

    ask = sub.add_parser("ask", parents=[client],
                         help="ask a human and print the answer as JSON (exit 0 answered, 2 expired, 3 cancelled)")
    ask.add_argument("message", help="the question, as the human reads it")
    ask.add_argument("--schema", help="JSON schema of the answer: inline JSON, or @file.json")
    ask.add_argument("--choices", help="comma-separated choices, e.g. red,green,blue")
    ask.add_argument("--approval", action="store_true", help="ask for approve/reject")
    ask.add_argument("--timeout", type=int, default=300, help="seconds (default 300)")
    ask.add_argument("--sensitive", action="store_true", help="a secret: masked input, deleted once you have it")
    ask.add_argument("--unique-id", help="your id for this question (default: generated); retries reuse it")
    ask.add_argument("--run-id")
    ask.add_argument("--channel", action="append", help="deliver through this channel (repeatable)")
    ask.add_argument("--key", help="API key with the ask scope (default: $HANDRAISE_KEY)")
    ask.set_defaults(fn=cmd_ask)

    answer = sub.add_parser("answer", parents=[client], help="answer a pending question by its unique_id")
    answer.add_argument("unique_id")
    answer.add_argument("value", nargs="?", help="the answer as text")
    answer.add_argument("--json", metavar="VALUE", help="the answer as JSON, e.g. 42 or '{\"size\": \"L\"}'")
    answer.add_argument("--approve", action="store_true", help="approve an approval request")
    answer.add_argument("--reject", action="store_true", help="reject an approval request")
    answer.add_argument("--reason", help="with --approve or --reject")
    answer.add_argument("--key", help="API key with the answer scope (default: $HANDRAISE_KEY)")
    answer.set_defaults(fn=cmd_answer)

    link = sub.add_parser("link", parents=[client], help="mint a one-time form link for a pending request")
    link.add_argument("id", help="the request id (req_...) that ask printed")
    link.add_argument("--recipient", help="who the link is for (shown on the form, journaled)")
    link.add_argument("--key", help="API key with the answer scope (default: $HANDRAISE_KEY)")
    link.set_defaults(fn=cmd_link)

    inbox = sub.add_parser("inbox-link", parents=[common],
                           help="print a one-time sign-in link to the operator inbox (made on the store)")
    inbox.add_argument("--tenant", help="tenant id (default: the only one configured)")
    inbox.add_argument("--name", required=True, help="who signs in: answers are recorded as operator:<name>")
    inbox.set_defaults(fn=cmd_inbox_link)

    doctor = sub.add_parser("doctor", parents=[common], help="check the config, store, connectors, public_url "
                            "and keys; one line per finding with its fix (exit 0 only when all pass)")
    doctor.set_defaults(fn=cmd_doctor)

    keys = sub.add_parser("keys", help="manage stored API keys").add_subparsers(dest="keys_command", required=True)
    create = keys.add_parser("create", parents=[common], help="create a key; prints it once, stores only its hash")
    create.add_argument("--tenant", help="tenant id (default: the only one configured)")
    create.add_argument("--scopes", required=True, help=f"comma-separated: {', '.join(ALL_SCOPES)}")
    create.add_argument("--id", help="key id (default: generated)")
    create.add_argument("--person", help="bind the key to one of the tenant's people: it acts only as them "
                                         "(person:<id>); hand it to that person alone")
    create.set_defaults(fn=cmd_keys_create)
    listing = keys.add_parser("list", parents=[common], help="list key ids and scopes")
    listing.set_defaults(fn=cmd_keys_list)
    revoke = keys.add_parser("revoke", parents=[common], help="revoke a stored key")
    revoke.add_argument("id")
    revoke.set_defaults(fn=cmd_keys_revoke)

    mcp = sub.add_parser("mcp", help="serve the MCP tools over stdio, reaching the server at $HANDRAISE_URL")
    mcp.add_argument("--url", help="server base URL (default $HANDRAISE_URL or http://127.0.0.1:8080)")
    mcp.add_argument("--key", help="API key with the ask scope (default $HANDRAISE_KEY)")
    mcp.add_argument("--progress-interval", type=float, default=10.0, help="seconds between progress notes")
    mcp.set_defaults(fn=cmd_mcp)

    journal = sub.add_parser("journal", help="the audit journal").add_subparsers(dest="journal_command", required=True)
    verify = journal.add_parser("verify", help="check every tenant's chain and the requests table; exit 1 when broken")
    verify.add_argument("--config", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    verify.add_argument("--anchor", help="an anchor printed earlier by 'journal anchor' (the JSON, or a file)")
    verify.set_defaults(fn=cmd_journal_verify)
    anchor = journal.add_parser("anchor", help="print the chains' heads as one JSON line, to keep off-site")
    anchor.add_argument("--config", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    anchor.set_defaults(fn=cmd_journal_anchor)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except ConfigError as e:
        print(f"handraise: config error: {e.message}", file=sys.stderr)
        return EXIT_USAGE
    except HandraiseError as e:
        print(f"handraise: {e.message}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        # A bug, not an operator mistake: still one line, with the traceback on request.
        if os.environ.get("HANDRAISE_DEBUG"):
            raise
        print(f"handraise: unexpected {type(e).__name__}: {e} (HANDRAISE_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
