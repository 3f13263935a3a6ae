"""pytest-leasehold: one Leasehold server for the test session, in memory on a free loopback
port, with a clock the tests move; every test starts with no queues.

The server is the `leasehold` binary (on PATH, or the file LEASEHOLD_BIN names), started
once per session with time travel on, in a process group of its own, and stopped at the
session's end. The `leasehold` fixture gives a test its endpoint (`endpoint_url`), boto3
clients (`sqs()`) and the clock (`advance(seconds)`): a visibility timeout of 30 s runs out
after `advance(31)`, in milliseconds of wall time.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import boto3
import pytest
from botocore.config import Config

__all__ = ["Leasehold", "LeaseholdServer"]

REGION = "us-east-1"
# AWS keeps a deleted queue's name for 60 seconds; Leasehold does too.
DELETED_NAME_KEPT_S = 60
START_TIMEOUT_S = 20
START_ATTEMPTS = 3
# The plugin's own requests go straight to the server, whatever proxy the environment names.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _binary():
    given = os.environ.get("LEASEHOLD_BIN")
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise pytest.UsageError(f"pytest-leasehold: LEASEHOLD_BIN={given} is not an executable file")
        return os.path.abspath(given)
    found = shutil.which("leasehold")
    if found is None:
        raise pytest.UsageError(
            "pytest-leasehold: no `leasehold` on PATH and LEASEHOLD_BIN is not set: "
            "install Leasehold or set LEASEHOLD_BIN to its binary"
        )
    return found


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_environment():
    """The caller's environment without Leasehold's own settings: every `serve` flag is also a
    LEASEHOLD_* variable, and a developer's (credentials, TLS, a config file) must not
    change the test server."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_")}


class LeaseholdServer:
    """A `leasehold serve --in-memory --time-travel` process on a free loopback port."""

    def __init__(self, binary):
        self.log = tempfile.NamedTemporaryFile(prefix="leasehold-", suffix=".log", delete=False)
        # The port is free when chosen; another process may take it before the server binds
        # it, and the server then exits at once: another port, a few times.
        for attempt in range(1, START_ATTEMPTS + 1):
            self.port = _free_port()
            self.endpoint_url = f"http://127.0.0.1:{self.port}"
            try:
                # A process group of its own, so that stopping it leaves nothing behind.
                self.process = subprocess.Popen(
                    [binary, "serve", "--in-memory", "--time-travel", "--bind", f"127.0.0.1:{self.port}"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=self.log,
                    env=_server_environment(),
                    start_new_session=True,
                )
                self._wait_until_ready()
                return
            except _ExitedEarly:
                self.stop(keep_log=True)
                if attempt == START_ATTEMPTS:
                    raise RuntimeError(f"leasehold exited at start: {self._log_tail()}") from None
            except BaseException:
                self.stop()
                raise

    def _wait_until_ready(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise _ExitedEarly()
            try:
                with _HTTP.open(f"{self.endpoint_url}/health", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.02)
        raise RuntimeError(f"leasehold did not answer within {START_TIMEOUT_S} s: {self._log_tail()}")

    def _log_tail(self):
        with open(self.log.name, encoding="utf-8", errors="replace") as log:
            return log.read()[-2000:].strip() or "(nothing logged)"

    def sqs(self, **client_options):
        """A boto3 SQS client of this server (any key signs: the server checks none)."""
        options = {
            "endpoint_url": self.endpoint_url,
            "region_name": REGION,
            "aws_access_key_id": "test",
            "aws_secret_access_key": "test",
            "config": Config(retries={"max_attempts": 2, "mode": "standard"}),
        }
        options.update(client_options)
        return boto3.client("sqs", **options)

    def advance(self, seconds):
        """Moves the server's clock `seconds` forward; answers its new instant (ms)."""
        request = urllib.request.Request(
            f"{self.endpoint_url}/_leasehold/clock/advance",
            data=json.dumps({"seconds": seconds}).encode(),
            headers={"content-type": "application/json"},
            method="POST",
        )
        try:
            with _HTTP.open(request, timeout=10) as answer:
                return json.loads(answer.read())["now_ms"]
        except urllib.error.HTTPError as refused:
            message = json.loads(refused.read() or b"{}").get("message", refused.reason)
            raise ValueError(f"leasehold refused to advance {seconds} s: {message}") from None

    def delete_all_queues(self):
        """Deletes every queue, in every region, then moves the clock past the minute a
        deleted name is kept, so the next test may create queues of the same names."""
        with _HTTP.open(f"{self.endpoint_url}/_leasehold/api/queues", timeout=10) as answer:
            queues = json.loads(answer.read())["queues"]
        clients = {}
        for queue in queues:
            region = queue["region"]
            if region not in clients:
                clients[region] = self.sqs(region_name=region)
            clients[region].delete_queue(QueueUrl=queue["url"])
        if queues:
            self.advance(DELETED_NAME_KEPT_S + 1)

    def stop(self, keep_log=False):
        process = getattr(self, "process", None)
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if not keep_log:
            self.log.close()
            os.unlink(self.log.name)


class _ExitedEarly(Exception):
    """The server process ended before it answered."""


class Leasehold:
    """What a test gets: the endpoint, boto3 clients and the clock of the session's server."""

    def __init__(self, server):
        self._server = server
        self.endpoint_url = server.endpoint_url
        self.region = REGION

    def sqs(self, **client_options):
        """A boto3 SQS client of the server; keyword arguments go to `boto3.client`."""
        return self._server.sqs(**client_options)

    def advance(self, seconds):
        """Moves the server's clock `seconds` forward (leases, delays and retention follow)."""
        return self._server.advance(seconds)


@pytest.fixture(scope="session")
def leasehold_server():
    """The session's server, started on first use and stopped when the session ends."""
    server = LeaseholdServer(_binary())
    yield server
    server.stop()


@pytest.fixture
def leasehold(leasehold_server):
    """The session's server, with no queues: those of the test before are deleted."""
    leasehold_server.delete_all_queues()
    return Leasehold(leasehold_server)
