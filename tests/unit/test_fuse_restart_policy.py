"""How often the FUSE supervisor restarts a serving process that keeps dying."""

from __future__ import annotations

from reservoir.common import config as cfg
from reservoir.fuse.supervisor import RestartPolicy


def _policy(**settings: float) -> RestartPolicy:
    defaults = {"restart_backoff_s": 0.5, "restart_backoff_max_s": 4.0, "max_restarts": 5}
    return RestartPolicy(cfg.FuseConfig(**{**defaults, **settings}))  # type: ignore[arg-type]


def test_the_first_restart_is_at_once_and_the_next_ones_back_off_doubling_to_the_max() -> None:
    policy = _policy()
    assert [policy.next_delay(now=100.0 + i) for i in range(5)] == [0.0, 0.5, 1.0, 2.0, 4.0]


def test_too_many_restarts_within_the_window_give_up() -> None:
    policy = _policy(max_restarts=3, restart_window_s=60.0)
    assert [policy.next_delay(now=t) for t in (0.0, 1.0, 2.0)] == [0.0, 0.5, 1.0]
    assert policy.next_delay(now=3.0) is None


def test_restarts_older_than_the_window_are_forgotten() -> None:
    policy = _policy(max_restarts=2, restart_window_s=60.0)
    policy.next_delay(now=0.0)
    policy.next_delay(now=10.0)
    assert policy.next_delay(now=30.0) is None
    # A mount that served for a while: its next death restarts at once again.
    assert policy.next_delay(now=200.0) == 0.0


def test_no_restarts_allowed_gives_up_at_the_first_death() -> None:
    assert _policy(max_restarts=0).next_delay(now=0.0) is None
