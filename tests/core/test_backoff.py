"""The one backoff policy: capped, jittered, doubling delays."""

from __future__ import annotations

from handraise.core.backoff import Backoff


def test_backoff_doubles_to_its_cap_with_jitter_and_resets() -> None:
    backoff = Backoff(initial=0.01, cap=0.04)
    pauses = [backoff.next() for _ in range(8)]
    ceilings = [0.01, 0.02, 0.04, 0.04, 0.04, 0.04, 0.04, 0.04]
    # Each pause lies between half and all of its delay: never beyond the cap, and jittered.
    assert all(c / 2 <= p <= c for p, c in zip(pauses, ceilings)), pauses
    assert len(set(pauses)) > 1
    backoff.reset()
    assert 0.005 <= backoff.next() <= 0.01
