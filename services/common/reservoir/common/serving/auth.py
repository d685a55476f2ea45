"""Who may call what: bearer tokens with roles, checked by one server interceptor.

Roles:
- `admin`: everything a reader may, plus mount, unmount, metadata loads, load jobs,
  pin, unpin, TTLs and free.
- `reader`: stat, ls, read, report, list and watch jobs, list cache rules, worker stats.
- `writer`: everything a reader may, plus writing, renaming and removing files on
  writable mounts (checkpoints); `admin` may too.
- `worker`: the cluster's own processes: fetch mounts, report blocks (a worker token
  names the worker it speaks for, and may report only for it), drive loads and frees
  on workers.

A server keeps only the SHA-256 of each token it accepts, in a file of lines
`ROLE SHA256 [SUBJECT]` (`#` starts a comment). Tokens are long random strings, so a plain
hash is enough to make the file useless to whoever reads it. No token or an unknown one:
UNAUTHENTICATED; a known token whose role may not call the method: PERMISSION_DENIED. The
health service stays open for probes.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from reservoir.common import worker_methods as worker
from reservoir.common.blocks.data_protection import token_id
from reservoir.common.errors import (
    InvalidArgument,
    PermissionDenied,
    ReservoirError,
    Unauthenticated,
)
from reservoir.common.rpc import abort_with

ROLES = ("admin", "reader", "worker", "writer")
_READ = frozenset({"reader", "admin", "worker", "writer"})
_WRITE = frozenset({"writer", "admin"})
_ADMIN = frozenset({"admin"})
_CLUSTER = frozenset({"worker"})


@dataclass(frozen=True, slots=True)
class Rule:
    roles: frozenset[str]
    # A request field that must equal the caller's subject (a worker speaks for itself).
    subject_field: str = ""


_MASTER = "/reservoir.v1.MasterService/"
# The method a worker's data port answers (its block ranges are ReadBlock's, another way).
READ_BLOCK = worker.READ_BLOCK
RULES: dict[str, Rule] = {
    _MASTER + "Mount": Rule(_ADMIN),
    _MASTER + "Unmount": Rule(_ADMIN),
    _MASTER + "LoadMetadata": Rule(_ADMIN),
    _MASTER + "SubmitLoad": Rule(_ADMIN),
    _MASTER + "CancelJob": Rule(_ADMIN),
    _MASTER + "Pin": Rule(_ADMIN),
    _MASTER + "Unpin": Rule(_ADMIN),
    _MASTER + "SetTtl": Rule(_ADMIN),
    _MASTER + "ClearTtl": Rule(_ADMIN),
    _MASTER + "Free": Rule(_ADMIN),
    _MASTER + "ListCacheRules": Rule(_READ),
    _MASTER + "ListMounts": Rule(_READ),
    _MASTER + "GetFileInfo": Rule(_READ),
    _MASTER + "GetFileInfos": Rule(_READ),
    _MASTER + "ListDirectory": Rule(_READ),
    _MASTER + "ListWorkers": Rule(_READ),
    _MASTER + "ListMasters": Rule(_READ),
    _MASTER + "Report": Rule(_READ),
    _MASTER + "Locality": Rule(_READ),
    _MASTER + "GetJob": Rule(_READ),
    _MASTER + "WatchJob": Rule(_READ),
    _MASTER + "ListJobs": Rule(_READ),
    _MASTER + "ReportBlocks": Rule(_CLUSTER, subject_field="worker_id"),
    # An operator drains any worker; a worker drains itself (on SIGTERM), no other.
    _MASTER + "Drain": Rule(_ADMIN | _CLUSTER, subject_field="worker_id"),
    _MASTER + "Undrain": Rule(_ADMIN),
    _MASTER + "ApplyDataset": Rule(_ADMIN),
    _MASTER + "DeleteDataset": Rule(_ADMIN),
    _MASTER + "ListDatasets": Rule(_READ),
    _MASTER + "GetDataset": Rule(_READ),
    READ_BLOCK: Rule(_READ),
    worker.READ_BLOCKS: Rule(_READ),
    worker.READ_SMALL: Rule(_READ),
    worker.GET_STATS: Rule(_READ),
    worker.LOAD_BLOCKS: Rule(_ADMIN | _CLUSTER),
    worker.FREE_BLOCKS: Rule(_ADMIN | _CLUSTER),
    # A written file's blocks: from its writer only (they stay where they are staged).
    worker.WRITE_PART: Rule(_WRITE),
    worker.COMMIT_BLOCKS: Rule(_WRITE),
    # A renamed file's blocks kept under its new id: what the master asks, and no one else.
    worker.COPY_BLOCKS: Rule(_CLUSTER),
    # Blocks copied from a peer (drains, fills): what the master asks.
    worker.PULL_BLOCKS: Rule(_ADMIN | _CLUSTER),
    **{
        _MASTER + method: Rule(_WRITE)
        for method in (
            "BeginWrite",
            "KeepWrite",
            "PublishWrite",
            "AbortWrite",
            "Remove",
            "Rename",
            "MakeDirs",
        )
    },
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": Rule(_READ),
}
OPEN_PREFIXES = ("/grpc.health.v1.Health/",)


def new_token() -> str:
    return "rsv_" + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    role: str
    subject: str = ""


class TokenTable:
    """The tokens a server accepts, by hash."""

    def __init__(self, entries: dict[str, Principal]) -> None:
        self._by_hash = entries
        # The data port's token proofs name an entry by an id derived from its hash.
        self._by_id = {
            token_id(bytes.fromhex(digest)): (bytes.fromhex(digest), principal)
            for digest, principal in entries.items()
        }

    @classmethod
    def parse(cls, lines: Iterable[str], source: str = "tokens") -> TokenTable:
        entries: dict[str, Principal] = {}
        for number, raw in enumerate(lines, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) not in (2, 3) or parts[0] not in ROLES or len(parts[1]) != 64:
                raise InvalidArgument(
                    f"{source} line {number}: expected 'ROLE SHA256 [SUBJECT]' "
                    f"with ROLE one of {', '.join(ROLES)}"
                )
            entries[parts[1].lower()] = Principal(parts[0], parts[2] if len(parts) == 3 else "")
        return cls(entries)

    @classmethod
    def load(cls, path: str) -> TokenTable:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise InvalidArgument(f"cannot read tokens file {path}: {exc.strerror}") from exc
        return cls.parse(text.splitlines(), path)

    def principal(self, token: str) -> Principal | None:
        return self._by_hash.get(token_hash(token))

    def entry(self, token_id: bytes) -> tuple[bytes, Principal] | None:
        """The SHA-256 and principal of the token a proof names (`data_protection`)."""
        return self._by_id.get(token_id)

    def __len__(self) -> int:
        return len(self._by_hash)


def _bearer(metadata: Any) -> str:
    for key, value in metadata or ():
        if key == "authorization":
            text = value if isinstance(value, str) else value.decode(errors="replace")
            scheme, _, token = text.partition(" ")
            if scheme.lower() == "bearer":
                return token.strip()
    return ""


def authorize(table: TokenTable, method: str, metadata: Any) -> Principal | None:
    """The caller's principal when it may call `method` (None for open methods);
    Unauthenticated or PermissionDenied otherwise."""
    if method.startswith(OPEN_PREFIXES):
        return None
    return authorize_token(table, method, _bearer(metadata))


def authorize_token(table: TokenTable, method: str, token: str) -> Principal:
    """The principal of `token` when it may call `method` (a method with a rule; the
    subject check, if any, is the caller's); Unauthenticated or PermissionDenied otherwise.
    The gRPC interceptor and the worker's data port both ask this."""
    if not token:
        raise Unauthenticated(
            "no token given: set RESERVOIR_TOKEN_FILE (a file holding the token) or "
            "RESERVOIR_TOKEN to a token of this cluster"
        )
    principal = table.principal(token)
    if principal is None:
        raise Unauthenticated(
            "the token was refused: this cluster's tokens file does not list it (a token "
            "of another cluster, mistyped, or revoked?)"
        )
    return authorize_principal(principal, method)


def authorize_principal(principal: Principal, method: str) -> Principal:
    """`principal` when its role may call `method`; PermissionDenied otherwise."""
    rule = RULES.get(method)
    if rule is None or principal.role not in rule.roles:
        raise PermissionDenied(f"{_needs(rule)} (this token's role is {principal.role})")
    return principal


# What a refused caller reads: the role a call needs, said by what the call does rather
# than by an RPC name the caller never typed.
_NEEDS = {
    _ADMIN: "this needs the admin role (mounts, metadata loads, load jobs, pins, TTLs, free)",
    _WRITE: "writing needs the writer role (or admin)",
    _CLUSTER: "only the cluster's own workers may do this (the worker role)",
    _ADMIN | _CLUSTER: "this needs the admin role",
}


def _needs(rule: Rule | None) -> str:
    if rule is None:
        return "no role may make this call"
    return _NEEDS.get(rule.roles, f"this needs one of the roles {', '.join(sorted(rule.roles))}")


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls without a token whose role may make them, before the request is
    even decoded."""

    def __init__(self, table: TokenTable) -> None:
        self._table = table

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        try:
            principal = authorize(self._table, details.method, details.invocation_metadata)
        except ReservoirError as exc:
            handler = await continuation(details)
            return None if handler is None else _refusal(handler, exc)
        handler = await continuation(details)
        rule = RULES.get(details.method)
        if (
            handler is None
            or principal is None
            or rule is None
            or not rule.subject_field
            or principal.role not in _CLUSTER  # an operator may name any worker
        ):
            return handler
        return _subject_checked(handler, rule.subject_field, principal)


def _refusal(handler: Any, error: ReservoirError) -> Any:
    def ignore(_: bytes) -> None:
        return None

    if handler.unary_unary or handler.stream_unary:

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await abort_with(context, error)

        make = (
            grpc.unary_unary_rpc_method_handler
            if handler.unary_unary
            else grpc.stream_unary_rpc_method_handler
        )
        return make(unary, request_deserializer=ignore)

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await abort_with(context, error)
        yield  # pragma: no cover - makes this an async generator

    make = (
        grpc.unary_stream_rpc_method_handler
        if handler.unary_stream
        else grpc.stream_stream_rpc_method_handler
    )
    return make(stream, request_deserializer=ignore)


def _subject_checked(handler: Any, field_name: str, principal: Principal) -> Any:
    if not handler.unary_unary:
        return handler
    behaviour = handler.unary_unary

    async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
        claimed = str(getattr(request, field_name, ""))
        if not principal.subject or claimed != principal.subject:
            await abort_with(
                context,
                PermissionDenied(
                    f"this token speaks for {principal.subject or 'no worker'}, "
                    f"not for {claimed[:64]!r}"
                ),
            )
        return await behaviour(request, context)

    return grpc.unary_unary_rpc_method_handler(
        checked,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
