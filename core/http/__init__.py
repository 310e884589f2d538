"""The agent HTTP API (v1): handlers, authentication, errors, the OpenAPI document."""
