"""What `local up --resume` makes of the settings it is given (no processes)."""

from __future__ import annotations

import json

import pytest

from reservoir.local.cluster_settings import resolve
from reservoir.local.process import ClusterError

LEFT_OUT = {"workers": None, "shm": None, "secure": None, "s3_latency_ms": None}


def _recorded(**settings: object) -> dict[str, object]:
    """Settings as cluster.json holds them: through JSON."""
    new = resolve(dict(LEFT_OUT, **settings), None)
    return dict(json.loads(json.dumps(new)))


def test_a_new_cluster_takes_the_defaults_for_what_is_left_out() -> None:
    settings = resolve(dict(LEFT_OUT, shm=True), None)
    assert settings["shm"] is True and settings["secure"] is False
    assert settings["workers"] == 2 and settings["capacity"] == "1GiB"


def test_a_resumed_cluster_takes_the_recorded_settings_for_what_is_left_out() -> None:
    recorded = _recorded(secure=True, shm=True, workers=3, s3_latency_ms=5)
    settings = resolve(LEFT_OUT, recorded)
    assert settings == recorded
    # Given as recorded (an int where a float was recorded, too): no conflict.
    assert resolve(dict(LEFT_OUT, secure=True, workers=3, s3_latency_ms=5.0), recorded) == recorded


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"secure": False}, "cannot resume with --no-secure: the stopped cluster is --secure"),
        ({"shm": False}, "cannot resume with --no-shm: the stopped cluster was started with --shm"),
        ({"workers": 2}, "with --workers 2: the stopped cluster was started with --workers 3"),
        ({"capacity": "2GiB"}, "started with --capacity 1GiB"),
        (
            {"etcd_members": 1},
            "with --etcd-members 1: the stopped cluster was started with --etcd-members 3",
        ),
    ],
)
def test_a_setting_that_contradicts_the_stopped_cluster_is_refused_saying_both(
    given: dict[str, object], said: str
) -> None:
    recorded = _recorded(secure=True, shm=True, workers=3, etcd_members=3)
    with pytest.raises(ClusterError, match=said) as refused:
        resolve(dict(LEFT_OUT, **given), recorded)
    assert "\n" not in str(refused.value) and "without --resume" in str(refused.value)


def test_an_old_record_without_a_setting_resumes_with_its_default() -> None:
    recorded = _recorded()
    del recorded["s3_latency_ms"]
    assert resolve(LEFT_OUT, recorded)["s3_latency_ms"] == 0.0
    with pytest.raises(ClusterError, match="--s3-latency-ms 0.0"):
        resolve(dict(LEFT_OUT, s3_latency_ms=50), recorded)


def test_a_new_clusters_settings_share_nothing_with_the_next_ones() -> None:
    first = resolve({}, None)
    first["env"]["RESERVOIR_ALLOWED_ENDPOINTS"] = "http://127.0.0.1:1"  # as test_fuzz does
    assert resolve({}, None)["env"] == {}


def test_etcd_is_one_member_unless_asked_and_a_resumed_cluster_keeps_its_members() -> None:
    assert resolve(LEFT_OUT, None)["etcd_members"] == 1
    recorded = _recorded(etcd_members=3, etcd_flags=["--quota-backend-bytes", "1048576"])
    settings = resolve(LEFT_OUT, recorded)
    assert settings["etcd_members"] == 3
    assert settings["etcd_flags"] == ["--quota-backend-bytes", "1048576"]
    # A record from before etcd could be a cluster: one member.
    del recorded["etcd_members"]
    assert resolve(LEFT_OUT, recorded)["etcd_members"] == 1
