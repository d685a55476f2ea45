"""Reading gs://, az:// and webhdfs:// mounts: a cold read through the cluster (the workers'
ranged GETs at the store) and a warm one (from the cache), beside fsspec's own filesystems
for the same stores (gcsfs, adlfs, fsspec's WebHDFS) reading the same objects straight from
the same emulator.

The stores are the tests' emulators (fake-gcs-server, Azurite; tests/emulators.py; the
WebHDFS namenode and datanode of tests/webhdfs_server.py) in processes of their own on
loopback, so the numbers are the software's cost, not a
network's or a cloud's. Reads are one at a time (one thread), small objects and large
ones, each read whole. A row whose library is not installed is left out, saying so.

    python bench/cloud_mount_bench.py                     # 200 x 32 KiB, 2 x 16 MiB
    python bench/cloud_mount_bench.py --small 50 --large 1

Writes a table to stdout, bench/results/cloud_mount_bench.json and cloud_mount_bench.png.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the test suite's emulators

RESULTS = Path(__file__).parent / "results"
Read = Callable[[str], bytes]


def _timed(read: Read, names: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    size = sum(len(read(name)) for name in names)
    return time.perf_counter() - started, size


def _gcsfs_reader(endpoint: str, bucket: str) -> Read | None:
    try:
        from gcsfs.core import GCSFileSystem
    except ImportError:
        print("gcsfs is not installed: its rows are left out", file=sys.stderr)
        return None
    # The core filesystem: gcsfs's default one first asks a gRPC control plane for the
    # bucket's layout, which an emulator does not serve (a 60 s timeout per bucket).
    fs = GCSFileSystem(endpoint_url=endpoint, token="anon", skip_instance_cache=True)
    return lambda key: bytes(fs.cat_file(f"{bucket}/{key}"))


def _adlfs_reader(endpoint: str, account: str, key: str, container: str) -> Read | None:
    try:
        import adlfs
    except ImportError:
        print("adlfs is not installed: its rows are left out", file=sys.stderr)
        return None
    connection = (
        f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={key};"
        f"BlobEndpoint={endpoint};"
    )
    fs = adlfs.AzureBlobFileSystem(connection_string=connection, skip_instance_cache=True)
    return lambda name: bytes(fs.cat_file(f"{container}/{name}"))


def _webhdfs_reader(port: int) -> Read | None:
    try:
        from fsspec.implementations.webhdfs import WebHDFS
    except ImportError:  # it needs requests
        print("fsspec's WebHDFS cannot be imported: its rows are left out", file=sys.stderr)
        return None
    fs = WebHDFS("127.0.0.1", port=port, skip_instance_cache=True)
    return lambda path: bytes(fs.cat_file(f"/data/{path}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=200, help="32 KiB objects")
    parser.add_argument("--large", type=int, default=2, help="16 MiB objects")
    args = parser.parse_args()

    from reservoir.client import Client
    from reservoir.common.understore.mounted_stores import open_under_store
    from reservoir.common.understore.under_store import UnderStoreSettings
    from reservoir.local.cluster import LocalCluster
    from tests import emulators
    from tests.webhdfs_server import WebHdfsServer

    sets = {
        "small": [(f"s{i:05d}.bin", 32 << 10) for i in range(args.small)],
        "large": [(f"l{i:03d}.bin", 16 << 20) for i in range(args.large)],
    }
    rows: list[dict[str, Any]] = []
    os.environ.update(emulators.AZURE_ENV)
    with tempfile.TemporaryDirectory(prefix="cloud-bench-") as tmp:
        gcs_binary, azurite_binary = emulators.fake_gcs_binary(), emulators.azurite_blob_binary()
        if gcs_binary is None or azurite_binary is None:
            sys.exit("the emulators are not installed (see tests/emulators.py)")
        (Path(tmp) / "gcs").mkdir()
        (Path(tmp) / "az").mkdir()
        (Path(tmp) / "hdfs" / "data").mkdir(parents=True)
        gcs = emulators.FakeGcs(gcs_binary, Path(tmp) / "gcs")
        azurite = emulators.Azurite(azurite_binary, Path(tmp) / "az")
        hdfs = WebHdfsServer(Path(tmp) / "hdfs")
        cluster = LocalCluster.up(
            Path(tmp) / "cluster",
            workers=2,
            env={"RESERVOIR_ALLOWED_SCHEMES": "s3,gs,az,webhdfs", **emulators.AZURE_ENV},
        )
        try:
            bucket, container = gcs.create_bucket(), azurite.create_container()
            stores = {
                "gs": (
                    f"gs://{bucket}/",
                    UnderStoreSettings(endpoint_url=gcs.endpoint, credentials="anonymous"),
                    _gcsfs_reader(gcs.endpoint, bucket),
                    "gcsfs",
                ),
                "az": (
                    f"az://{container}/",
                    UnderStoreSettings(endpoint_url=azurite.endpoint, credentials="env"),
                    _adlfs_reader(
                        azurite.endpoint, emulators.AZURE_ACCOUNT, emulators.AZURE_KEY, container
                    ),
                    "adlfs",
                ),
                "webhdfs": (
                    hdfs.uri("data/"),
                    UnderStoreSettings(credentials="anonymous"),
                    _webhdfs_reader(hdfs.port),
                    "fsspec-webhdfs",
                ),
            }
            with Client(cluster.master_address) as client:
                for scheme, (uri, settings, direct, library) in stores.items():
                    store = open_under_store(uri, settings)
                    for kind, files in sets.items():
                        for variant in (library, "reservoir-cold", "reservoir-warm"):
                            if variant == library and direct is None:
                                continue
                            # Fresh objects for each cold variant: nothing cached anywhere.
                            folder = f"{kind}-{variant.split('-')[0]}/"
                            if variant != "reservoir-warm":
                                for name, size in files:
                                    store.put(folder + name, os.urandom(size))
                            names = [folder + name for name, _ in files]
                            if variant == library:
                                assert direct is not None
                                wall, size = _timed(direct, names)
                            else:
                                root = f"/bench/{scheme}"
                                if variant == "reservoir-cold" and kind == "small":
                                    client.mount(
                                        root, uri, endpoint_url=settings.endpoint_url,
                                        credentials=settings.credentials,
                                    )  # fmt: skip
                                wall, size = _timed(
                                    lambda n, r=root: client.read(f"{r}/{n}"), names
                                )
                            rows.append(
                                {
                                    "store": scheme,
                                    "files": kind,
                                    "variant": variant,
                                    "count": len(names),
                                    "bytes": size,
                                    "wall_s": round(wall, 4),
                                    "MBps": round(size / wall / 1e6, 1),
                                    "files_per_s": round(len(names) / wall, 1),
                                }
                            )
        finally:
            cluster.down()
            gcs.stop()
            azurite.stop()
            hdfs.stop()

    print(f"{'store':7} {'files':6} {'variant':15} {'count':>5} {'MB/s':>8} {'files/s':>8}")
    for r in rows:
        print(
            f"{r['store']:7} {r['files']:6} {r['variant']:15} {r['count']:5d} "
            f"{r['MBps']:8.1f} {r['files_per_s']:8.1f}"
        )
    RESULTS.mkdir(exist_ok=True)
    out = {"args": vars(args), "rows": rows, "cpus": os.cpu_count()}
    (RESULTS / "cloud_mount_bench.json").write_text(json.dumps(out, indent=2) + "\n")
    _plot(rows)


def _plot(rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stores = list(dict.fromkeys(r["store"] for r in rows))
    fig, axes = plt.subplots(len(stores), 2, figsize=(9, 3 * len(stores)), squeeze=False)
    for row_axes, store in zip(axes, stores, strict=True):
        for ax, kind, metric in zip(
            row_axes, ("small", "large"), ("files_per_s", "MBps"), strict=True
        ):
            mine = [r for r in rows if r["files"] == kind and r["store"] == store]
            ax.bar([r["variant"] for r in mine], [r[metric] for r in mine])
            unit = "files/s" if metric == "files_per_s" else "MB/s"
            ax.set_title(f"{store}: {kind} objects, {unit}")
            ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "cloud_mount_bench.png", dpi=100)


if __name__ == "__main__":
    main()
