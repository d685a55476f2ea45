"""One more TCP hop in front of an S3 endpoint, as light as a relay gets here: a
`latency_proxy.py` with no latency, whose response direction moves by `os.splice` through
a pipe and never enters Python. boto3 through it is the ceiling of any cache that stands
between the reader and S3 without keeping the bytes: what the hop alone costs. With
`keep_dir` (a tmpfs directory, as the workers' blocks) the hop also keeps every byte it
passes on (`tee` and a splice into a file, no byte in Python): the ceiling of a cache that
keeps what it relays, as Reservoir's workers do on a cold read."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from .s3_servers import HERE, START_TIMEOUT_S, STOP_TIMEOUT_S, free_port


class RelayHop:
    def __init__(self, upstream: str, directory: Path, keep_dir: Path | None = None) -> None:
        """`upstream`: the S3 endpoint URL (http://host:port) the hop relays to; `directory`
        takes its log."""
        self.upstream = urlsplit(upstream).netloc
        self.directory = directory
        self.keep_dir = keep_dir
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def start(self) -> str:
        argv = [
            sys.executable,
            str(HERE / "latency_proxy.py"),
            "--upstream",
            self.upstream,
            "--port",
            str(self.port),
        ]
        if self.keep_dir is not None:
            argv += ["--keep-dir", str(self.keep_dir)]
        log_name = f"relay-hop-{self.port}.log"
        with open(self.directory / log_name, "wb") as log:
            self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the relay hop exited; see {self.directory}/{log_name}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self.endpoint
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None
