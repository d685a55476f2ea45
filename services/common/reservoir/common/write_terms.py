"""What a writer asks of a file it writes beyond its bytes: the metadata stored with the
object, and a condition on what it replaces (S3's If-None-Match: * and If-Match), which
the master checks in one step with the publish."""

from __future__ import annotations

from dataclasses import dataclass, field

from reservoir.common.object_metadata import ObjectMetadata


@dataclass(frozen=True)
class WriteTerms:
    metadata: ObjectMetadata = field(default_factory=ObjectMetadata)
    if_absent: bool = False  # published only if no file is at the path then (else FileExistsError)
    if_match: str = ""  # published only if the file there has this ETag (else Conflict)

    @property
    def conditional(self) -> bool:
        return self.if_absent or bool(self.if_match)
