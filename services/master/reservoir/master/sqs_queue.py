"""One SQS queue, read with a mount's credentials (blocking boto3 calls: run them on the
under-store pool).

The endpoint is the queue URL's own scheme and host (`https://sqs.<region>.amazonaws.com`
on AWS, the local server's in tests), so no second endpoint setting is needed; the region
is the mount's, else the one in that host name, else the environment's.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from reservoir.common.errors import (
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ReservoirError,
    Unavailable,
)
from reservoir.common.models import MountOptions
from reservoir.common.understore.s3_credentials import aws_session

_AWS_HOST = re.compile(r"^sqs[.-]([a-z0-9-]+)\.amazonaws\.com")


@dataclass(frozen=True)
class QueueMessage:
    receipt: str
    body: str


class SqsQueue:
    def __init__(self, options: MountOptions, *, timeout_s: float, retries: int) -> None:
        """`timeout_s`: to connect, and past the long poll's wait, for an answer;
        `retries`: attempts of a call (botocore's standard mode, with backoff)."""
        import botocore
        from botocore.config import Config

        self.url = options.events_queue_url
        parts = urlsplit(self.url)
        aws_region = _AWS_HOST.match(parts.netloc)
        region = (
            options.region
            or (aws_region.group(1) if aws_region else "")
            or os.environ.get("AWS_DEFAULT_REGION")
            or "us-east-1"
        )
        session, anonymous = aws_session(options.credentials)
        config: dict[str, Any] = {
            "connect_timeout": timeout_s,
            "read_timeout": timeout_s,
            "retries": {"max_attempts": max(1, retries), "mode": "standard"},
        }
        if anonymous:
            config["signature_version"] = botocore.UNSIGNED
        self._sqs = session.client(
            "sqs",
            endpoint_url=f"{parts.scheme}://{parts.netloc}",
            region_name=region,
            config=Config(**config),
        )

    def receive(self, wait_s: int, batch: int, visibility_s: int) -> list[QueueMessage]:
        """Up to `batch` messages, waiting up to `wait_s` seconds for the first; hidden
        from other receivers for `visibility_s` seconds unless deleted meanwhile."""
        try:
            answer = self._sqs.receive_message(
                QueueUrl=self.url,
                MaxNumberOfMessages=batch,
                WaitTimeSeconds=wait_s,
                VisibilityTimeout=visibility_s,
            )
        except Exception as exc:
            raise self._error(exc, "receive") from exc
        return [
            QueueMessage(m["ReceiptHandle"], m.get("Body", "")) for m in answer.get("Messages", [])
        ]

    def delete(self, receipts: list[str]) -> None:
        if not receipts:
            return
        entries = [{"Id": str(i), "ReceiptHandle": r} for i, r in enumerate(receipts)]
        try:
            answer = self._sqs.delete_message_batch(QueueUrl=self.url, Entries=entries)
        except Exception as exc:
            raise self._error(exc, "delete") from exc
        if answer.get("Failed"):
            # They come back after their visibility timeout and are applied again: an
            # event is only "look again", so twice does no harm.
            raise Unavailable(f"{self.url}: {len(answer['Failed'])} messages not deleted")

    def _error(self, exc: Exception, what: str) -> ReservoirError:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        text = f"SQS {what} on {self.url}: {code or type(exc).__name__}"
        if "NonExistentQueue" in code or code == "QueueDoesNotExist":
            return NotFound(text)
        if code in ("AccessDenied", "AccessDeniedException", "InvalidClientTokenId"):
            return PermissionDenied(text)
        if code.startswith("InvalidParameter"):
            return InvalidArgument(text)
        return Unavailable(text)
