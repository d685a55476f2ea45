"""What a test or a bench asks of a local cluster's S3 server beside S3 itself: the
requests it received (by kind, and when each GET came), its injected faults and latency
(`/_reservoir/` endpoints of `reservoir.local.s3server`), and a boto3 client with the
development credentials."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from .server_processes import DEV_CREDENTIALS


class S3Hooks:
    """Mixed into LocalCluster: the calls that reach its S3 server at `s3_endpoint`."""

    s3_endpoint: str

    def s3_counts(self) -> dict[str, int]:
        """Requests the managed S3 server has received, by kind (GET, HEAD, LIST, PUT…)."""
        with urllib.request.urlopen(f"{self.s3_endpoint}/_reservoir/stats", timeout=5) as r:
            return dict(json.loads(r.read())["counts"])

    def s3_get_times(self, since: float = 0.0) -> list[float]:
        """When (wall-clock seconds) the managed S3 server received each object GET since
        `since`: rates over time, as the store saw them."""
        url = f"{self.s3_endpoint}/_reservoir/gets?since={since!r}"
        with urllib.request.urlopen(url, timeout=5) as r:
            return [float(t) for t in json.loads(r.read())["times"]]

    def s3_config(self, **params: Any) -> None:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        request = urllib.request.Request(
            f"{self.s3_endpoint}/_reservoir/config?{query}", method="POST"
        )
        urllib.request.urlopen(request, timeout=5).close()

    def s3_client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.s3_endpoint,
            aws_access_key_id=DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=DEV_CREDENTIALS["AWS_DEFAULT_REGION"],
        )
