"""Tenant defaults per kind: what a create gets for the fields it leaves out (``[tenants.defaults.<kind>]``).

Applied before anything is checked, so a default is validated against the request exactly as the same
field given by the agent would be (a 422 names the field either way), and two creates that differ only
in spelling out the default are the same body.
"""

from __future__ import annotations

from collections.abc import Callable

from handraise.core.api import CreateRequestBody
from handraise.core.config import Settings, TenantSettings

# The fields a tenant may default, and the body's name for each.
DEFAULTED = ("timeout_seconds", "assign_to", "escalation", "reminders", "on_timeout")


def apply(tenant: TenantSettings | None, body: CreateRequestBody) -> CreateRequestBody:
    """``body`` with its tenant's defaults for its kind filled in where the agent gave nothing."""
    given = tenant.defaults.get(body.kind) if tenant is not None else None  # type: ignore[call-overload]
    if given is None:
        return body
    missing = {name: getattr(given, name) for name in DEFAULTED
               if name not in body.model_fields_set and getattr(given, name) is not None}
    if "reminders" in missing and body.remind_after_seconds is not None:
        del missing["reminders"]  # the agent asked for its own one reminder
    return body.model_copy(update=missing) if missing else body


def channel_problem(settings: Settings, channels_for: Callable[[str], list[str]]) -> str | None:
    """A default escalation step naming a channel that does not serve its tenant (disabled, or not
    routed there), in one line; None when every one does. Checked when the app starts: otherwise every
    create of that kind would be refused."""
    for index, tenant in enumerate(settings.tenants):
        serving = channels_for(tenant.id)
        for kind, given in tenant.defaults.items():
            for i, step in enumerate(given.escalation or []):
                for channel in step.channels or []:
                    if channel not in serving:
                        return (f"tenants[{index}].defaults.{kind}.escalation.{i}.channels: {channel} does not "
                                f"serve tenant {tenant.id} (serving: {', '.join(serving) or 'none'})")
    return None
