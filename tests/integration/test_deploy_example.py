"""The example training Job of deploy/k8s/examples runs as written against a real cluster:
its Python reads every file of the data set, twice, through the cache."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import yaml

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster
from tests.conftest import new_mount_path

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "examples" / "training-job.yaml"


def test_the_example_training_job_reads_its_data_set_through_the_cache(
    cluster: LocalCluster,
) -> None:
    (job,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    s3 = cluster.s3_client()
    bucket = f"ex-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    sizes = [1000 * (i + 1) for i in range(70)]  # more than one read_many batch
    for i, size in enumerate(sizes):
        s3.put_object(Bucket=bucket, Key=f"train/f{i:03d}", Body=os.urandom(size))
    root = new_mount_path()
    with Client(cluster.master_address) as rs:
        rs.mount(root, f"s3://{bucket}/train", endpoint_url=cluster.s3_endpoint)
        before = sum(s.bytes_from_cache for s in rs.worker_stats())
    # The Pod's environment, with this cluster's master in place of the Service's name.
    env = {**os.environ, "DATASET": root, "RESERVOIR_MASTER": cluster.master_address}
    env.pop("RESERVOIR_HOST", None)
    done = subprocess.run(
        [sys.executable, *container["command"][1:]],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(",")[:2] for line in lines] == [
        [f"epoch {n}: {len(sizes)} files", f" {sum(sizes)} bytes"] for n in range(2)
    ]
    with Client(cluster.master_address) as rs:
        served = sum(s.bytes_from_cache for s in rs.worker_stats()) - before
    # The second epoch came from the workers' cache.
    assert served >= sum(sizes)
