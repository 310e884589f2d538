"""Names people read: a tenant's, a key's or a person's display name from the config, never an internal id.

Forms, chat cards and the inbox all ask :func:`display_name`; where nothing is configured it
returns None and the caller words the sentence without a name ("A question for you").
"""

from __future__ import annotations

from handraise.core.config import Settings
from handraise.core.people import person_of

__all__ = ["display_name"]

# Principals whose id part is one of the tenant's configured keys.
_KEY_KINDS = frozenset({"agent", "operator"})


def display_name(settings: Settings, tenant_id: str, principal: str | None = None) -> str | None:
    """The configured name of ``tenant_id`` or, given ``principal``, of that tenant's key.

    ``principal`` is ``agent:<key id>`` or ``operator:<key id>``; a key of another tenant, a
    key created in the store (no name there) and every other kind of principal give None.
    A principal that is one of the tenant's people (``[[tenants.people]]``, any channel) is
    named as that person.
    """
    tenant = settings.tenant(tenant_id)
    if tenant is None:
        return None
    if principal is None:
        return tenant.name
    person = person_of(settings, tenant_id, principal)
    if person is not None:
        return person.display
    kind, _, key_id = principal.partition(":")
    if kind not in _KEY_KINDS or not key_id:
        return None
    key = next((k for k in tenant.keys if k.id == key_id), None)
    return key.name if key is not None else None
