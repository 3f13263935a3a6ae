"""Runs the real `leasehold` binary on a free loopback port and hands boto3 clients to tests."""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

ROOT = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("LEASEHOLD_BIN", ROOT / "target" / "debug" / "leasehold"))
# LEASEHOLD_TEST_BACKEND=postgres (scripts/test's third run) serves the suite from the
# machine's PostgreSQL, each server in a schema of its own, instead of from memory.
BACKEND = os.environ.get("LEASEHOLD_TEST_BACKEND", "embedded")
POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/test"


def _psql(sql):
    subprocess.run(["psql", POSTGRES_URL, "-qAtc", sql], check=True, capture_output=True)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *extra_args, scheme="http", verify=None, key=("test", "test")):
        if not BINARY.exists():
            raise RuntimeError(f"{BINARY} is missing: run `cargo build` first (scripts/test does)")
        self.port = _free_port()
        host = "localhost" if scheme == "https" else "127.0.0.1"
        self.endpoint = f"{scheme}://{host}:{self.port}"
        self.verify = verify
        self.schema = None
        self.key_dir = None
        storage = ["--in-memory"]
        if BACKEND == "postgres":
            self.schema = f"leasehold_pytest_{uuid.uuid4().hex[:12]}"
            _psql(f"CREATE SCHEMA {self.schema}")
            # Encrypted there too, as the embedded default is: a key file made on the
            # schema's first start, removed with it.
            self.key_dir = tempfile.mkdtemp(prefix="leasehold-pytest-")
            storage = [
                "--postgres",
                f"{POSTGRES_URL}?options=-c%20search_path%3D{self.schema}",
                "--encryption-key-file",
                os.path.join(self.key_dir, "encryption.key"),
            ]
        self.process = subprocess.Popen(
            [str(BINARY), "serve", "--bind", f"127.0.0.1:{self.port}", *storage, "--time-travel", *extra_args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.process.stderr.read().decode()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("server did not start listening within 20 s")
        self.sqs = self.client(*key)

    def client(self, access_key, secret, region="us-east-1"):
        """A boto3 client of this server signing with this key."""
        return boto3.client(
            "sqs",
            endpoint_url=self.endpoint,
            region_name=region,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret,
            verify=self.verify,
            config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=30),
        )

    def advance(self, seconds):
        request = urllib.request.Request(
            f"{self.endpoint}/_leasehold/clock/advance",
            data=json.dumps({"seconds": seconds}).encode(),
            headers={"content-type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request) as response:
            assert response.status == 200
            return json.loads(response.read())["now_ms"]

    def queue(self, **attributes):
        name = f"q-{uuid.uuid4().hex[:12]}"
        attrs = {k: str(v) for k, v in attributes.items()}
        return self.sqs.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]

    def attribute(self, url, name):
        return self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[name])["Attributes"][name]

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.schema:
            _psql(f"DROP SCHEMA {self.schema} CASCADE")
        if self.key_dir:
            shutil.rmtree(self.key_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def strict_server():
    s = Server("--lease-mode", "strict")
    yield s
    s.stop()


# The wire protocol this run's botocore speaks to SQS: scripts/test runs the suite once per
# protocol, each in its own virtualenv, and says which one it expects.
EXPECTED_PROTOCOL = os.environ.get("LEASEHOLD_EXPECT_PROTOCOL")


def error_code(excinfo):
    return excinfo.value.response["Error"]["Code"]
