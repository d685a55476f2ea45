"""What to paste after `reservoir local up`: the S3 server's address (and, for the managed
one, its credentials) as the variables boto3 and the aws CLI read, how to put files in it,
and the `reservoir mount` line that names it."""

from __future__ import annotations

import shlex

from .cluster import DEV_CREDENTIALS, LocalCluster


def s3_env(cluster: LocalCluster) -> dict[str, str]:
    """The AWS_* variables that point boto3 (>= 1.28.57) and the aws CLI at the cluster's S3.
    An external S3's credentials are the user's own, so only its endpoint is named."""
    env = {"AWS_ENDPOINT_URL": cluster.s3_endpoint}
    if cluster.s3_managed:
        env.update(DEV_CREDENTIALS)
    return env


def exports(cluster: LocalCluster) -> str:
    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in s3_env(cluster).items())


def next_steps(cluster: LocalCluster) -> str:
    """The block `local up` prints on stderr after the master address; every line runs as
    pasted (the example names my-bucket, my-data and data.bin are the user's to change)."""
    endpoint = cluster.s3_endpoint
    return "\n".join(
        [
            f"# S3: {endpoint}   state: {cluster.state_dir}",
            "# Paste into your shell so boto3 and the aws CLI use this S3:",
            exports(cluster),
            "# Put a file in it (boto3 comes with reservoir) and mount it:",
            """python -c 'import boto3; boto3.client("s3").create_bucket(Bucket="my-bucket")'""",
            'python -c \'import boto3; boto3.client("s3").upload_file('
            '"data.bin", "my-bucket", "my-data/data.bin")\'',
            f"reservoir mount /datasets/my-data s3://my-bucket/my-data --endpoint-url {endpoint}",
            "reservoir ls /datasets/my-data",
            *_gateway_lines(cluster),
        ]
    )


def _gateway_lines(cluster: LocalCluster) -> list[str]:
    if not cluster.gateway_url:
        return []
    ca = f" --ca-bundle {cluster.credentials.ca}" if cluster.credentials else ""
    keys = " (keys: gateway_keys in cluster.json)" if cluster.credentials else ""
    return [
        f"# S3 gateway: {cluster.gateway_url}{keys}; the mount above is bucket `datasets`:",
        f"# aws --endpoint-url {cluster.gateway_url}{ca} s3 ls s3://datasets/my-data/",
    ]
