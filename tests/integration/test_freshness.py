"""Freshness against a real cluster (etcd, the local S3 server, a master, workers as
processes): objects put, overwritten and deleted in S3 are found by the leader's sync of
an `interval:1s` mount and shown by `ls`/`stat`/`read` without anyone listing by hand;
with an SQS queue of the bucket's event notifications (moto delivers them, as S3 does)
they are applied from the events, without a single LIST; an overwritten object never
reads as a mix of old and new bytes."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from reservoir.client import Client
from reservoir.common.errors import NotFound
from reservoir.common.metadata.metadata_store import open_metadata_store
from reservoir.local.cluster import LocalCluster
from reservoir.local.server_processes import DEV_CREDENTIALS
from reservoir.master.interval_sync import SyncRecord, SyncRecords
from tests.cli_runs import run_cli as _cli
from tests.conftest import LEASE_TTL_S, new_mount_path
from tests.eventually import eventually

BLOCK = 64 * 1024


def _record(cluster: LocalCluster, mount_path: str) -> SyncRecord | None:
    """The leader's record of the mount's last interval sync, as etcd has it."""

    async def read() -> SyncRecord | None:
        store = open_metadata_store(cluster.metadata_url, 5, cluster.etcd_settings())
        try:
            return await SyncRecords(store).get(mount_path)
        finally:
            await store.close()

    return asyncio.run(read())


def _names(client: Client, path: str) -> set[str]:
    return {i.path.rsplit("/", 1)[1] for i in client.ls(path)}


@pytest.fixture
def short_ttl_client(cluster: LocalCluster) -> Iterator[Client]:
    """A client that keeps file info for 0.2 s (default 30 s): what it shows is what the
    master knows, a moment later."""
    with Client(config=cluster.client_config(file_info_ttl_s=0.2)) as c:
        yield c


def test_puts_overwrites_and_deletes_in_s3_are_found_by_the_leaders_interval_sync(
    cluster: LocalCluster, bucket: str, short_ttl_client: Client
) -> None:
    s3, c = cluster.s3_client(), short_ttl_client
    old, new = os.urandom(2 * BLOCK), os.urandom(2 * BLOCK + 5)
    for key, body in (("d/keep.bin", b"k"), ("d/old.bin", old), ("d/gone.bin", b"g")):
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    root = new_mount_path()
    c.mount(
        root,
        f"s3://{bucket}/d/",
        endpoint_url=cluster.s3_endpoint,
        block_size=BLOCK,
        metadata_sync="interval:1s",
    )
    try:
        assert _names(c, root) == {"keep.bin", "old.bin", "gone.bin"}
        assert c.read(f"{root}/old.bin") == old
        first = eventually(lambda: _record(cluster, root), what="the mount's first sync")
        assert first.baseline and first.error == ""

        s3.put_object(Bucket=bucket, Key="d/sub/new.bin", Body=b"new")
        s3.put_object(Bucket=bucket, Key="d/old.bin", Body=new)
        s3.delete_object(Bucket=bucket, Key="d/gone.bin")
        # The three changes may fall into one pass or several: add up what the passes
        # after the first found until all three are accounted for.
        seen: dict[int, SyncRecord] = {}

        def found_all() -> bool:
            record = _record(cluster, root)
            if record is not None and record.started_ms > first.started_ms:
                seen[record.started_ms] = record
            totals = [
                sum(getattr(r, k) for r in seen.values()) for k in ("added", "changed", "removed")
            ]
            return totals == [1, 1, 1]

        eventually(found_all, what="passes that found the put, the overwrite and the delete")
        found = sorted(p for r in seen.values() for p in r.found)
        assert found == [f"{root}/old.bin", f"{root}/sub/new.bin"]
        assert all(r.error == "" and not r.baseline for r in seen.values())

        time.sleep(c.config.file_info_ttl_s)  # what the client knew has expired
        assert _names(c, root) == {"keep.bin", "old.bin", "sub"}
        assert c.read(f"{root}/sub/new.bin") == b"new"
        assert c.read(f"{root}/old.bin") == new
        with pytest.raises(NotFound):
            c.stat(f"{root}/gone.bin")
    finally:
        c.unmount(root)


def test_an_object_overwritten_in_s3_reads_as_only_its_new_bytes_after_the_sync(
    cluster: LocalCluster, bucket: str, short_ttl_client: Client
) -> None:
    s3, c = cluster.s3_client(), short_ttl_client
    # The same size: only the ETag tells the versions apart, and every block of the old
    # one is cached on the workers when the new one lands.
    old, new = os.urandom(3 * BLOCK), os.urandom(3 * BLOCK)
    s3.put_object(Bucket=bucket, Key="f.bin", Body=old)
    root = new_mount_path()
    c.mount(
        root,
        f"s3://{bucket}/",
        endpoint_url=cluster.s3_endpoint,
        block_size=BLOCK,
        metadata_sync="interval:1s",
    )
    try:
        assert c.read(f"{root}/f.bin") == old
        before = eventually(lambda: _record(cluster, root), what="the mount's first sync")
        s3.put_object(Bucket=bucket, Key="f.bin", Body=new)

        def changed() -> SyncRecord | None:
            record = _record(cluster, root)
            return record if record is not None and record.changed == 1 else None

        assert eventually(changed, what="a sync that found the overwrite").started_ms > (
            before.started_ms
        )
        time.sleep(c.config.file_info_ttl_s)
        assert c.read(f"{root}/f.bin") == new
        for index in range(3):
            assert c.read(f"{root}/f.bin", index * BLOCK, BLOCK) == new[index * BLOCK :][:BLOCK]
    finally:
        c.unmount(root)


def _sqs(cluster: LocalCluster) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=cluster.s3_endpoint,
        aws_access_key_id=DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=DEV_CREDENTIALS["AWS_DEFAULT_REGION"],
    )


def test_s3_event_notifications_make_puts_overwrites_and_deletes_visible_without_a_listing(
    cluster: LocalCluster, bucket: str, short_ttl_client: Client
) -> None:
    s3, sqs, c = cluster.s3_client(), _sqs(cluster), short_ttl_client
    queue = sqs.create_queue(QueueName=bucket)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    # moto's S3 sends the bucket's events to the queue, as S3 does (server mode included).
    s3.put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={
            "QueueConfigurations": [
                {"QueueArn": arn, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}
            ]
        },
    )
    old, new = os.urandom(2 * BLOCK), os.urandom(2 * BLOCK)
    s3.put_object(Bucket=bucket, Key="d/keep.bin", Body=b"k")
    s3.put_object(Bucket=bucket, Key="d/old.bin", Body=old)
    root = new_mount_path()
    # "never": listings are trusted for good, so whatever shows up came from the events.
    c.mount(
        root,
        f"s3://{bucket}/d/",
        endpoint_url=cluster.s3_endpoint,
        block_size=BLOCK,
        metadata_sync="never",
        events_queue_url=queue,
    )
    try:
        assert {m.path: m.options.events_queue_url for m in c.mounts()}[root] == queue
        assert _names(c, root) == {"keep.bin", "old.bin"}
        assert c.read(f"{root}/old.bin") == old
        lists = cluster.s3_counts().get("LIST", 0)

        s3.put_object(Bucket=bucket, Key="d/new.bin", Body=b"new")
        s3.put_object(Bucket=bucket, Key="d/deeper/down.bin", Body=b"down")
        eventually(lambda: "new.bin" in _names(c, root), what="the put, from its event")
        # The new directory shows in its parent's listing (a stat of the file before its
        # event would list the directory: this waits on what the event did).
        eventually(lambda: "deeper" in _names(c, root), what="a put in a new directory")
        assert c.read(f"{root}/new.bin") == b"new"

        s3.put_object(Bucket=bucket, Key="d/old.bin", Body=new)
        eventually(lambda: c.read(f"{root}/old.bin") == new, what="the overwrite, from its event")

        s3.delete_object(Bucket=bucket, Key="d/keep.bin")
        eventually(lambda: "keep.bin" not in _names(c, root), what="the delete, from its event")
        time.sleep(c.config.file_info_ttl_s)  # the listing before last is forgotten
        with pytest.raises(NotFound):
            c.stat(f"{root}/keep.bin")
        assert cluster.s3_counts().get("LIST", 0) == lists  # learnt from events alone
        # The new directory was never listed: its first read lists it (it may hold more
        # than the events have told).
        assert c.stat(f"{root}/deeper/down.bin").size == len(b"down")
        # Every message applied was deleted from the queue.
        eventually(
            lambda: (
                sqs.get_queue_attributes(
                    QueueUrl=queue,
                    AttributeNames=[
                        "ApproximateNumberOfMessages",
                        "ApproximateNumberOfMessagesNotVisible",
                    ],
                )["Attributes"]
                == {
                    "ApproximateNumberOfMessages": "0",
                    "ApproximateNumberOfMessagesNotVisible": "0",
                }
            ),
            what="an empty queue",
        )
    finally:
        c.unmount(root)


def test_reservoir_mount_takes_an_events_queue_and_refuses_what_is_not_a_queue_url(
    cluster: LocalCluster, bucket: str
) -> None:
    queue = _sqs(cluster).create_queue(QueueName=bucket)["QueueUrl"]
    root = new_mount_path()
    mount = ("mount", root, f"s3://{bucket}/", "--endpoint-url", cluster.s3_endpoint)
    bad = _cli(cluster, *mount, "--events-queue", "sqs://queue")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1
    assert "events_queue_url must be an SQS queue URL" in bad.stderr
    done = _cli(cluster, "--json", *mount, "--events-queue", queue)
    try:
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["events_queue_url"] == queue
        mounts = json.loads(_cli(cluster, "--json", "mounts").stdout)
        assert {m["path"]: m["events_queue_url"] for m in mounts}[root] == queue
    finally:
        _cli(cluster, "unmount", root)


@pytest.fixture
def two_masters(tmp_path: Path) -> Iterator[LocalCluster]:
    """A cluster of its own with a standby master, for a test that kills the leader."""
    c = LocalCluster.up(
        tmp_path / "cluster",
        workers=1,
        masters=2,
        lease_ttl=LEASE_TTL_S,
        env={"RESERVOIR_MASTER_LEASE_TTL": "2"},
    )
    try:
        yield c
    finally:
        c.down()


def _leader_process(c: Client, cluster: LocalCluster) -> str:
    (leader,) = [m for m in c.masters() if m.role == "leader"]
    (name,) = [
        n
        for n in cluster.master_names()
        if f"127.0.0.1:{cluster.processes[n].port}" == leader.address
    ]
    return name


def test_the_next_leader_goes_on_following_the_event_queue_and_syncing_on_schedule(
    two_masters: LocalCluster,
) -> None:
    cluster = two_masters
    s3, sqs = cluster.s3_client(), _sqs(cluster)
    s3.create_bucket(Bucket="fresh")
    queue = sqs.create_queue(QueueName="fresh")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])
    s3.put_bucket_notification_configuration(
        Bucket="fresh",
        NotificationConfiguration={
            "QueueConfigurations": [
                {"QueueArn": arn["Attributes"]["QueueArn"], "Events": ["s3:ObjectCreated:*"]}
            ]
        },
    )
    s3.put_object(Bucket="fresh", Key="ev/a.bin", Body=b"a")
    s3.put_object(Bucket="fresh", Key="iv/a.bin", Body=b"a")
    with Client(config=cluster.client_config(file_info_ttl_s=0.2)) as c:
        endpoint = cluster.s3_endpoint
        c.mount("/ev", "s3://fresh/ev/", endpoint_url=endpoint, metadata_sync="never",
                events_queue_url=queue)  # fmt: skip
        c.mount("/iv", "s3://fresh/iv/", endpoint_url=endpoint, metadata_sync="interval:1s")
        assert _names(c, "/ev") == {"a.bin"}
        eventually(lambda: _record(cluster, "/iv"), what="the interval mount's first sync")

        cluster.kill(_leader_process(c, cluster))
        killed_ms = int(time.time() * 1000)
        s3.put_object(Bucket="fresh", Key="ev/b.bin", Body=b"b")
        # The standby leads within its lease TTL and follows the queue from there on: the
        # event sent while no one led waited in the queue (or, when the dead leader's long
        # poll took it, comes back after RESERVOIR_EVENTS_VISIBILITY, 10 s).
        eventually(lambda: "b.bin" in _names(c, "/ev"), what="the event, by the next leader")

        def synced_since_the_kill() -> bool:
            record = _record(cluster, "/iv")
            return record is not None and record.started_ms > killed_ms

        eventually(synced_since_the_kill, what="a sync by the next leader")
        record = _record(cluster, "/iv")
        assert record is not None and not record.baseline and record.error == ""
