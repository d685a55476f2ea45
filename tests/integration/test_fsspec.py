"""`reservoir://` through fsspec, as training code uses it: fsspec's own abstract tests of
reading (`get`), pandas, pyarrow and Hugging Face `datasets` reading through the cache."""

from __future__ import annotations

import io
import posixpath
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
import s3fs
from fsspec.tests.abstract import AbstractFixtures, AbstractGetTests

from reservoir.client import Client
from reservoir.client.filesystem import ReservoirBufferedFile, ReservoirFileSystem
from reservoir.common.errors import NotFound
from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster
from tests.conftest import new_mount_path

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


class Mounted:
    """A mount of an S3 prefix: files are made in S3 (the cache only reads) and read back
    through `reservoir://`."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.bucket = f"fsspec-{uuid.uuid4().hex[:10]}"
        self.s3 = s3fs.S3FileSystem(
            key=DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret=DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            endpoint_url=cluster.s3_endpoint,
            skip_instance_cache=True,
        )
        self.s3.mkdir(self.bucket)
        self.root = new_mount_path()
        self.fs = ReservoirFileSystem(master=cluster.master_address, skip_instance_cache=True)
        self.fs.client.mount(self.root, f"s3://{self.bucket}/", endpoint_url=cluster.s3_endpoint)

    def s3_path(self, path: str) -> str:
        """The S3 object behind a path of this mount."""
        assert path.startswith(self.root)
        return f"{self.bucket}{path[len(self.root) :]}"

    def put(self, path: str, data: bytes) -> None:
        self.s3.pipe_file(self.s3_path(path), data)


@pytest.fixture(scope="module")
def mounted(cluster: LocalCluster) -> Iterator[Mounted]:
    m = Mounted(cluster)
    yield m
    m.fs.client.close()


def _fresh_dir(mounted: Mounted) -> str:
    """A directory no one has listed yet, so its files are new to the cache's namespace."""
    return f"{mounted.root}/{uuid.uuid4().hex[:8]}"


class TestReservoirGet(AbstractFixtures, AbstractGetTests):  # type: ignore[misc]
    """fsspec's own tests of copying from a filesystem to local disk. The scenarios they
    build on the remote side are built in S3, under the mount, then read through
    Reservoir."""

    @pytest.fixture
    def fs(self, mounted: Mounted) -> ReservoirFileSystem:
        return mounted.fs

    @pytest.fixture
    def fs_join(self) -> Callable[..., str]:
        return posixpath.join

    @pytest.fixture
    def fs_path(self, mounted: Mounted) -> str:
        return _fresh_dir(mounted)

    @pytest.fixture
    def supports_empty_directories(self) -> bool:
        return False  # S3 has none

    def _in_s3(self, mounted: Mounted, build: Callable[..., str]) -> Iterator[str]:
        path = _fresh_dir(mounted)
        build(_S3Writer(mounted), posixpath.join, path)
        yield f"{path}/source"
        mounted.s3.rm(mounted.s3_path(path), recursive=True)

    @pytest.fixture
    def fs_bulk_operations_scenario_0(self, mounted: Mounted) -> Iterator[str]:
        yield from self._in_s3(mounted, self._bulk_operations_scenario_0)

    @pytest.fixture
    def fs_glob_edge_cases_files(self, mounted: Mounted) -> Iterator[str]:
        yield from self._in_s3(mounted, self._glob_edge_cases_files)

    @pytest.fixture
    def fs_dir_and_file_with_same_name_prefix(self, mounted: Mounted) -> Iterator[str]:
        yield from self._in_s3(mounted, self._dir_and_file_with_same_name_prefix)

    @pytest.fixture
    def fs_10_files_with_hashed_names(self, mounted: Mounted) -> Iterator[str]:
        yield from self._in_s3(mounted, self._10_files_with_hashed_names)

    @pytest.mark.skip(reason="makes its source with fs.mkdir/fs.touch: this mount is read-only")
    def test_get_directory_recursive(self) -> None:
        pass


class _S3Writer:
    """What fsspec's scenario builders call on "some_fs", done in S3 under the mount."""

    def __init__(self, mounted: Mounted) -> None:
        self._mounted = mounted

    def touch(self, path: str) -> None:
        self._mounted.put(path, b"")

    def pipe(self, path: str, value: bytes) -> None:
        self._mounted.put(path, value)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        pass  # S3 directories exist through their files


# ---- the filesystem's own behaviour -------------------------------------------------------


@pytest.fixture(scope="module")
def tree(mounted: Mounted) -> dict[str, bytes]:
    base = _fresh_dir(mounted)
    files = {
        f"{base}/a.bin": bytes(range(256)) * 40,
        f"{base}/b.txt": b"hello reservoir\n",
        f"{base}/empty": b"",
        f"{base}/sub/c.bin": b"c" * 70_000,
        f"{base}/sub/deeper/d.bin": b"d" * 10,
    }
    for path, data in files.items():
        mounted.put(path, data)
    return files


def _base(tree: dict[str, bytes]) -> str:
    return min(tree).rsplit("/", 1)[0]


def test_both_url_forms_name_the_same_path(mounted: Mounted, tree: dict[str, bytes]) -> None:
    path = f"{_base(tree)}/b.txt"
    assert ReservoirFileSystem._strip_protocol(f"reservoir://{path}") == path
    assert ReservoirFileSystem._strip_protocol(f"reservoir:/{path}") == path
    assert ReservoirFileSystem._strip_protocol(f"reservoir://{path.lstrip('/')}") == path
    with fsspec.open(
        f"reservoir://{path.lstrip('/')}", master=mounted.fs.client.config.master
    ) as f:
        assert f.read() == tree[path]


def test_the_protocol_is_registered_by_entry_point() -> None:
    assert fsspec.get_filesystem_class("reservoir") is ReservoirFileSystem


def test_listing_info_find_walk_glob_and_du_see_the_namespace(
    mounted: Mounted, tree: dict[str, bytes]
) -> None:
    fs, base = mounted.fs, _base(tree)
    assert fs.ls(base, detail=False) == [f"{base}/{n}" for n in ("a.bin", "b.txt", "empty", "sub")]
    info = fs.info(f"reservoir://{base}/a.bin")
    assert (info["name"], info["type"], info["size"]) == (f"{base}/a.bin", "file", 10240)
    assert fs.info(f"{base}/sub")["type"] == "directory"
    assert fs.find(base) == sorted(tree)
    assert [root for root, _, _ in fs.walk(base)] == [base, f"{base}/sub", f"{base}/sub/deeper"]
    assert fs.glob(f"reservoir://{base}/**/*.bin") == sorted(p for p in tree if p.endswith(".bin"))
    assert fs.du(base) == sum(len(d) for d in tree.values())
    assert fs.ls(f"{base}/b.txt", detail=False) == [f"{base}/b.txt"]
    assert fs.exists(f"{base}/b.txt") and not fs.exists(f"{base}/nope")
    with pytest.raises(FileNotFoundError):
        fs.info(f"{base}/nope")


def test_cat_file_ranges_follow_fsspec_semantics(mounted: Mounted, tree: dict[str, bytes]) -> None:
    fs, path = mounted.fs, f"{_base(tree)}/a.bin"
    data = tree[path]
    assert fs.cat_file(path) == data
    assert fs.cat_file(path, 100, 300) == data[100:300]
    assert fs.cat_file(path, -50) == data[-50:]
    assert fs.cat_file(path, 10, -10) == data[10:-10]
    assert fs.cat_file(path, 10_000, 99_999) == data[10_000:]
    assert fs.cat_file(path, 300, 100) == b""


def test_cat_of_many_paths_and_cat_ranges_return_exact_bytes(
    mounted: Mounted, tree: dict[str, bytes]
) -> None:
    fs, base = mounted.fs, _base(tree)
    assert fs.cat(f"{base}/", recursive=True) == tree
    assert fs.cat(list(tree)) == tree
    missing = f"{base}/missing"
    assert isinstance(fs.cat([missing, f"{base}/b.txt"], on_error="return")[missing], NotFound)
    assert fs.cat([missing, f"{base}/b.txt"], on_error="omit") == {
        f"{base}/b.txt": tree[f"{base}/b.txt"]
    }
    got = fs.cat_ranges(
        [f"{base}/a.bin", f"{base}/sub/c.bin", missing], [0, 65_000, 0], [5, None, 1]
    )
    assert got[:2] == [tree[f"{base}/a.bin"][:5], tree[f"{base}/sub/c.bin"][65_000:]]
    assert isinstance(got[2], FileNotFoundError)


def test_open_gives_a_seekable_file_with_read_ahead(
    mounted: Mounted, tree: dict[str, bytes]
) -> None:
    path = f"{_base(tree)}/sub/c.bin"
    with mounted.fs.open(path, block_size=16 * 1024) as f:
        assert isinstance(f, ReservoirBufferedFile) and f.seekable() and f.size == 70_000
        assert f.read(10) == tree[path][:10]
        f.seek(-100, io.SEEK_END)
        assert f.read() == tree[path][-100:]
        f.seek(1000)
        assert f.read(5) == tree[path][1000:1005]
    with mounted.fs.open(f"{_base(tree)}/b.txt", "r") as text:
        assert text.readline() == "hello reservoir\n"


def test_writes_to_a_read_only_mount_are_refused_with_a_clear_error(
    mounted: Mounted, tree: dict[str, bytes]
) -> None:
    fs, base = mounted.fs, _base(tree)
    for attempt in (
        lambda: fs.open(f"{base}/new", "wb"),
        lambda: fs.pipe(f"{base}/new", b"x"),
        lambda: fs.rm(f"{base}/a.bin"),
        lambda: fs.mkdir(f"{base}/newdir"),
        lambda: fs.touch(f"{base}/new"),
    ):
        with pytest.raises(PermissionError, match="read-only"):
            attempt()
    assert fs.cat_file(f"{base}/a.bin") == tree[f"{base}/a.bin"]


def test_the_filesystem_pickles_and_reads_in_the_copy(
    mounted: Mounted, tree: dict[str, bytes]
) -> None:
    import pickle

    path = f"{_base(tree)}/b.txt"
    copy = pickle.loads(pickle.dumps(mounted.fs))
    assert copy.cat_file(path) == tree[path]


# ---- what training code passes URLs to --------------------------------------------------


@pytest.fixture(scope="module")
def tables(mounted: Mounted) -> tuple[str, Any]:
    base = _fresh_dir(mounted)
    frame = pd.DataFrame({"id": range(1000), "label": [f"l{i % 7}" for i in range(1000)]})
    for part in range(3):
        buffer = io.BytesIO()
        frame.iloc[part * 300 : (part + 1) * 300 + (100 if part == 2 else 0)].to_parquet(buffer)
        mounted.put(f"{base}/parquet/part-{part}.parquet", buffer.getvalue())
    mounted.put(f"{base}/frame.csv", frame.to_csv(index=False).encode())
    return base, frame


def test_pandas_reads_csv_and_parquet_through_reservoir_urls(
    mounted: Mounted, tables: tuple[str, Any]
) -> None:
    base, frame = tables
    options = {"master": mounted.fs.client.config.master}
    csv = pd.read_csv(f"reservoir://{base}/frame.csv", storage_options=options)
    pd.testing.assert_frame_equal(csv, frame)
    part = pd.read_parquet(f"reservoir://{base}/parquet/part-1.parquet", storage_options=options)
    pd.testing.assert_frame_equal(part, frame.iloc[300:600])


def test_a_pyarrow_dataset_reads_every_row_through_the_filesystem(
    mounted: Mounted, tables: tuple[str, Any]
) -> None:
    import pyarrow.dataset as ds

    base, frame = tables
    dataset = ds.dataset(f"{base}/parquet", filesystem=mounted.fs, format="parquet")
    table = dataset.to_table().sort_by("id")
    assert table.column("id").to_pylist() == list(frame["id"])
    assert pq.read_table(f"{base}/parquet/part-0.parquet", filesystem=mounted.fs).num_rows == 300


def test_hugging_face_datasets_loads_parquet_from_reservoir(
    mounted: Mounted, tables: tuple[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RESERVOIR_MASTER", mounted.fs.client.config.master)
    base, frame = tables
    loaded = datasets.load_dataset(
        "parquet",
        data_files=f"reservoir://{base}/parquet/*.parquet",
        split="train",
        cache_dir=str(tmp_path),
    )
    assert sorted(loaded["id"]) == list(frame["id"])


def test_sdk_client_and_filesystem_share_the_namespace(
    mounted: Mounted, tree: dict[str, bytes]
) -> None:
    with Client(mounted.fs.client.config.master) as rs:
        path = f"{_base(tree)}/sub/c.bin"
        assert rs.read(path) == mounted.fs.cat_file(f"reservoir://{path}")


# ---- an error is not an absence ----------------------------------------------------------


def test_with_the_master_killed_find_and_exists_raise_where_a_missing_path_was_false(
    own_cluster: LocalCluster,
) -> None:
    m = Mounted(own_cluster)
    try:
        fs = m.fs
        missing = _fresh_dir(m)
        assert fs.exists(missing) is False  # as s3fs: only "not found" reads as absence
        assert fs.isdir(missing) is False
        assert fs.find(missing) == []
        assert fs.glob(f"{missing}/*") == []
        # Put in S3 only: the cache has never been asked about them, so nothing the client
        # cached can answer for the master.
        base = _fresh_dir(m)
        m.put(f"{base}/a.bin", b"a")
        m.put(f"{base}/sub/b.bin", b"b")
        own_cluster.kill("master")
        for call in (
            lambda: fs.find(base),
            lambda: fs.exists(f"{base}/a.bin"),
            lambda: fs.isfile(f"{base}/a.bin"),
            lambda: fs.isdir(f"{base}/sub"),
            lambda: fs.glob(f"{base}/**/*.bin"),
            lambda: fs.du(base),
            lambda: list(fs.walk(base)),
        ):
            with pytest.raises(ConnectionError):
                call()
    finally:
        m.fs.client.close()
