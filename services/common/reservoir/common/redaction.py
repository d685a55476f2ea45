"""Secrets never reach a log line, whatever level the application logs at.

botocore logs every request it signs at DEBUG: its headers (Authorization: the access key
id and the signature; X-Amz-Security-Token), pre-signed query strings and the string it
signed. A filter on the AWS SDK's and its HTTP stack's loggers rewrites those values
before any handler sees the record.
"""

from __future__ import annotations

import logging
import re

_PATTERNS = [
    (re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*b?['\"]?)[^'\"\n]+"), r"\1<redacted>"),
    (
        re.compile(r"(?i)(x-amz-security-token['\"]?\s*[:=]\s*b?['\"]?)[^'\",&\s]+"),
        r"\1<redacted>",
    ),
    (re.compile(r"(?i)((?:x-amz-)?signature=)[0-9a-f]+"), r"\1<redacted>"),
    (re.compile(r"(?i)(x-amz-credential=|credential=)[^/&,\s'\"]+"), r"\1<redacted>"),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), "<redacted-key-id>"),
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1<redacted>"),
]
LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3", "aiobotocore")


def redact(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class SecretRedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


_FILTER = SecretRedactingFilter()


def install() -> None:
    """Puts the filter on the AWS SDK's loggers and every child logger they have made so
    far (a logger's filters do not apply to its children's records). Idempotent; call it
    again after the SDK has imported more of itself."""
    names = [
        name for name in list(logging.Logger.manager.loggerDict) if name.split(".", 1)[0] in LOGGERS
    ]
    for name in {*LOGGERS, *names}:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
