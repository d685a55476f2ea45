"""S3 event notifications as SQS delivers them, read into object events and mount paths
(`reservoir.master.s3_events`): direct and SNS-wrapped messages, URL-encoded keys, test
events, what is not an event, and objects outside the mount."""

from __future__ import annotations

import json

import pytest

from reservoir.common.errors import InvalidArgument
from reservoir.common.models import Mount
from reservoir.master.s3_events import S3Event, parse_s3_events, path_of


def _record(name: str, key: str, bucket: str = "bkt") -> dict[str, object]:
    # As moto and S3 send it (only the fields read matter; the rest shows the shape).
    return {
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "awsRegion": "us-east-1",
        "eventName": name,
        "s3": {
            "s3SchemaVersion": "1.0",
            "bucket": {"name": bucket, "arn": f"arn:aws:s3:::{bucket}"},
            "object": {"key": key, "size": 1, "eTag": "9dd4e461268c8034f5c8564e155c67a6"},
        },
    }


def test_created_and_removed_records_become_events_with_decoded_keys() -> None:
    body = json.dumps(
        {
            "Records": [
                _record("ObjectCreated:Put", "d%2Fa+b.txt"),
                _record("ObjectRemoved:Delete", "d/c%25.bin"),
                _record("s3:ObjectCreated:CompleteMultipartUpload", "big.bin"),
                _record("LifecycleExpiration:Delete", "old.bin"),
            ]
        }
    )
    assert parse_s3_events(body) == [
        S3Event("created", "bkt", "d/a b.txt"),
        S3Event("removed", "bkt", "d/c%.bin"),
        S3Event("created", "bkt", "big.bin"),
        S3Event("removed", "bkt", "old.bin"),
    ]


def test_an_sns_wrapped_notification_is_unwrapped() -> None:
    inner = json.dumps({"Records": [_record("ObjectCreated:Copy", "x.bin")]})
    body = json.dumps({"Type": "Notification", "MessageId": "1", "Message": inner})
    assert parse_s3_events(body) == [S3Event("created", "bkt", "x.bin")]


def test_test_events_and_other_kinds_of_record_name_no_object() -> None:
    assert parse_s3_events(json.dumps({"Event": "s3:TestEvent", "Bucket": "bkt"})) == []
    restore = json.dumps({"Records": [_record("ObjectRestore:Completed", "x.bin")]})
    assert parse_s3_events(restore) == []
    other = dict(_record("ObjectCreated:Put", "x.bin"), eventSource="aws:sns")
    assert parse_s3_events(json.dumps({"Records": [other]})) == []


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[1, 2]",
        json.dumps({"hello": "world"}),
        json.dumps(
            {
                "Records": [
                    {
                        "eventSource": "aws:s3",
                        "eventName": "ObjectCreated:Put",
                        "s3": {"bucket": {}},
                    }
                ]
            }
        ),
    ],
)
def test_a_message_that_is_not_an_s3_notification_is_refused(body: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_s3_events(body)


MOUNT = Mount("/data/set", "s3://bkt/imagenet/", created_ms=1)


@pytest.mark.parametrize(
    ("bucket", "key", "path"),
    [
        ("bkt", "imagenet/train/0.jpg", "/data/set/train/0.jpg"),
        ("bkt", "imagenet/a b.txt", "/data/set/a b.txt"),
        ("bkt", "other/train/0.jpg", None),  # another prefix on the same queue
        ("elsewhere", "imagenet/train/0.jpg", None),  # another bucket
        ("bkt", "imagenet/train/", None),  # a directory marker
        ("bkt", "imagenet/", None),
        ("bkt", "imagenet/../x", None),  # no Reservoir path says that
        ("bkt", "imagenet/a//b", None),
    ],
)
def test_an_event_maps_to_its_path_below_the_mount_or_to_none(
    bucket: str, key: str, path: str | None
) -> None:
    assert path_of(MOUNT, bucket, key) == path


def test_a_mount_of_a_whole_bucket_maps_every_key() -> None:
    whole = Mount("/b", "s3://bkt/", created_ms=1)
    assert path_of(whole, "bkt", "top.bin") == "/b/top.bin"
