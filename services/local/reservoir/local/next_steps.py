"""What to paste after `reservoir local up`: the S3 server's address (and, for the managed
one, its credentials) as the variables boto3 and the aws CLI read, the state directory
when it is not the one `reservoir` and `Client()` look in, how to put files in the S3,
the `reservoir mount` line that names it, and how to reach the gateway.

Every line runs as pasted into bash: Python is this process's own interpreter (the one
that has boto3; a bare `python` may be another), `reservoir` the one beside it unless it
is what PATH finds, and a secure gateway's key is read from its file, not printed.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

from reservoir.client.discovery import STATE_DIR_ENV, default_state_dir

from .cluster import DEV_CREDENTIALS, LocalCluster
from .gateway_keys import READER_KEY, gateway_keys_file

# The mount the printed lines make, and the gateway bucket it is (its first component).
MOUNT, BUCKET, PREFIX = "/datasets/my-data", "datasets", "my-data/"


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
    python = shlex.quote(sys.executable)
    reservoir = _reservoir_command()
    return "\n".join(
        [
            f"# S3: {endpoint}   state: {cluster.state_dir}",
            "# Paste into your shell so boto3 and the aws CLI use this S3:",
            exports(cluster),
            *_state_dir_lines(cluster),
            "# Put a file in it (boto3 comes with reservoir) and mount it:",
            f"""{python} -c 'import boto3; boto3.client("s3").create_bucket(Bucket="my-bucket")'""",
            f'{python} -c \'import boto3; boto3.client("s3").upload_file('
            '"data.bin", "my-bucket", "my-data/data.bin")\'',
            f"{reservoir} mount {MOUNT} s3://my-bucket/my-data --endpoint-url {endpoint}",
            f"{reservoir} ls {MOUNT}",
            *_gateway_lines(cluster, python),
        ]
    )


def _reservoir_command() -> str:
    """`reservoir` when PATH finds this installation's; else that one's full path (a venv
    not activated, as after scripts/demo.sh)."""
    beside = Path(sys.executable).parent / "reservoir"
    found = shutil.which("reservoir")
    if not beside.exists() or (found is not None and Path(found).resolve() == beside.resolve()):
        return "reservoir"
    return shlex.quote(str(beside))


def _state_dir_lines(cluster: LocalCluster) -> list[str]:
    state = cluster.state_dir.resolve()
    if state == default_state_dir().resolve():
        return []
    return [
        "# ... and so reservoir and Client() find this cluster (not in the default state dir):",
        f"export {STATE_DIR_ENV}={shlex.quote(str(state))}",
    ]


def _gateway_lines(cluster: LocalCluster, python: str) -> list[str]:
    url = cluster.gateway_url
    if not url:
        return []
    creds = cluster.credentials
    # A secure gateway checks signatures: the reader's key, its secret read from the file
    # (kept out of the terminal's scrollback), and the cluster's CA for its HTTPS.
    env = f"AWS_ENDPOINT_URL={url}"
    if creds is not None:
        keys = shlex.quote(str(gateway_keys_file(cluster.state_dir)))
        secret = f'"$(awk \'$1 == "{READER_KEY}" {{print $2}}\' {keys})"'
        env += (
            f" AWS_ACCESS_KEY_ID={READER_KEY} AWS_SECRET_ACCESS_KEY={secret}"
            f" AWS_CA_BUNDLE={shlex.quote(str(creds.ca))}"
        )
    listing = (
        f'c = boto3.client("s3"); r = c.list_objects_v2(Bucket="{BUCKET}", Prefix="{PREFIX}"); '
        'print("\\n".join(o["Key"] for o in r.get("Contents", [])))'
    )
    keys_note = f" (its keys: {gateway_keys_file(cluster.state_dir)})" if creds else ""
    return [
        f"# S3 gateway: {url}{keys_note}; the mount above is bucket `{BUCKET}`:",
        f"{env} {python} -c 'import boto3; {listing}'",
        f"# or with the aws CLI: {env} aws s3 ls s3://{BUCKET}/{PREFIX}",
    ]
