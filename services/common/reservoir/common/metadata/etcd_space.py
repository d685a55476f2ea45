"""etcd's space alarm, in words an operator can act on.

When etcd's database reaches its backend quota (--quota-backend-bytes, 2 GiB by default)
a member raises the NOSPACE alarm and the whole cluster refuses every write with
"etcdserver: mvcc: database space exceeded" (gRPC RESOURCE_EXHAUSTED) until the alarm is
disarmed. Reads still work. Every part of Reservoir that meets it says so the same way:
`ResourceExhausted` (RESOURCE_EXHAUSTED on the wire) starting "etcd is out of space".
"""

from __future__ import annotations

from reservoir.common.errors import ResourceExhausted

# etcdserverpb.AlarmType
NOSPACE = 1
CORRUPT = 2

WHAT_TO_DO = (
    "writes are refused until space is freed: compact etcd's history (etcdctl compact "
    "REVISION, the revision `etcdctl endpoint status -w json` shows), defragment every "
    "member (etcdctl defrag --cluster), then disarm the alarm (etcdctl alarm disarm); "
    "or restart the members with a larger --quota-backend-bytes"
)


def is_out_of_space(status: str, message: str) -> bool:
    """Whether an etcd error (its gRPC status name and message) is the space alarm. By the
    message: etcd says RESOURCE_EXHAUSTED for "too many requests" too."""
    return status in ("RESOURCE_EXHAUSTED", "") and "database space exceeded" in message


def out_of_space(detail: str) -> ResourceExhausted:
    return ResourceExhausted(f"etcd is out of space: {detail}; {WHAT_TO_DO}")
