"""What a chat message keeps while its request is pending (core/chatrefs.py, core/links.py): its button
tokens handed back as kept, and its form link shown again from the link's id, minting nothing."""

from __future__ import annotations

import time

import pytest
from conftest import base_config, running_app, settings_from

from handraise.core.appkeys import SERVICE, STORE
from handraise.core.chatrefs import ChatRefs
from handraise.core.errors import NotFoundError

VALUES = [{"decision": "approve"}, {"decision": "reject"}]


async def test_kept_tokens_come_back_as_they_are_and_anything_else_mints(storage_url: str) -> None:
    async with running_app(settings_from(base_config(storage_url))) as api:
        request = await api.create({"unique_id": "kept", "message_for_user": "Go?", "timeout_seconds": 600})
        refs = ChatRefs(records=api.app[STORE].chat_refs, clock=time.time)
        first = await refs.create_actions(tenant_id="acme", request_id=request["id"], channel="telegram",
                                          values=VALUES)
        again = await refs.create_actions(tenant_id="acme", request_id=request["id"], channel="telegram",
                                          values=VALUES, kept=first)
        assert again == first
        # A ref that cannot be this message's buttons (another count, not a list of strings) is not trusted.
        for kept in (first[:1], "ab", [1, 2], None):
            fresh = await refs.create_actions(tenant_id="acme", request_id=request["id"], channel="telegram",
                                              values=VALUES, kept=kept)  # type: ignore[arg-type]
            assert not set(fresh) & set(first)
            assert [(await refs.resolve_action(token=t, channel="telegram"))[2] for t in fresh] == VALUES


async def test_a_link_is_shown_again_from_its_id_and_only_a_minted_id_opens(storage_url: str) -> None:
    async with running_app(settings_from(base_config(storage_url))) as api:
        service = api.app[SERVICE]
        request = await api.create({"unique_id": "again", "message_for_user": "Go?", "timeout_seconds": 600})
        minted = await service.mint_link(tenant_id="acme", request_id=request["id"], principal="telegram:bot",
                                         for_principal="telegram:42")
        journal = await api.journal(request["id"])
        assert service.link_url(minted.link_id) == minted.url
        link, _ = await service.open_link(service.link_url(minted.link_id).rsplit("/f/", 1)[1])
        assert (link.id, link.principal) == (minted.link_id, "telegram:42")
        assert await api.journal(request["id"]) == journal  # shown again: nothing minted, nothing journaled
        with pytest.raises(NotFoundError):
            await service.open_link(service.link_url(minted.link_id + "x").rsplit("/f/", 1)[1])
