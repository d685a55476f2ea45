"""When a scheduled preload is due: cron schedules (croniter), in UTC."""

from __future__ import annotations

from croniter import croniter


def latest_due(schedule: str, now_s: float) -> float | None:
    """The latest time at or before `now_s` the schedule names (seconds since the epoch);
    None when it names none (a schedule that never fires before now). A caller that ran
    at the time returned last is not due again until a later one: runs missed while no
    master led are caught up once, not once each."""
    try:
        # croniter counts whole seconds: a moment on the schedule is its own latest.
        return float(croniter(schedule, int(now_s) + 1).get_prev(float))
    except (ValueError, KeyError):
        return None
