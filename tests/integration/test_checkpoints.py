"""Checkpoints through the cache on a real cluster: writable mounts, write-through with
publish on close, reads of what was just written from the cache (no S3 GET), overwrites,
renames, removals, concurrent writers, S3 failing parts, and torch.save / torch.load and
torch.distributed.checkpoint through `reservoir://`."""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.client import Client, discovery
from reservoir.client.filesystem import ReservoirFileSystem
from reservoir.common.errors import Unavailable
from reservoir.local.cluster import LocalCluster
from tests.cli_runs import run_cli as _cli
from tests.conftest import new_mount_path

BLOCK = 1 << 20
PART = 5 << 20  # S3's smallest part: three parts make a 12 MiB file


@pytest.fixture
def writer(cluster: LocalCluster) -> Iterator[Client]:
    """A client whose writes go in 5 MiB parts, each tried twice at most."""
    config = discovery.client_config(cluster.master_address)
    config = dataclasses.replace(
        config,
        write_part_size=PART,
        write_part_retries=1,
        ufs=dataclasses.replace(config.ufs, retries=1),
    )
    with Client(config=config) as c:
        yield c


def _mount(client: Client, cluster: LocalCluster, bucket: str, *, writable: bool = True) -> str:
    root = new_mount_path()
    client.mount(
        root,
        f"s3://{bucket}/ckpt/",
        endpoint_url=cluster.s3_endpoint,
        block_size=BLOCK,
        writable=writable,
    )
    return root


def _gets(cluster: LocalCluster) -> int:
    return cluster.s3_counts().get("GET", 0)


def _open_uploads(cluster: LocalCluster, bucket: str) -> list[dict[str, object]]:
    return list(cluster.s3_client().list_multipart_uploads(Bucket=bucket).get("Uploads", []))


def test_a_written_file_appears_only_on_close_and_is_then_read_from_the_cache_without_s3_gets(
    cluster: LocalCluster, bucket: str, writer: Client
) -> None:
    root = _mount(writer, cluster, bucket)
    data = os.urandom(12 * BLOCK + 321)
    path = f"{root}/step-100/rank-0.pt"
    with Client(cluster.master_address) as other:
        with writer.open(path, "wb") as f:
            f.write(data[: 7 * BLOCK])  # one whole part on its way to S3
            with pytest.raises(FileNotFoundError):
                other.stat(path)
            assert cluster.s3_client().list_objects_v2(Bucket=bucket).get("KeyCount") == 0
            f.write(data[7 * BLOCK :])
        assert writer.mounts()[-1].options.writable or any(
            m.path == root and m.options.writable for m in writer.mounts()
        )
        before = _gets(cluster)
        assert other.read(path) == data
        # Every block was cached by the write (where it was staged): the store is not read.
        assert _gets(cluster) - before == 0
    s3 = cluster.s3_client().get_object(Bucket=bucket, Key="ckpt/step-100/rank-0.pt")
    assert s3["Body"].read() == data
    assert _open_uploads(cluster, bucket) == []


def test_a_write_to_a_read_only_mount_is_refused_and_sends_nothing_to_s3(
    cluster: LocalCluster, bucket: str, writer: Client
) -> None:
    root = _mount(writer, cluster, bucket, writable=False)
    mount = next(m for m in writer.mounts() if m.path == root)
    assert not mount.options.writable
    before = cluster.s3_counts()
    with pytest.raises(PermissionError, match="read-only"):
        writer.open(f"{root}/x.pt", "wb")
    with pytest.raises(PermissionError):
        writer.write(f"{root}/y.pt", b"abc")
    with pytest.raises(PermissionError):
        writer.makedirs(f"{root}/d")
    after = cluster.s3_counts()
    assert {k: after.get(k, 0) - before.get(k, 0) for k in ("PUT", "POST", "DELETE")} == {
        "PUT": 0,
        "POST": 0,
        "DELETE": 0,
    }


def test_an_overwrite_replaces_the_file_whole_even_for_a_reader_holding_the_old_stat(
    cluster: LocalCluster, bucket: str, writer: Client
) -> None:
    root = _mount(writer, cluster, bucket)
    path = f"{root}/latest.pt"
    old, new = os.urandom(3 * BLOCK + 5), os.urandom(2 * BLOCK + 9)
    writer.write(path, old)
    with Client(cluster.master_address) as reader:
        assert reader.read(path) == old  # its stat of the old version is now cached
        writer.write(path, new)
        # The old version's blocks were dropped: the reader's fetch meets the new ETag
        # and it asks again, getting the new bytes, never a mix.
        assert reader.read(path) == new


def test_concurrent_writers_of_one_path_leave_the_last_close_whole(
    cluster: LocalCluster, bucket: str, writer: Client
) -> None:
    root = _mount(writer, cluster, bucket)
    path = f"{root}/shared.pt"
    first, second = os.urandom(2 * BLOCK + 1), os.urandom(3 * BLOCK + 2)
    a, b = writer.open(path, "wb"), writer.open(path, "wb")
    a.write(first[:BLOCK])
    b.write(second[:BLOCK])
    a.write(first[BLOCK:])
    b.write(second[BLOCK:])
    a.close()
    with Client(cluster.master_address) as reader:
        assert reader.read(path) == first
        b.close()
        reader.refresh(path)
        assert reader.read(path) == second
    assert _open_uploads(cluster, bucket) == []


def test_rename_rm_and_makedirs_change_the_store_and_the_namespace_together(
    cluster: LocalCluster, bucket: str, writer: Client
) -> None:
    """A renamed file keeps its cached blocks: read under its new name it costs S3
    nothing (a checkpoint's commit marker, renamed into place, is read from the cache)."""
    root = _mount(writer, cluster, bucket)
    writer.makedirs(f"{root}/run/step-1")
    assert writer.stat(f"{root}/run/step-1").is_dir
    data = os.urandom(BLOCK + 3)
    writer.write(f"{root}/run/step-1/.metadata.tmp", data)
    writer.rename(f"{root}/run/step-1/.metadata.tmp", f"{root}/run/step-1/.metadata")
    before = _gets(cluster)
    with Client(cluster.master_address) as reader:
        names = [e.path.rsplit("/", 1)[1] for e in reader.ls(f"{root}/run/step-1")]
        assert names == [".metadata"]
        assert reader.read(f"{root}/run/step-1/.metadata") == data
    assert _gets(cluster) == before
    keys = {o["Key"] for o in cluster.s3_client().list_objects_v2(Bucket=bucket)["Contents"]}
    assert "ckpt/run/step-1/.metadata" in keys and "ckpt/run/step-1/.metadata.tmp" not in keys
    with pytest.raises(IsADirectoryError):
        writer.rm(f"{root}/run")
    writer.rm(f"{root}/run", recursive=True)
    with pytest.raises(FileNotFoundError):
        writer.stat(f"{root}/run/step-1/.metadata")
    assert cluster.s3_client().list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_failing_s3_parts_are_retried_within_the_bound_then_fail_the_write_leaving_nothing(
    cluster: LocalCluster, bucket: str, writer: Client
) -> None:
    root = _mount(writer, cluster, bucket)
    data = os.urandom(2 * BLOCK + 7)
    cluster.s3_config(fail_parts=1)  # one 503: the part's second try goes through
    try:
        writer.write(f"{root}/retried.pt", data)
    finally:
        cluster.s3_config(fail_parts=0)
    assert writer.read(f"{root}/retried.pt") == data
    cluster.s3_config(fail_parts=100)  # more than any bound
    try:
        with (
            pytest.raises(Unavailable, match="part 1 failed 2 times"),
            writer.open(f"{root}/failed.pt", "wb") as f,
        ):
            f.write(data)
    finally:
        cluster.s3_config(fail_parts=0)
    with pytest.raises(FileNotFoundError):
        writer.stat(f"{root}/failed.pt")
    keys = {o["Key"] for o in cluster.s3_client().list_objects_v2(Bucket=bucket)["Contents"]}
    assert keys == {"ckpt/retried.pt"}
    assert _open_uploads(cluster, bucket) == []


def test_an_exception_inside_with_aborts_the_write(
    cluster: LocalCluster, bucket: str, writer: Client
) -> None:
    root = _mount(writer, cluster, bucket)
    with pytest.raises(RuntimeError), writer.open(f"{root}/half.pt", "wb") as f:
        f.write(os.urandom(6 * BLOCK))
        raise RuntimeError("the training step failed mid-save")
    with pytest.raises(FileNotFoundError):
        writer.stat(f"{root}/half.pt")
    assert _open_uploads(cluster, bucket) == []


def test_cli_cp_from_a_file_and_stdin_mv_and_rm(
    cluster: LocalCluster, bucket: str, writer: Client, tmp_path: Path
) -> None:
    root = _mount(writer, cluster, bucket)
    local = tmp_path / "w.bin"
    local.write_bytes(os.urandom(300_000))

    def cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        command = [sys.executable, "-m", "reservoir.cli.main"]
        return subprocess.run(
            [*command, "--master", cluster.master_address, *args],
            input=stdin,
            capture_output=True,
            timeout=60,
        )

    assert cli("cp", str(local), f"{root}/a/w.bin").returncode == 0
    assert cli("cp", "-", f"reservoir://{root}/b.bin", stdin=b"from stdin").returncode == 0
    assert cli("mv", f"{root}/b.bin", f"{root}/a/c.bin").returncode == 0
    assert writer.read(f"{root}/a/w.bin") == local.read_bytes()
    assert writer.read(f"{root}/a/c.bin") == b"from stdin"
    assert cli("rm", f"{root}/a/c.bin").returncode == 0
    assert [e.path for e in writer.ls(f"{root}/a")] == [f"{root}/a/w.bin"]


def test_torch_save_and_load_round_trip_through_fsspec(
    cluster: LocalCluster, bucket: str, writer: Client
) -> None:
    torch = pytest.importorskip("torch")
    import fsspec

    root = _mount(writer, cluster, bucket)
    fs = fsspec.filesystem("reservoir", client=writer, skip_instance_cache=True)
    state = {"w": torch.randn(512, 1024), "step": 100}
    with fs.open(f"reservoir://{root}/model.pt", "wb") as f:
        torch.save(state, f)
    before = _gets(cluster)
    with fs.open(f"reservoir://{root}/model.pt", "rb") as f:
        loaded = torch.load(io.BytesIO(f.read()))
    assert _gets(cluster) == before
    assert loaded["step"] == 100 and torch.equal(loaded["w"], state["w"])
    # A file object never closed is published when collected, as with open() and s3fs.
    torch.save({"step": 101}, fs.open(f"reservoir://{root}/unclosed.pt", "wb"))
    with fs.open(f"reservoir://{root}/unclosed.pt", "rb") as f:
        assert torch.load(io.BytesIO(f.read()))["step"] == 101
    fs.pipe_file(f"reservoir://{root}/small.bin", b"xyz")
    assert fs.cat_file(f"reservoir://{root}/small.bin") == b"xyz"
    assert fs.exists(f"reservoir://{root}/small.bin")
    fs.rm(f"reservoir://{root}/small.bin")
    assert not fs.exists(f"reservoir://{root}/small.bin")


def test_torch_distributed_checkpoint_save_and_load_through_fsspec(
    cluster: LocalCluster, bucket: str, writer: Client
) -> None:
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

    root = _mount(writer, cluster, bucket)
    url = f"reservoir://{root}/dcp/step-7"
    state = {"layer": torch.randn(256, 256), "bias": torch.arange(10.0)}
    dcp.save(state, storage_writer=FsspecWriter(url, master=cluster.master_address))
    names = {e.path.rsplit("/", 1)[1] for e in writer.ls(f"{root}/dcp/step-7")}
    assert ".metadata" in names and not any(n.endswith(".tmp") for n in names)
    target = {"layer": torch.zeros(256, 256), "bias": torch.zeros(10)}
    before = _gets(cluster)
    dcp.load(target, storage_reader=FsspecReader(url, master=cluster.master_address))
    assert _gets(cluster) == before  # its renamed .metadata too: all from the cache
    assert torch.equal(target["layer"], state["layer"])
    assert torch.equal(target["bias"], state["bias"])


_NO_KEYS_WRITER = textwrap.dedent(
    """
    import dataclasses, os, sys
    import boto3
    from reservoir.client import AsyncClient, Client, discovery
    assert boto3.session.Session().get_credentials() is None  # truly none here
    config = dataclasses.replace(
        discovery.client_config(sys.argv[1]), write_part_size=5 << 20
    )
    root = sys.argv[2]
    with Client(config=config) as rs:
        with rs.open(f"{root}/model.pt", "wb") as f:
            f.write(bytes(range(256)) * (48 << 12))  # 12 MiB: three parts
        rs.write(f"{root}/small.pt", b"one PUT")
    print("saved", flush=True)
    """
)


def test_a_trainer_holding_no_s3_credentials_saves_through_the_workers(
    cluster: LocalCluster, bucket: str, writer: Client, tmp_path: Path
) -> None:
    """Each part goes to a worker once; the worker uploads it with the mount's
    credentials. The trainer's process has none: were it to reach S3 itself, boto3 would
    refuse to sign."""
    root = _mount(writer, cluster, bucket)
    env = _no_aws_env()
    script = tmp_path / "writer.py"
    script.write_text(_NO_KEYS_WRITER)
    saved = subprocess.run(
        [sys.executable, str(script), cluster.master_address, root],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert saved.returncode == 0 and saved.stdout.strip() == "saved", saved.stderr
    stdin_data = os.urandom(7 * BLOCK + 5)
    copied = subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", "--master", cluster.master_address]
        + ["cp", "-", f"reservoir://{root}/from-stdin.bin"],
        input=stdin_data,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert copied.returncode == 0, copied.stderr
    s3 = cluster.s3_client()
    model = bytes(range(256)) * (48 << 12)
    assert s3.get_object(Bucket=bucket, Key="ckpt/model.pt")["Body"].read() == model
    assert s3.get_object(Bucket=bucket, Key="ckpt/small.pt")["Body"].read() == b"one PUT"
    assert s3.get_object(Bucket=bucket, Key="ckpt/from-stdin.bin")["Body"].read() == stdin_data
    gets = _gets(cluster)
    assert writer.read(f"{root}/model.pt") == model  # read-your-writes from the workers
    assert _gets(cluster) == gets
    assert _open_uploads(cluster, bucket) == []


def test_cp_r_copies_a_tree_both_ways_and_cp_into_a_directory_keeps_the_name(
    cluster: LocalCluster, bucket: str, writer: Client, tmp_path: Path
) -> None:
    root = _mount(writer, cluster, bucket)
    tree = tmp_path / "run"
    files = {"model.pt": os.urandom(6 * BLOCK + 1), "opt/state.pt": b"s", "opt/x/y.json": b"{}"}
    for name, data in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(data)
    up = _cli(cluster, "cp", "-r", str(tree), f"reservoir://{root}/step-1")
    assert up.returncode == 0, up.stderr
    keys = [o["Key"] for o in cluster.s3_client().list_objects_v2(Bucket=bucket)["Contents"]]
    assert sorted(keys) == sorted(f"ckpt/step-1/{name}" for name in files)  # no dir markers
    again = _cli(cluster, "cp", "-r", str(tree), f"reservoir://{root}/step-1")
    assert again.returncode == 0, again.stderr  # into the existing directory, as cp -r does
    assert writer.read(f"{root}/step-1/run/opt/state.pt") == b"s"

    back = tmp_path / "back"
    down = _cli(cluster, "cp", "-r", f"{root}/step-1", str(back))
    assert down.returncode == 0, down.stderr
    for name, data in files.items():
        assert (back / name).read_bytes() == data
    plain = _cli(cluster, "cp", f"{root}/step-1", str(tmp_path / "x"))
    assert plain.returncode == 1 and "cp -r" in plain.stderr

    kept = _cli(cluster, "cp", str(tree / "model.pt"), f"reservoir://{root}/step-1/opt/")
    assert kept.returncode == 0, kept.stderr
    assert writer.read(f"{root}/step-1/opt/model.pt") == files["model.pt"]


def test_rm_f_of_a_missing_path_succeeds_and_rm_of_one_fails(
    cluster: LocalCluster, bucket: str, writer: Client
) -> None:
    root = _mount(writer, cluster, bucket)
    assert _cli(cluster, "rm", "-f", f"{root}/never-written").returncode == 0
    missing = _cli(cluster, "rm", f"{root}/never-written")
    assert missing.returncode == 1 and "never-written" in missing.stderr


def test_a_directory_renamed_moves_every_object_keeps_its_cache_and_leaves_no_marker(
    cluster: LocalCluster, bucket: str, writer: Client
) -> None:
    """`reservoir mv DIR DIR2` and fsspec `mv(recursive=True)`: S3 holds the tree under the
    new prefix only, the namespace shows the new tree where the old one was, and files
    read right after cost S3 nothing (their cached blocks were kept)."""
    root = _mount(writer, cluster, bucket)
    writer.makedirs(f"{root}/run/opt")  # as DCP does before writing into it
    files = {"model.pt": os.urandom(3 * BLOCK + 1), "opt/state.pt": b"state", "meta.json": b"{}"}
    for name, data in files.items():
        writer.write(f"{root}/run/{name}", data)
    keys = [o["Key"] for o in cluster.s3_client().list_objects_v2(Bucket=bucket)["Contents"]]
    # The empty object makedirs left went with the directory's first file.
    assert sorted(keys) == sorted(f"ckpt/run/{n}" for n in files)

    moved = _cli(cluster, "mv", f"{root}/run", f"{root}/step-1")
    assert moved.returncode == 0, moved.stderr
    keys = [o["Key"] for o in cluster.s3_client().list_objects_v2(Bucket=bucket)["Contents"]]
    assert sorted(keys) == sorted(f"ckpt/step-1/{n}" for n in files)
    before = _gets(cluster)
    with Client(cluster.master_address) as reader:
        assert [e.path for e in reader.ls(root)] == [f"{root}/step-1"]
        for name, data in files.items():
            assert reader.read(f"{root}/step-1/{name}") == data
        with pytest.raises(FileNotFoundError):
            reader.stat(f"{root}/run/model.pt")
    assert _gets(cluster) == before

    fs = ReservoirFileSystem(client=writer, skip_instance_cache=True)
    fs.mv(f"{root}/step-1", f"{root}/final", recursive=True)
    assert sorted(fs.find(f"{root}/final")) == sorted(f"{root}/final/{n}" for n in files)
    writer.write(f"{root}/other/x", b"x")
    with pytest.raises(FileExistsError):
        writer.rename(f"{root}/final", f"{root}/other")  # onto a directory with files in it
    with pytest.raises(ValueError):
        writer.rename(f"{root}/final", f"{root}/final/inside")


_DCP_RANK = textwrap.dedent(
    """
    import hashlib, os, sys
    import boto3
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

    assert boto3.session.Session().get_credentials() is None  # truly none here
    master, url = sys.argv[1], sys.argv[2]
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=2)

    def shard(r):
        g = torch.Generator().manual_seed(1000 + r)
        return {f"rank{r}.weight": torch.randn(384, 1024, generator=g),  # 1.5 MiB each
                f"rank{r}.step": torch.tensor([7 + r])}

    mine = shard(rank)
    dcp.save(mine, storage_writer=FsspecWriter(url, master=master))
    dist.barrier()
    target = {k: torch.zeros_like(v) for k, v in mine.items()}
    dcp.load(target, storage_reader=FsspecReader(url, master=master))
    digest = hashlib.sha256()
    for key in sorted(target):
        digest.update(target[key].numpy().tobytes())
    print(rank, digest.hexdigest(), flush=True)
    dist.destroy_process_group()
    """
)


def _no_aws_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return env | {
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def test_dcp_save_and_load_with_two_ranks_holding_no_s3_credentials_round_trips_exactly(
    cluster: LocalCluster, bucket: str, writer: Client, tmp_path: Path
) -> None:
    """Two gloo ranks, each saving its own shard with DCP's FsspecWriter to reservoir://
    and loading it back with FsspecReader, with no S3 credentials in their environment:
    the bytes come back exact, every file is in S3 under the mount's prefix with the size
    the namespace gives it, and DCP's makedirs left no directory object behind."""
    torch = pytest.importorskip("torch")
    import hashlib

    from reservoir.local.cluster import free_port

    root = _mount(writer, cluster, bucket)
    url = f"reservoir://{root}/dcp/step-9"
    script = tmp_path / "dcp_rank.py"
    script.write_text(_DCP_RANK)
    env = _no_aws_env() | {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": "2",
        "GLOO_SOCKET_IFNAME": "lo",
    }
    ranks = [
        subprocess.Popen(
            [sys.executable, str(script), cluster.master_address, url],
            env=env | {"RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = []
    for rank in ranks:
        try:
            out, err = rank.communicate(timeout=180)
        finally:
            rank.kill()
        assert rank.returncode == 0, err[-3000:]
        outputs.append(out.split())

    def expected(r: int) -> str:
        g = torch.Generator().manual_seed(1000 + r)
        weight, step = torch.randn(384, 1024, generator=g), torch.tensor([7 + r])
        tensors = {f"rank{r}.step": step, f"rank{r}.weight": weight}
        digest = hashlib.sha256()
        for key in sorted(tensors):
            digest.update(tensors[key].numpy().tobytes())
        return digest.hexdigest()

    assert outputs == [["0", expected(0)], ["1", expected(1)]]
    listed = cluster.s3_client().list_objects_v2(Bucket=bucket, Prefix="ckpt/")
    in_s3 = {o["Key"]: o["Size"] for o in listed.get("Contents", [])}
    in_namespace = {
        f"ckpt/dcp/step-9/{e.path.rsplit('/', 1)[1]}": e.size
        for e in writer.ls(f"{root}/dcp/step-9")
    }
    assert in_s3 == in_namespace  # nothing else under the prefix: no directory markers
    assert ".metadata" in {k.rsplit("/", 1)[1] for k in in_s3}
    shards = [k for k in in_s3 if k.endswith(".distcp")]
    assert len(shards) == 2 and all(in_s3[k] > 384 * 1024 * 4 for k in shards)
    assert _open_uploads(cluster, bucket) == []
