"""The write half of `S3UnderStore`: whole objects, multipart uploads, copies, deletes.

Apart from the reads only for size: the store answers every call of the interface and
hands its writes to this, on the same boto3 client, so they sign with the same credentials
and name the same endpoint in their errors. An upload is created and completed (or
aborted) by the master, which records it in etcd; its parts are uploaded by the workers
the writer sends them to (or, on a cluster with no worker, by the writer). All calls
block: callers run them on a pool.
"""

from __future__ import annotations

import datetime
import email.utils
import time
from typing import TYPE_CHECKING, Any

from reservoir.common.object_metadata import ObjectMetadata
from reservoir.common.understore.under_store import NO_METADATA, Keys, ObjectInfo, Part, Parts

if TYPE_CHECKING:
    from reservoir.common.understore.s3_under_store import S3UnderStore


class S3Writes:
    """Writes of one S3 under-store's objects (keys relative to the store's root, as for
    reads)."""

    def __init__(self, store: S3UnderStore, client: Any) -> None:
        self._store = store
        self._s3 = client
        self._bucket = store.bucket
        self._prefix = store.prefix

    def _key(self, key: str) -> str:
        return self._prefix + key

    def create_upload(self, key: str, metadata: ObjectMetadata = NO_METADATA) -> str:
        try:
            reply = self._s3.create_multipart_upload(
                Bucket=self._bucket, Key=self._key(key), **metadata.store_args()
            )
        except Exception as exc:
            raise self._store._error(exc, f"start upload of {self._store.uri_of(key)}") from exc
        return str(reply["UploadId"])

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        try:
            reply = self._s3.upload_part(
                Bucket=self._bucket,
                Key=self._key(key),
                UploadId=upload_id,
                PartNumber=number,
                Body=data,
            )
        except Exception as exc:
            raise self._store._error(
                exc, f"upload part {number} of {self._store.uri_of(key)}"
            ) from exc
        return Part(number, str(reply["ETag"]))

    def put(self, key: str, data: bytes, metadata: ObjectMetadata = NO_METADATA) -> ObjectInfo:
        """The whole object in one PUT (its ETag is its MD5), described from the answer:
        no HEAD after it."""
        try:
            reply = self._s3.put_object(
                Bucket=self._bucket, Key=self._key(key), Body=data, **metadata.store_args()
            )
        except Exception as exc:
            raise self._store._error(exc, f"put {self._store.uri_of(key)}") from exc
        return ObjectInfo(key, len(data), _answered_ms(reply), str(reply["ETag"]).strip('"'))

    def complete_upload(
        self, key: str, upload_id: str, parts: Parts, metadata: ObjectMetadata = NO_METADATA
    ) -> ObjectInfo:
        """Makes the object visible in the store; its metadata as the store has it now.
        `metadata`: what the upload was created with (an empty file is one PUT)."""
        what = f"complete upload of {self._store.uri_of(key)}"
        try:
            if parts:
                self._s3.complete_multipart_upload(
                    Bucket=self._bucket,
                    Key=self._key(key),
                    UploadId=upload_id,
                    MultipartUpload={
                        "Parts": [{"PartNumber": p.number, "ETag": p.etag} for p in parts]
                    },
                )
            else:
                # S3 refuses an upload of no parts: an empty file is one empty PUT.
                self._s3.abort_multipart_upload(
                    Bucket=self._bucket, Key=self._key(key), UploadId=upload_id
                )
                self._s3.put_object(
                    Bucket=self._bucket, Key=self._key(key), Body=b"", **metadata.store_args()
                )
        except Exception as exc:
            raise self._store._error(exc, what) from exc
        return self._store.head(key)

    def abort_upload(self, key: str, upload_id: str) -> None:
        """Drops the upload and its parts; one already gone (completed or aborted) is
        not an error."""
        import botocore.exceptions as bce

        try:
            self._s3.abort_multipart_upload(
                Bucket=self._bucket, Key=self._key(key), UploadId=upload_id
            )
        except bce.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchUpload":
                return
            raise self._store._error(exc, f"abort upload of {self._store.uri_of(key)}") from exc
        except Exception as exc:
            raise self._store._error(exc, f"abort upload of {self._store.uri_of(key)}") from exc

    def open_uploads(self, key: str) -> Keys:
        """The ids of the uploads to `key` not yet completed or aborted."""
        try:
            reply = self._s3.list_multipart_uploads(Bucket=self._bucket, Prefix=self._key(key))
        except Exception as exc:
            raise self._store._error(exc, f"list uploads of {self._store.uri_of(key)}") from exc
        return [u["UploadId"] for u in reply.get("Uploads", ()) if u["Key"] == self._key(key)]

    def copy(self, source: str, destination: str, if_match: str = "") -> ObjectInfo:
        """A server-side copy (managed: objects over 5 GiB are copied in parts); with
        `if_match`, only of the source with that ETag (Conflict when it has another)."""
        try:
            self._s3.copy(
                {"Bucket": self._bucket, "Key": self._key(source)},
                self._bucket,
                self._key(destination),
                # Quoted, as HTTP has entity tags (some servers compare them verbatim).
                ExtraArgs={"CopySourceIfMatch": f'"{if_match.strip(chr(34))}"'}
                if if_match
                else None,
            )
        except Exception as exc:
            raise self._store._error(
                exc, f"copy {self._store.uri_of(source)} to {self._store.uri_of(destination)}"
            ) from exc
        return self._store.head(destination)

    def delete(self, keys: Keys) -> None:
        """Deletes the objects (1000 per request); a missing one is not an error."""
        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            try:
                reply = self._s3.delete_objects(
                    Bucket=self._bucket,
                    Delete={"Objects": [{"Key": self._key(k)} for k in batch], "Quiet": True},
                )
            except Exception as exc:
                raise self._store._error(exc, f"delete from {self._store.uri}") from exc
            failed = reply.get("Errors") or []
            if failed:
                raise self._store._error(
                    _client_error(failed[0]), f"delete {self._store.uri_of(failed[0]['Key'])}"
                )


def _answered_ms(reply: dict[str, Any]) -> int:
    """When the store answered (its Date header, to the second; now without one): the
    object's modification time within the second."""
    date = reply.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date", "")
    try:
        when: datetime.datetime = email.utils.parsedate_to_datetime(date)
    except (TypeError, ValueError):
        return int(time.time() * 1000)
    return int(when.timestamp() * 1000)


def _client_error(error: dict[str, Any]) -> Exception:
    import botocore.exceptions as bce

    return bce.ClientError({"Error": error}, "DeleteObjects")  # type: ignore[typeddict-item]
