"""Display names: configured names of tenants and keys, never another tenant's, never an id."""

from __future__ import annotations

from conftest import base_config, settings_from
from handraise.core.names import display_name


def _settings():
    config = base_config("sqlite://")
    config["tenants"][0]["name"] = "Acme Ops"
    config["tenants"][0]["keys"][0]["name"] = "Deploy bot"
    config["tenants"][0]["keys"][1]["name"] = "On-call desk"
    return settings_from(config)


def test_tenant_and_key_names_come_from_the_config() -> None:
    settings = _settings()
    assert display_name(settings, "acme") == "Acme Ops"
    assert display_name(settings, "acme", "agent:agent-1") == "Deploy bot"
    assert display_name(settings, "acme", "operator:op-1") == "On-call desk"


def test_no_name_is_none_so_the_caller_words_it_without_one() -> None:
    settings = _settings()
    assert display_name(settings, "globex") is None
    assert display_name(settings, "acme", "agent:reader-1") is None  # a key without a name
    assert display_name(settings, "acme", "agent:store-key") is None  # a key created in the store
    assert display_name(settings, "nope") is None


def test_another_tenants_key_and_other_principals_have_no_name_here() -> None:
    settings = _settings()
    assert display_name(settings, "globex", "agent:agent-1") is None
    for principal in ("link:abc", "telegram:42", "agent:", "agent-1", "", "person:agent-1"):
        assert display_name(settings, "acme", principal) is None
