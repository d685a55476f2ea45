"""The master's mount table: which Reservoir path maps to which under-store, persisted in
etcd (workers follow it there), with the rules a new mount must pass."""

from __future__ import annotations

import asyncio
import dataclasses

from reservoir.common import paths
from reservoir.common.errors import AlreadyExists, InvalidArgument, NotFound
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.metadata_store import MetadataStore
from reservoir.common.models import Mount, MountOptions
from reservoir.common.understore.store_schemes import registered, scheme_of

from .mount_policy import MountPolicy


class MountTable:
    def __init__(self, store: MetadataStore, policy: MountPolicy, default_block_size: int) -> None:
        self._store = store
        self._policy = policy
        self._default_block_size = default_block_size
        self._mounts: dict[str, Mount] = {}
        # Held across a whole mount change, the namespace work it implies included.
        self.lock = asyncio.Lock()

    async def load(self) -> None:
        """The table as etcd has it now (a master that leads again may have missed changes)."""
        loaded: dict[str, Mount] = {}
        for _, value in await self._store.get_prefix(keyspace.MOUNTS):
            mount = Mount.from_json(value)
            loaded[mount.path] = mount
        self._mounts = loaded

    def __len__(self) -> int:
        return len(self._mounts)

    def mounts(self) -> list[Mount]:
        return sorted(self._mounts.values(), key=lambda m: m.path)

    def get(self, path: str) -> Mount | None:
        return self._mounts.get(path)

    def admit(self, path: str, uri: str, options: MountOptions) -> tuple[str, MountOptions]:
        """The normalised path and the options a new mount will have, or the error that
        refuses it, before anything is contacted. The effective block size becomes part
        of the mount, so a worker can refuse a request whose geometry disagrees with it
        without knowing this master's default."""
        path = paths.normalize(path)
        if path == paths.ROOT:
            raise InvalidArgument("cannot mount on /")
        options = options.validated()
        self._policy.check(uri, options)
        if options.writable and not scheme_of(uri).writes:
            writable = ", ".join(f"{s.name}://" for s in registered() if s.writes)
            raise InvalidArgument(
                f"{uri}: a {scheme_of(uri).name}:// mount cannot be writable "
                f"(the stores that write: {writable})"
            )
        return path, dataclasses.replace(options, block_size=self.block_size_of(options))

    def already(self, path: str, uri: str, options: MountOptions) -> Mount | None:
        """The mount at `path` if it is this very mount (same normalised URI, same effective
        options), which mounting again leaves as it is: a no-op, as `kubectl apply` of an
        unchanged object is, so a setup script can mount without asking first."""
        old = self._mounts.get(path)
        if old is not None and old.uri == uri and old.options == options:
            return old
        return None

    def check_place(self, path: str, replace: bool) -> Mount | None:
        """The mount `path` replaces (None for a new one); call with `lock` held."""
        old = self._mounts.get(path)
        if old is not None and not replace:
            raise AlreadyExists(
                f"{path} is already mounted ({old.uri}{_endpoint(old)}); unmount it first, "
                "or mount with replace (`reservoir mount --replace`)"
            )
        for other in self._mounts.values():
            if other.path != path and (
                paths.is_within(path, other.path) or paths.is_within(other.path, path)
            ):
                raise InvalidArgument(f"{path} overlaps the mount at {other.path}")
        return old

    async def put(self, mount: Mount) -> None:
        # etcd first: a write it refuses (out of space, unreachable) leaves no mount behind
        # in this master that the next master would not have.
        await self._store.put(keyspace.mount_key(mount.path), mount.to_json())
        self._mounts[mount.path] = mount

    async def remove(self, path: str) -> None:
        if path not in self._mounts:
            raise NotFound(f"{path} is not a mount point")
        await self._store.delete(keyspace.mount_key(path))
        del self._mounts[path]

    def mount_for(self, path: str) -> Mount | None:
        """The mount `path` lies in (the deepest one), if any."""
        best: Mount | None = None
        for mount in self._mounts.values():
            if paths.is_within(path, mount.path) and (
                best is None or len(mount.path) > len(best.path)
            ):
                best = mount
        return best

    def children_of(self, path: str) -> set[str]:
        """Names of the entries that exist at `path` only because a mount lies below it."""
        names = set()
        for mount_path in self._mounts:
            if mount_path != path and paths.is_within(mount_path, path):
                rest = mount_path[len(path) :].lstrip("/")
                names.add(rest.split("/", 1)[0])
        return names

    def block_size(self, mount: Mount) -> int:
        return self.block_size_of(mount.options)

    def block_size_of(self, options: MountOptions) -> int:
        return options.block_size or self._default_block_size


def _endpoint(mount: Mount) -> str:
    return f" at {mount.options.endpoint_url}" if mount.options.endpoint_url else ""
