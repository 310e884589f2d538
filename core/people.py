"""A tenant's people: who acted (a principal) as a person, and what ``alice`` / ``group:oncall`` name.

People are configured per tenant (``[[tenants.people]]``, core/config.py) and looked up only within
that tenant: an identity listed by another tenant never makes anyone a person here (DESIGN invariant 7).
A person is proven, never asserted (invariant 10): a principal is read by its channel (``telegram:42``,
``slack:T1/U1``, ``matrix:@a:hs``, ``email:a@x.org``: the messenger or the mailbox proved who it is), and
``person:alice`` is Alice, a principal only made by what proves her (a key bound to her, a sign-in
through the identity provider or one delivered to her own channel, a link minted for her own use).
Whatever a name asserts (``operator:alice``, an inbox session called "alice") is nobody.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator

from handraise.core.config import PERSON_CHANNELS, PERSON_ID, PersonSettings, Settings
from handraise.core.errors import (
    FourEyesError,
    ForbiddenError,
    PersonMismatchError,
    PersonNotBoundError,
    PersonRequiredError,
    ValidationFailedError,
)

GROUP_PREFIX = "group:"
# ``alice`` or ``group:oncall``: how allowlists and ``assign_to`` name people.
REFERENCE = r"^(?:group:)?[A-Za-z][A-Za-z0-9_.\-]{0,63}$"


def _reference(value: str) -> str:
    if not re.fullmatch(REFERENCE, value):
        raise ValueError("must name a person (alice) or a group (group:oncall): a letter, then letters, "
                         "digits, _ . -")
    return value


def _person_id(value: str) -> str:
    if not re.fullmatch(PERSON_ID, value):
        raise ValueError("must be a person's id (alice): a letter, then letters, digits, _ . -")
    return value


PersonRef = Annotated[str, AfterValidator(_reference)]
PersonId = Annotated[str, AfterValidator(_person_id)]


def person_of(settings: Settings, tenant_id: str, principal: str | None) -> PersonSettings | None:
    """The person of ``tenant_id`` who acted as ``principal``, or None (a stranger, a link, an agent)."""
    tenant = settings.tenant(tenant_id)
    if tenant is None or not tenant.people or not principal:
        return None
    kind, _, rest = principal.partition(":")
    if kind == "person":
        return tenant.person(rest)
    if kind not in PERSON_CHANNELS or not rest:
        return None
    if kind == "slack":
        rest = rest.rpartition("/")[2]  # slack:<team>/<user>: the user id is the person's
    elif kind == "email":
        rest = rest.lower()
    return next((p for p in tenant.people if p.identity(kind) == rest), None)


@dataclass(frozen=True)
class Expansion:
    """What a list of references names: the people (ids, in order), and the references that name nobody."""

    people: tuple[str, ...]
    unknown: tuple[str, ...]


def expand(settings: Settings, tenant_id: str, refs: Iterable[str]) -> Expansion:
    """``["alice", "group:oncall"]`` → the people of ``tenant_id`` they name; an unknown person, or a
    group nobody of the tenant is in, is ``unknown``."""
    tenant = settings.tenant(tenant_id)
    people = tenant.people if tenant is not None else []
    found: list[str] = []
    unknown: list[str] = []
    for ref in refs:
        if ref.startswith(GROUP_PREFIX):
            members = [p.id for p in people if ref[len(GROUP_PREFIX):] in p.groups]
        else:
            members = [p.id for p in people if p.id == ref]
        if not members:
            unknown.append(ref)
        found.extend(m for m in members if m not in found)
    return Expansion(tuple(found), tuple(unknown))


def is_reference(value: str) -> bool:
    """Whether an allowlist entry reads as a person or group reference rather than a raw channel id."""
    return value.startswith(GROUP_PREFIX) or (bool(value) and value[0].isalpha() and ":" not in value
                                              and "@" not in value)


def names(settings: Settings, tenant_id: str, person_ids: Iterable[str]) -> list[str]:
    """The names people read for these person ids (the id where no name is configured)."""
    tenant = settings.tenant(tenant_id)
    out = []
    for person_id in person_ids:
        person = tenant.person(person_id) if tenant is not None else None
        out.append(person.display if person is not None else person_id)
    return out


# -- assignment and four eyes ----------------------------------------------------------------


def routing_problems(settings: Settings, tenant_id: str, *, kind: str, assign_to: list[str] | None,
                     on_behalf_of: str | None) -> list[dict[str, str]]:
    """Why a create's ``assign_to`` / ``on_behalf_of`` cannot stand, per field (empty: they can)."""
    problems: list[dict[str, str]] = []
    tenant = settings.tenant(tenant_id)
    if (assign_to is not None or on_behalf_of is not None) and (tenant is None or not tenant.people):
        field = "assign_to" if assign_to is not None else "on_behalf_of"
        return [{"field": field, "message": "this tenant lists no people ([[tenants.people]] in the config)"}]
    assigned: tuple[str, ...] = ()
    if assign_to is not None:
        found = expand(settings, tenant_id, assign_to)
        assigned = found.people
        for ref in found.unknown:
            message = (f"nobody of this tenant is in group {ref[len(GROUP_PREFIX):]}" if ref.startswith(GROUP_PREFIX)
                       else f"{ref} is not one of this tenant's people")
            problems.append({"field": "assign_to", "message": message})
    if on_behalf_of is not None:
        if kind != "approval":
            problems.append({"field": "on_behalf_of", "message": "applies to approvals only (kind approval)"})
        elif tenant is not None and tenant.person(on_behalf_of) is None:
            problems.append({"field": "on_behalf_of", "message": f"{on_behalf_of} is not one of this tenant's people"})
        elif assign_to is not None and not problems and set(assigned) == {on_behalf_of}:
            problems.append({"field": "assign_to", "message": f"names only {on_behalf_of}, who may not approve a "
                                                              "request made on their behalf: nobody could"})
    return problems


def is_assigned(settings: Settings, tenant_id: str, assign_to: list[str] | None, principal: str) -> bool:
    """Whether ``principal`` may answer a request assigned to ``assign_to`` (None: no assignment, anyone)."""
    if assign_to is None:
        return True
    person = person_of(settings, tenant_id, principal)
    return person is not None and person.id in expand(settings, tenant_id, assign_to).people


def four_eyes_refusal(settings: Settings, tenant_id: str, on_behalf_of: str | None, principal: str,
                      response: object) -> ForbiddenError | None:
    """Why this answer may not approve a request made on ``on_behalf_of``'s behalf, or None when it may.

    Their own approval is refused (``four_eyes``; rejecting is theirs to do), and so is one from someone
    proven as nobody (``person_required``: a key or session bound to no person, a plain link), who could
    be that very person."""
    if on_behalf_of is None or not isinstance(response, dict) or response.get("decision") != "approve":
        return None
    person = person_of(settings, tenant_id, principal)
    if person is None:
        return PersonRequiredError("this request was made on someone's behalf: only one of the tenant's people, "
                                   "proven (a key bound to them, their own sign-in or channel), may approve it")
    if person.id == on_behalf_of:
        return FourEyesError("this request was made on your behalf: someone else must approve it (you may reject it)")
    return None


def person_json(settings: Settings, tenant_id: str, principal: str | None) -> dict[str, str] | None:
    """``{"id", "name"}`` of the proven person who acted as ``principal`` (None: nobody proven), as results
    show who decided in human terms."""
    person = person_of(settings, tenant_id, principal)
    return None if person is None else {"id": person.id, "name": person.display}


def link_principal(settings: Settings, tenant_id: str, assign_to: list[str] | None, person_id: str) -> str:
    """The principal of a link made personal to ``person_id`` (``person:<id>``): answers through it are
    theirs. A 422 naming ``person`` when the tenant has no such person, or the request is assigned to
    others (a link they could only be refused through is no link)."""
    require_person(settings, tenant_id, person_id)
    principal = f"person:{person_id}"
    if not is_assigned(settings, tenant_id, assign_to, principal):
        raise ValidationFailedError(f"person: {person_id} may not answer this request", fields=[
            {"field": "person", "message": f"{person_id} may not answer this request: it is assigned to "
                                           "other people"}])
    return principal


def require_person(settings: Settings, tenant_id: str, person_id: str) -> PersonSettings:
    """One of ``tenant_id``'s people, or a 422 naming ``person`` (another tenant's people are nobody here)."""
    tenant = settings.tenant(tenant_id)
    found = tenant.person(person_id) if tenant is not None else None
    if found is None:
        raise ValidationFailedError(f"person: {person_id} is not one of this tenant's people", fields=[
            {"field": "person", "message": f"{person_id} is not one of this tenant's people"}])
    return found


def naming_refusal(bound_to: str | None, person: str) -> ForbiddenError | None:
    """Why a key bound to ``bound_to`` may not mint what names ``person`` for its caller (a sign-in, a link
    that answers as them), or None when it may: only a key bound to that same person does. Anyone may
    have it sent to the person's own channel instead (core/personal.py)."""
    if bound_to == person:
        return None
    if bound_to is None:
        return PersonNotBoundError(f"this key is bound to no person, so it never mints what names {person}: "
                                   f'bind a key to {person} (keys create --person {person}), or add "deliver": '
                                   "true to send it to their own channel")
    return PersonMismatchError(f"this key is bound to {bound_to}: it mints only what names {bound_to}; add "
                               f'"deliver": true to send it to {person}\'s own channel instead')
