"""Settings of `reservoir operator`, the Kubernetes operator that forwards Dataset
resources to the cluster (services/client/reservoir/operator)."""

from __future__ import annotations

from dataclasses import dataclass, field

from reservoir.common.errors import InvalidArgument

from .clients import ClientConfig
from .loading import env, load


@dataclass(frozen=True)
class OperatorConfig:
    # A Dataset's deletion waits at most this long for the master to take it: past it the
    # finalizer is released anyway (the object goes; an event says the cluster may still
    # hold the dataset). Below Kubernetes' patience and kopf's own handler timeout (60 s).
    finalizer_budget_s: float = field(
        default=45.0, metadata=env("RESERVOIR_OPERATOR_FINALIZER_BUDGET")
    )
    # Each call to the master gets this deadline (the client's RESERVOIR_RPC_TIMEOUT for
    # the operator's calls); a failed call is retried after a backoff growing from
    # `retry_backoff_s`, doubling, to at most `retry_backoff_max_s`, while time is left.
    call_timeout_s: float = field(default=5.0, metadata=env("RESERVOIR_OPERATOR_CALL_TIMEOUT"))
    retry_backoff_s: float = field(default=0.5, metadata=env("RESERVOIR_OPERATOR_RETRY_BACKOFF"))
    retry_backoff_max_s: float = field(
        default=5.0, metadata=env("RESERVOIR_OPERATOR_RETRY_BACKOFF_MAX")
    )
    # A create or update is retried by kopf this many times (backoff `retry_backoff_max_s`)
    # before it gives up and says so in the object's status and events.
    apply_retries: int = field(default=20, metadata=env("RESERVOIR_OPERATOR_APPLY_RETRIES"))
    # How often each Dataset's status is copied from the cluster into the object.
    status_interval_s: float = field(
        default=30.0, metadata=env("RESERVOIR_OPERATOR_STATUS_INTERVAL")
    )
    # Watch Datasets in this namespace only (empty: every namespace).
    namespace: str = field(default="", metadata=env("RESERVOIR_OPERATOR_NAMESPACE"))
    client: ClientConfig = field(default_factory=lambda: load(ClientConfig))

    def __post_init__(self) -> None:
        if not 0 < self.call_timeout_s <= self.finalizer_budget_s < 60:
            raise InvalidArgument(
                "need 0 < RESERVOIR_OPERATOR_CALL_TIMEOUT <= "
                "RESERVOIR_OPERATOR_FINALIZER_BUDGET < 60 (seconds)"
            )
        if self.retry_backoff_s <= 0 or self.retry_backoff_max_s < self.retry_backoff_s:
            raise InvalidArgument(
                "need 0 < RESERVOIR_OPERATOR_RETRY_BACKOFF <= RESERVOIR_OPERATOR_RETRY_BACKOFF_MAX"
            )
        if self.apply_retries < 0 or self.status_interval_s <= 0:
            raise InvalidArgument(
                "RESERVOIR_OPERATOR_APPLY_RETRIES must be >= 0 and "
                "RESERVOIR_OPERATOR_STATUS_INTERVAL > 0"
            )
