"""The localities of a pod's datasets, asked of the master within one deadline: what
both the extender and the webhook wait for, and never longer than the setting."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from reservoir.client.locality import Locality
from reservoir.common.errors import ReservoirError, Unavailable

DatasetLocality = Callable[[str], Awaitable[Locality]]


class LocalityLookup:
    def __init__(self, locality_of: DatasetLocality, timeout_s: float) -> None:
        self._locality_of = locality_of
        self._timeout_s = timeout_s

    async def datasets(self, names: Sequence[str]) -> list[Locality]:
        """One locality per dataset; a ReservoirError (Unavailable past the deadline)
        when the master cannot say."""
        try:
            async with asyncio.timeout(self._timeout_s):
                return list(await asyncio.gather(*(self._locality_of(n) for n in names)))
        except TimeoutError as exc:
            raise Unavailable(
                f"the master did not answer the locality of {', '.join(names)} "
                f"within {self._timeout_s:g}s"
            ) from exc
        except ReservoirError:
            raise
        except OSError as exc:  # a connection refused below the client's own mapping
            raise Unavailable(f"locality of {', '.join(names)}: {exc}") from exc
