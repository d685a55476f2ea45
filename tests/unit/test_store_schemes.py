"""The scheme registry is the one place that says which under-stores exist and what a
mount of each can do; the mount policy and the mount table answer from it."""

from __future__ import annotations

import pytest

from reservoir.common.errors import InvalidArgument, PermissionDenied
from reservoir.common.models import MountOptions
from reservoir.common.understore.store_schemes import registered, scheme_of
from reservoir.master.mount_policy import MountPolicy


def test_every_backend_scheme_is_registered_with_its_capabilities() -> None:
    capabilities = {s.name: (s.lists, s.writes) for s in registered()}
    assert capabilities == {
        "s3": (True, True),
        "file": (True, True),
        "gs": (True, True),
        "az": (True, True),
        "abfs": (True, True),
        "abfss": (True, True),
        "http": (False, False),
        "https": (False, False),
        "hdfs": (True, True),
        "webhdfs": (True, True),
    }


def test_a_scheme_is_found_whatever_its_case() -> None:
    assert scheme_of("HTTPS://host/files/").name == "https"


def test_an_unknown_scheme_is_invalid_and_the_error_names_the_supported_shapes() -> None:
    with pytest.raises(
        InvalidArgument,
        match=r"ftp://b/x.*abfs://container@.*abfss://container@.*az://container.*"
        r"file:///dir.*gs://bucket.*https://host/prefix/.*s3://bucket/prefix",
    ):
        scheme_of("ftp://b/x")


def test_http_mounts_are_refused_unless_the_operator_lists_http() -> None:
    with pytest.raises(PermissionDenied, match="RESERVOIR_ALLOWED_SCHEMES"):
        MountPolicy("s3", resolve=lambda host: []).check("http://h/f/", MountOptions())
    MountPolicy("s3,http", resolve=lambda host: []).check("http://h/f/", MountOptions())


def test_an_http_mount_host_is_checked_as_an_endpoint() -> None:
    policy = MountPolicy("http", "http://mirror:80", resolve=lambda host: [])
    policy.check("http://mirror/data/", MountOptions())
    with pytest.raises(PermissionDenied, match="allowed endpoints"):
        policy.check("http://other/data/", MountOptions())
    with pytest.raises(PermissionDenied, match="link-local"):
        MountPolicy("http", resolve=lambda host: []).check(
            "http://169.254.169.254/latest/", MountOptions()
        )


def test_an_http_mount_takes_no_separate_endpoint_url() -> None:
    with pytest.raises(InvalidArgument, match="drop endpoint_url"):
        MountPolicy("http", resolve=lambda host: []).check(
            "http://h/f/", MountOptions(endpoint_url="http://x:1")
        )
