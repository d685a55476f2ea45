import pytest

from reservoir.common.errors import InvalidArgument, PermissionDenied
from reservoir.common.models import MountOptions
from reservoir.master.mount_policy import MountPolicy


def _policy(
    schemes: str = "s3", endpoints: str = "", dns: dict[str, list[str]] | None = None
) -> MountPolicy:
    table = dns or {}
    return MountPolicy(schemes, endpoints, resolve=lambda host: table.get(host, []))


def test_file_mounts_are_refused_unless_the_operator_lists_file() -> None:
    with pytest.raises(PermissionDenied, match="RESERVOIR_ALLOWED_SCHEMES"):
        _policy().check("file:///etc", MountOptions())
    _policy("s3,file").check("file:///data", MountOptions())


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://169.254.169.254",
        "http://[fe80::1]:80",
        "http://metadata.google.internal",
        "http://100.100.100.200",
        "http://innocent.example",  # resolves to a link-local address
    ],
)
def test_link_local_and_metadata_endpoints_are_always_refused(endpoint: str) -> None:
    policy = _policy("s3", dns={"innocent.example": ["169.254.169.254"]})
    with pytest.raises(PermissionDenied):
        policy.check("s3://bucket/", MountOptions(endpoint_url=endpoint))


def test_an_allow_list_admits_only_its_endpoints() -> None:
    policy = _policy(endpoints="http://s3.internal:9000, minio:9000")
    policy.check("s3://b/", MountOptions(endpoint_url="http://s3.internal:9000"))
    policy.check("s3://b/", MountOptions(endpoint_url="http://minio:9000/"))
    with pytest.raises(PermissionDenied, match="RESERVOIR_ALLOWED_ENDPOINTS"):
        policy.check("s3://b/", MountOptions(endpoint_url="http://s3.internal:9001"))


def test_an_endpoint_that_is_not_a_url_is_invalid() -> None:
    with pytest.raises(InvalidArgument):
        _policy().check("s3://b/", MountOptions(endpoint_url="ftp://x"))


def test_with_an_allow_list_the_public_aws_endpoint_must_be_listed_too() -> None:
    with pytest.raises(PermissionDenied, match="public endpoint"):
        _policy(endpoints="http://minio:9000").check("s3://b/", MountOptions())
    _policy(endpoints="https://s3.amazonaws.com").check("s3://b/", MountOptions())


def test_a_webhdfs_namenode_is_checked_as_the_mount_endpoint() -> None:
    policy = _policy("webhdfs,hdfs", endpoints="http://namenode:9870")
    policy.check("webhdfs://namenode:9870/data/", MountOptions())
    policy.check("hdfs://namenode:9870/data/", MountOptions())
    with pytest.raises(PermissionDenied, match="RESERVOIR_ALLOWED_ENDPOINTS"):
        policy.check("webhdfs://other:9870/data/", MountOptions())
    with pytest.raises(PermissionDenied, match="link-local"):
        _policy("webhdfs").check("webhdfs://169.254.169.254:9870/", MountOptions())
    with pytest.raises(InvalidArgument, match="drop endpoint_url"):
        policy.check("webhdfs://namenode:9870/", MountOptions(endpoint_url="http://namenode:9870"))
