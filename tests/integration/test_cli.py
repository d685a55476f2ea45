"""The `reservoir` command against a real cluster, as a user runs it."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from reservoir.cli.main import build_parser
from reservoir.client import Client
from reservoir.local.cluster import LocalCluster
from tests.cli_runs import run_cli as _cli
from tests.conftest import new_mount_path, own_cluster_env


def test_mount_ls_stat_cat_cp_round_trip(
    cluster: LocalCluster, bucket: str, tmp_path: Path
) -> None:
    s3 = cluster.s3_client()
    payload = os.urandom(300_000)
    s3.put_object(Bucket=bucket, Key="cli/a.bin", Body=payload)
    s3.put_object(Bucket=bucket, Key="cli/dir/b.txt", Body=b"hello")
    root = new_mount_path()
    done = _cli(cluster, "mount", root, f"s3://{bucket}/cli", "--endpoint-url", cluster.s3_endpoint)
    assert done.returncode == 0, done.stderr
    assert root in _cli(cluster, "mounts").stdout
    assert _cli(cluster, "ls", root).stdout.split() == ["a.bin", "dir/"]
    listing = json.loads(_cli(cluster, "--json", "ls", "-l", root).stdout)
    assert [(e["path"], e["size"]) for e in listing] == [
        (f"{root}/a.bin", 300_000),
        (f"{root}/dir", 0),
    ]
    stat = json.loads(_cli(cluster, "--json", "stat", f"{root}/a.bin").stdout)
    assert stat["size"] == 300_000 and stat["type"] == "file"
    assert _cli(cluster, "cat", f"{root}/dir/b.txt").stdout == "hello"
    target = tmp_path / "a.bin"
    assert _cli(cluster, "cp", f"{root}/a.bin", str(target)).returncode == 0
    assert target.read_bytes() == payload
    workers = json.loads(_cli(cluster, "--json", "workers").stdout)
    assert len(workers) == 3
    # Each worker's data port (TLS on a secure cluster), for the operator to see and firewall.
    for worker in workers:
        assert re.fullmatch(r"[\w.-]+:\d+", worker["data_address"])


def test_report_right_after_load_wait_counts_every_block_cached(
    cluster: LocalCluster, bucket: str
) -> None:
    s3 = cluster.s3_client()
    for i in range(40):
        s3.put_object(Bucket=bucket, Key=f"load/f{i:02d}.bin", Body=os.urandom(1000 + 40_000 * i))
    root = new_mount_path()
    mounted = _cli(
        cluster,
        "mount",
        root,
        f"s3://{bucket}/load",
        "--endpoint-url",
        cluster.s3_endpoint,
        "--block-size",
        "64KiB",
    )
    assert mounted.returncode == 0, mounted.stderr
    load = _cli(cluster, "--json", "load", root, "--wait")
    assert load.returncode == 0, load.stderr
    assert json.loads(load.stdout)["state"] == "completed"
    report = json.loads(_cli(cluster, "--json", "report", root).stdout)
    assert report["cached_blocks"] == report["blocks"] > 40
    assert report["cached_bytes"] == report["bytes"]


PROGRESS = re.compile(
    r"(pending|running) +\d+%  \S+ of \S+, ETA (-|\d+ s|\d+ min|\d+\.\d h)  \(.*\)"
    r"|completed 100%  (\S+) of \3 in \d+ (s|min)  \(\d+/\d+ blocks, 0 failed, \d+ files.*\)"
)


def test_load_wait_shows_the_share_of_bytes_and_the_time_in_one_unit_on_stderr(
    mounted: Mounted,
) -> None:
    load = _cli(mounted.cluster, "load", mounted.root, "--wait")
    assert load.returncode == 0, load.stderr
    assert re.fullmatch(r"job \S+: completed\n", load.stdout)
    lines = load.stderr.splitlines()
    assert lines and lines[-1].startswith("completed 100%"), load.stderr
    assert all(PROGRESS.fullmatch(line) for line in lines), load.stderr


def test_errors_are_one_line_with_nonzero_exit(cluster: LocalCluster) -> None:
    done = _cli(cluster, "cat", "/not/mounted")
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0
    assert "no such file" in done.stderr
    bad = _cli(cluster, "ls", "/a/../b")
    assert bad.returncode == 1 and ".." in bad.stderr


def test_usage_errors_are_one_line_with_exit_1_and_help_still_exits_0() -> None:
    for argv in (
        ("local", "up", "--bogus"),
        ("local",),
        ("mount", "/only-a-path"),
        ("local", "up", "--workers", "many"),
        (),
    ):
        done = _bare(*argv)
        stderr = done.stderr.decode()
        assert done.returncode == 1 and done.stdout == b"", argv
        assert stderr.count("\n") == 1 and "error:" in stderr and "--help" in stderr, argv
    for argv in (("--help",), ("local", "up", "--help"), ("mount", "--help")):
        done = _bare(*argv)
        assert done.returncode == 0 and b"usage:" in done.stdout, argv


def test_mounting_the_same_mount_twice_is_a_no_op_and_another_uri_there_is_refused(
    cluster: LocalCluster, bucket: str
) -> None:
    cluster.s3_client().put_object(Bucket=bucket, Key="twice/a.txt", Body=b"a")
    root = new_mount_path()
    mount = ("mount", root, f"s3://{bucket}/twice", "--endpoint-url", cluster.s3_endpoint)
    first = _cli(cluster, "--json", *mount)
    assert first.returncode == 0, first.stderr
    assert _cli(cluster, "cat", f"{root}/a.txt").stdout == "a"
    again = _cli(cluster, "--json", *mount)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == json.loads(first.stdout)  # the mount as it was
    mounts = json.loads(_cli(cluster, "--json", "mounts").stdout)
    assert [m["path"] for m in mounts].count(root) == 1
    other = _cli(cluster, "mount", root, f"s3://{bucket}/other", "--endpoint-url",
                 cluster.s3_endpoint)  # fmt: skip
    assert other.returncode == 1 and other.stderr.count("\n") == 1
    assert "already mounted" in other.stderr and f"s3://{bucket}/twice/" in other.stderr
    assert "--replace" in other.stderr
    smaller_blocks = _cli(cluster, *mount, "--block-size", "64KiB")
    assert smaller_blocks.returncode == 1 and "already mounted" in smaller_blocks.stderr


@pytest.mark.parametrize("secure", [False, True], ids=["plain", "secure"])
def test_local_cluster_up_status_down_from_the_command_line(tmp_path: Path, secure: bool) -> None:
    state = str(tmp_path / "state")
    base = [sys.executable, "-m", "reservoir.cli.main", "--state-dir", state]
    env = own_cluster_env()

    def run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args], capture_output=True, text=True, timeout=timeout, env=env
        )

    up = run(
        "local", "up", "--workers", "1", "--gateway", *(["--secure"] if secure else []), timeout=120
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        master = up.stdout.strip()
        status = json.loads(run("--json", "local", "status").stdout)
        assert status["master"] == master
        assert all(p["alive"] for p in status["processes"].values())
        assert "gateway" in status["processes"]
        assert f"gateway {status['gateway']}" in run("local", "status").stdout
        _check_local_gateway(json.loads((tmp_path / "state" / "cluster.json").read_text()))
        # The master address (and for --secure the CA and admin token) come from
        # cluster.json when no flag or variable names them.
        workers = run("--json", "workers")
        assert workers.returncode == 0, workers.stderr
        assert [w["id"] for w in json.loads(workers.stdout)] == ["worker1"]
        recorded = json.loads((tmp_path / "state" / "cluster.json").read_text())
        if secure:
            assert Path(recorded["tls_ca"]).is_file()
            assert sorted(recorded["tokens"]) == ["admin", "reader", "worker", "writer"]
            # Without the CA and a token nothing answers but the health service.
            bare = subprocess.run(
                [sys.executable, "-m", "reservoir.cli.main", "--master", master, "workers"],
                capture_output=True,
                text=True,
                timeout=30,
                env=env,
            )
            assert bare.returncode == 1
        else:
            assert "tls_ca" not in recorded
    finally:
        down = run("local", "down", timeout=120)
    assert down.returncode == 0
    assert not (tmp_path / "state" / "cluster.json").exists()


def _check_local_gateway(recorded: dict[str, Any]) -> None:
    """The gateway `local up --gateway` started answers S3 at the URL cluster.json gives;
    on a secure cluster over HTTPS, to a key of its keys file alone."""
    import boto3
    from botocore.exceptions import ClientError

    secure = "tls_ca" in recorded
    assert recorded["gateway"].startswith("https://" if secure else "http://")
    options: dict[str, Any] = {"endpoint_url": recorded["gateway"], "region_name": "us-east-1"}
    if not secure:
        s3 = boto3.client("s3", aws_access_key_id="any", aws_secret_access_key="any", **options)
        s3.list_buckets()
        return
    options["verify"] = recorded["tls_ca"]
    keys = [line.split() for line in Path(recorded["gateway_keys"]).read_text().splitlines()]
    reader = next(k for k in keys if k[-1] == "reader")
    s3 = boto3.client("s3", aws_access_key_id=reader[0], aws_secret_access_key=reader[1], **options)
    s3.list_buckets()
    stranger = boto3.client("s3", aws_access_key_id=reader[0], aws_secret_access_key="x", **options)
    with pytest.raises(ClientError, match="AccessDenied"):
        stranger.list_buckets()


# ---- conventions: global flags, tables, times, cp, help ---------------------------------

BLOCK = 64 * 1024
MiB = 1024 * 1024
ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00")
# What a Python object dumped as text looks like; none of it belongs in the CLI's output.
REPRS = ("{'", "['", "None", "Inode(", "Mount(", "WorkerRecord(", "CacheRule(", "<", "\\n")


@dataclass(frozen=True)
class Mounted:
    cluster: LocalCluster
    bucket: str
    root: str
    payload: bytes  # root/big.bin: several blocks


@pytest.fixture(scope="module")
def mounted(cluster: LocalCluster) -> Mounted:
    s3 = cluster.s3_client()
    bucket = f"b-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    payload = os.urandom(3 * BLOCK + 1234)
    s3.put_object(Bucket=bucket, Key="d/big.bin", Body=payload)
    s3.put_object(Bucket=bucket, Key="d/sub/small.txt", Body=b"small")
    root = new_mount_path()
    with Client(cluster.master_address) as rs:
        rs.mount(root, f"s3://{bucket}/d", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
    return Mounted(cluster, bucket, root, payload)


def _bare(*args: str) -> subprocess.CompletedProcess[bytes]:
    """The CLI exactly as given: no --master put first, bytes out."""
    return subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", *args],
        capture_output=True,
        timeout=60,
        env={**os.environ},
    )


def _table(text: str) -> list[list[str]]:
    """A table's rows (header first), split on runs of two or more spaces."""
    return [re.split(r"\s{2,}", line.strip()) for line in text.strip().splitlines()]


def test_global_flags_are_accepted_before_and_after_the_subcommand(
    mounted: Mounted, tmp_path: Path
) -> None:
    master = mounted.cluster.master_address
    before = _bare("--master", master, "--json", "ls", mounted.root)
    after = _bare("ls", mounted.root, "--json", "--master", master)
    assert before.returncode == after.returncode == 0, after.stderr
    assert json.loads(before.stdout) == json.loads(after.stdout)
    assert [e["path"].rsplit("/", 1)[-1] for e in json.loads(after.stdout)] == ["big.bin", "sub"]
    # Below a nested subcommand too: the state dir named after `local status` is the one used.
    missing = tmp_path / "no-cluster-here"
    for argv in (
        ("local", "status", "--state-dir", str(missing)),
        ("--state-dir", str(missing), "local", "status"),
    ):
        done = _bare(*argv)
        assert done.returncode == 1 and str(missing) in done.stderr.decode(), argv
    # Given in both places, the one after the subcommand wins; absent, the defaults hold.
    args = build_parser().parse_args(["--master", "a:1", "workers", "-l", "--master", "b:2"])
    assert (args.master, args.json, args.long) == ("b:2", False, True)
    assert build_parser().parse_args(["workers", "--json"]).json is True
    assert build_parser().parse_args(["--json", "token", "hash"]).json is True


def test_tables_have_header_rows_human_units_iso_times_and_no_python_reprs(
    mounted: Mounted,
) -> None:
    cluster, root = mounted.cluster, mounted.root
    submitted = _cli(cluster, "--json", "load", root)
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)
    # Plain JSON: counts are numbers (not protobuf's int64 strings), times ISO 8601.
    assert isinstance(job["total_blocks"], int) and ISO_UTC.fullmatch(job["created"])

    outputs = {}
    for argv in (("workers",), ("workers", "-l"), ("mounts",), ("ls", "-l", root), ("jobs",)):
        done = _cli(cluster, *argv)
        assert done.returncode == 0, done.stderr
        outputs[argv] = done.stdout
    workers = _table(outputs[("workers",)])
    assert workers[0] == [
        "ID", "STATE", "ADDRESS", "DATA PORT", "HOST", "ZONE", "REGION", "CAPACITY", "STARTED",
    ]  # fmt: skip
    assert sorted(r[0] for r in workers[1:]) == ["worker1", "worker2", "worker3"]
    assert all(r[1] == "serving" for r in workers[1:])
    # Zone and region are empty here: the table leaves their cells out.
    assert all(r[-2].endswith("GiB") and ISO_UTC.fullmatch(r[-1]) for r in workers[1:])
    long_rows = _table(outputs[("workers", "-l")].split("\n\n")[0])
    assert long_rows[0][:5] == ["ID", "ADDRESS", "STATE", "USED", "CAPACITY"]
    assert "HIT RATIO" in long_rows[0] and len(long_rows) == 4
    tiers = _table(outputs[("workers", "-l")].split("\n\n")[1])
    assert tiers[0][:3] == ["WORKER", "TIER", "PATH"] and len(tiers) >= 4
    mounts = _table(outputs[("mounts",)])
    assert mounts[0][:2] == ["PATH", "URI"]
    (ours,) = [r for r in mounts if r[0] == root]
    assert ours[3] == "64.0KiB" and ISO_UTC.fullmatch(ours[-1])
    listing = _table(outputs[("ls", "-l", root)])
    assert listing[0] == ["TYPE", "SIZE", "MODIFIED", "NAME"]
    assert listing[1][0] == "file" and listing[1][1] == "193.2KiB" and listing[1][3] == "big.bin"
    assert ISO_UTC.fullmatch(listing[1][2]) and listing[2][3] == "sub/"
    jobs = _table(outputs[("jobs",)])
    assert jobs[0][:3] == ["ID", "STATE", "DONE"] and job["id"] in [r[0] for r in jobs]

    for argv in (("stat", f"{root}/big.bin"), ("job", "show", job["id"]), ("report", root)):
        done = _cli(cluster, *argv)
        assert done.returncode == 0, done.stderr
        outputs[argv] = done.stdout
    assert "BLOCK" in outputs[("stat", f"{root}/big.bin")]
    for argv, text in outputs.items():
        assert not [r for r in REPRS if r in text], (argv, text)


def test_cp_into_a_directory_keeps_the_name_and_cp_to_dash_writes_stdout(
    mounted: Mounted, tmp_path: Path
) -> None:
    master, big = mounted.cluster.master_address, f"{mounted.root}/big.bin"
    into = _bare("--master", master, "cp", big, f"{tmp_path}/")
    assert into.returncode == 0, into.stderr
    assert into.stdout == b"" and b"copied" in into.stderr  # data only on stdout
    assert (tmp_path / "big.bin").read_bytes() == mounted.payload
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "big.bin").stat().st_mode & 0o777 == 0o666 & ~umask
    (tmp_path / "big.bin").unlink()
    existing_dir = _bare("--master", master, "cp", f"{mounted.root}/sub/small.txt", str(tmp_path))
    assert existing_dir.returncode == 0, existing_dir.stderr
    assert os.listdir(tmp_path) == ["small.txt"]
    to_stdout = _bare("--master", master, "cp", big, "-")
    assert to_stdout.returncode == 0, to_stdout.stderr
    assert to_stdout.stdout == mounted.payload


def test_a_failed_cp_leaves_no_partial_file(mounted: Mounted, tmp_path: Path) -> None:
    cluster = mounted.cluster
    missing = _cli(cluster, "cp", f"{mounted.root}/nope.bin", f"{tmp_path}/")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    no_dir = _cli(cluster, "cp", f"{mounted.root}/big.bin", f"{tmp_path}/not-made/")
    assert no_dir.returncode == 1 and "no such directory" in no_dir.stderr
    # A read that fails midway: the first 4 MiB (one copy chunk) are cached, then the
    # object is deleted from S3, so the fetch of the rest fails after a chunk was written.
    s3 = cluster.s3_client()
    payload = os.urandom(5 * MiB)
    s3.put_object(Bucket=mounted.bucket, Key="gone/doomed.bin", Body=payload)
    root = new_mount_path()
    with Client(cluster.master_address) as rs:
        rs.mount(root, f"s3://{mounted.bucket}/gone", endpoint_url=cluster.s3_endpoint,
                 block_size=MiB)  # fmt: skip
        assert rs.read(f"{root}/doomed.bin", 0, 4 * MiB) == payload[: 4 * MiB]
    s3.delete_object(Bucket=mounted.bucket, Key="gone/doomed.bin")
    streamed = _bare("--master", cluster.master_address, "cp", f"{root}/doomed.bin", "-")
    assert streamed.returncode == 1 and streamed.stdout == payload[: 4 * MiB]
    broken = _cli(cluster, "cp", f"{root}/doomed.bin", str(tmp_path / "doomed.bin"))
    assert broken.returncode == 1, broken.stdout
    assert "doomed.bin" in broken.stderr
    assert os.listdir(tmp_path) == []


def test_a_file_added_after_its_directory_was_listed_says_how_to_see_it(
    mounted: Mounted,
) -> None:
    cluster, root = mounted.cluster, mounted.root
    assert _cli(cluster, "ls", f"{root}/sub").returncode == 0  # the listing is now trusted
    cluster.s3_client().put_object(Bucket=mounted.bucket, Key="d/sub/new.txt", Body=b"new")
    unseen = _cli(cluster, "cat", f"{root}/sub/new.txt")
    assert unseen.returncode == 1
    assert "last listing" in unseen.stderr and "RESERVOIR_METADATA_TTL" in unseen.stderr
    assert f"reservoir load-metadata {root}/sub" in unseen.stderr
    assert _cli(cluster, "load-metadata", f"{root}/sub").returncode == 0
    assert _cli(cluster, "cat", f"{root}/sub/new.txt").stdout == "new"


def test_version_and_help_for_every_subcommand_and_option() -> None:
    done = _bare("--version")
    assert done.returncode == 0 and done.stdout.decode().split() == [
        "reservoir",
        metadata.version("reservoir-cache"),
    ]
    missing = []

    def walk(parser: argparse.ArgumentParser, where: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    if not choice.help:
                        missing.append(f"{where} {choice.dest}")
                for name, sub in action.choices.items():
                    walk(sub, f"{where} {name}")
            elif not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{where} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "reservoir")
    assert not missing, f"no help text: {missing}"


def _moments(document: Any, where: str = "") -> list[tuple[str, bool]]:
    """(where, has its partner) for every time field of a JSON document: an ISO 8601
    string `X` needs `X_ms` beside it, and a moment `X_ms` needs `X`."""
    found: list[tuple[str, bool]] = []
    if isinstance(document, list):
        for i, item in enumerate(document):
            found += _moments(item, f"{where}[{i}]")
    elif isinstance(document, dict):
        for key, item in document.items():
            if isinstance(item, str) and ISO_UTC.fullmatch(item):
                found.append((f"{where}.{key}", f"{key}_ms" in document))
            elif key.endswith("_ms") and key.removesuffix("_ms") in document:
                found.append((f"{where}.{key}", True))
            found += _moments(item, f"{where}.{key}")
    return found


def test_every_time_in_every_commands_json_has_its_ms_partner(mounted: Mounted) -> None:
    cluster, root = mounted.cluster, mounted.root
    pinned = json.loads(_cli(cluster, "--json", "pin", f"{root}/sub", "--wait").stdout)
    documents = {"pin": pinned}
    for argv in (
        ("mounts",), ("ls", root), ("ls", f"{root}/big.bin"), ("stat", f"{root}/big.bin"),
        ("jobs",), ("job", "show", pinned["load_job_id"]), ("workers",), ("workers", "-l"),
        ("masters",), ("rules",), ("report", root), ("unpin", f"{root}/sub"),
    ):  # fmt: skip
        done = _cli(cluster, "--json", *argv)
        assert done.returncode == 0, (argv, done.stderr)
        documents[" ".join(argv)] = json.loads(done.stdout)
    moments = _moments(documents)
    # Times of mounts, files, jobs, workers, masters and rules, each with its partner.
    for name in ("created", "mtime", "updated", "started", "since"):
        assert any(where.endswith(f".{name}") for where, _ in moments), name
    assert not [where for where, partnered in moments if not partnered]
    (mount,) = [m for m in documents["mounts"] if m["path"] == root]
    assert ISO_UTC.fullmatch(mount["created"]) and isinstance(mount["created_ms"], int)


def test_ls_of_a_file_lists_that_file_and_ls_lh_is_a_long_listing(mounted: Mounted) -> None:
    cluster, big = mounted.cluster, f"{mounted.root}/big.bin"
    plain = _cli(cluster, "ls", big)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == f"{big}\n"
    (listed,) = json.loads(_cli(cluster, "--json", "ls", big).stdout)
    assert listed["path"] == big and listed["size"] == len(mounted.payload)
    for argv in (("ls", "-lh", big), ("ls", "-l", "-h", big), ("ls", big, "-hl")):
        done = _cli(cluster, *argv)
        assert done.returncode == 0, (argv, done.stderr)
        rows = _table(done.stdout)
        assert rows[0] == ["TYPE", "SIZE", "MODIFIED", "NAME"], argv
        assert rows[1][0] == "file" and rows[1][1] == "193.2KiB" and rows[1][3] == big, argv
    whole = _table(_cli(cluster, "ls", "-lh", mounted.root).stdout)
    assert [r[3] for r in whole[1:]] == ["big.bin", "sub/"]
    assert b"usage:" in _bare("ls", "--help").stdout


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_prints_a_script_made_from_the_parsers(shell: str) -> None:
    done = _bare("completion", shell)
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    script = done.stdout.decode()
    assert "load-metadata" in script and "--json" in script and "credentials" in script
    if shell == "zsh":
        assert script.startswith("#compdef reservoir")
        return
    command = f"{sys.executable} -m reservoir.cli.main"
    sourced = subprocess.run(
        [
            "bash",
            "-c",
            f"source <({command} completion bash) && complete -p reservoir && "
            "COMP_WORDS=(reservoir mou) COMP_CWORD=1 && _shtab_reservoir && "
            'echo "${COMPREPLY[@]}"',
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sourced.returncode == 0 and sourced.stderr == "", sourced.stderr
    assert sourced.stdout.splitlines() == [
        "complete -o bashdefault -F _shtab_reservoir reservoir",
        "mount mounts",
    ]
