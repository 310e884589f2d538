"""MCP: the tools ask_human, request_approval and human_feedback, over streamable HTTP at /mcp and over stdio.

``tools`` defines the tools and runs a call (create, wait with progress, cancel on cancellation);
``backends`` reaches the requests in-process (the service) or over HTTP (the Python client, for
``handraise mcp``); ``server`` builds the MCP SDK's server; ``http`` serves it inside aiohttp;
``stdio`` runs it on standard input and output.
"""
