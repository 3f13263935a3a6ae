"""A real Prometheus (Debian's `prometheus`, which scripts/preflight installs) scrapes a real
server, embedded or on PostgreSQL as the run's backend is, and is asked back over its HTTP
API: the lease-hold histogram, late deletes, queue depth and the oldest message's age arrive
with their labels from `/metrics/queues`, and the server's totals from `/metrics`."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

from conftest import EXPECTED_PROTOCOL, Server, _free_port

pytestmark = pytest.mark.skipif(
    EXPECTED_PROTOCOL == "query",
    reason="the same /metrics over either protocol: scraped once per backend, in the JSON run",
)


class Prometheus:
    """`prometheus` scraping `target` every second, in its own process group and directory: its
    totals (`/metrics`, job `leasehold`) and each queue's series (`/metrics/queues`, job
    `leasehold-queues`), as docs/operations.md configures it."""

    def __init__(self, target):
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is missing: scripts/preflight installs it (Debian's prometheus)")
        self.dir = tempfile.mkdtemp()
        self.port = _free_port()
        config = os.path.join(self.dir, "prometheus.yml")
        with open(config, "w") as f:
            f.write(
                "global:\n  scrape_interval: 1s\n"
                "scrape_configs:\n  - job_name: leasehold\n"
                f"    static_configs:\n      - targets: ['{target}']\n"
                "  - job_name: leasehold-queues\n    metrics_path: /metrics/queues\n"
                f"    static_configs:\n      - targets: ['{target}']\n"
            )
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={os.path.join(self.dir, 'data')}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def query(self, expression):
        """The instant vector `expression` gives now: (labels, value) pairs."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
        with urllib.request.urlopen(url, timeout=5) as response:
            answer = json.loads(response.read())
        assert answer["status"] == "success", answer
        return [(r["metric"], float(r["value"][1])) for r in answer["data"]["result"]]

    def wait_for(self, expression, done, limit_s=30):
        """Asks `expression` until `done(result)`, for at most `limit_s` seconds."""
        deadline = time.monotonic() + limit_s
        result = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("prometheus exited")
            try:
                result = self.query(expression)
                if done(result):
                    return result
            except OSError:
                pass  # not listening yet
            time.sleep(0.25)
        raise AssertionError(f"{expression}: {result} after {limit_s} s")

    def stop(self):
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_a_real_prometheus_scrapes_the_lease_series_with_their_labels():
    server = Server()
    prometheus = None
    try:
        prometheus = Prometheus(f"127.0.0.1:{server.port}")
        sqs = server.sqs
        busy = server.queue(VisibilityTimeout=30)
        for i in range(5):
            sqs.send_message(QueueUrl=busy, MessageBody=f"m{i}")
        for m in sqs.receive_message(QueueUrl=busy, MaxNumberOfMessages=10)["Messages"]:
            sqs.delete_message(QueueUrl=busy, ReceiptHandle=m["ReceiptHandle"])
        sqs.send_message(QueueUrl=busy, MessageBody="waiting")
        slow = server.queue(VisibilityTimeout=1)
        sqs.send_message(QueueUrl=slow, MessageBody="late")
        (late,) = sqs.receive_message(QueueUrl=slow)["Messages"]
        server.advance(5)  # the work outlived its 1 s lease
        sqs.delete_message(QueueUrl=slow, ReceiptHandle=late["ReceiptHandle"])
        busy_name, slow_name = busy.rsplit("/", 1)[1], slow.rsplit("/", 1)[1]

        prometheus.wait_for('up{job="leasehold"}', lambda r: r and r[0][1] == 1.0)
        prometheus.wait_for('up{job="leasehold-queues"}', lambda r: r and r[0][1] == 1.0)
        # The late delete came last: once a scrape shows it, it shows everything before it.
        prometheus.wait_for(
            f'leasehold_late_deletes_total{{queue="{slow_name}"}}', lambda r: r and r[0][1] == 1.0
        )
        held = prometheus.query(f'leasehold_lease_hold_seconds_count{{queue="{busy_name}"}}')
        assert [v for _, v in held] == [5.0], held
        labels = held[0][0]
        assert labels["job"] == "leasehold-queues" and labels["instance"] == f"127.0.0.1:{server.port}"
        buckets = prometheus.query(f'leasehold_lease_hold_seconds_bucket{{queue="{busy_name}"}}')
        assert {b["le"] for b, _ in buckets} >= {"0.1", "+Inf"}
        assert [v for b, v in buckets if b["le"] == "+Inf"] == [5.0]
        (median,) = prometheus.query(
            f'histogram_quantile(0.5, leasehold_lease_hold_seconds_bucket{{queue="{busy_name}"}})'
        )
        assert 0 < median[1] <= 0.1, median
        assert [v for _, v in prometheus.query(f'leasehold_late_deletes_total{{queue="{slow_name}"}}')] == [1.0]
        assert [v for _, v in prometheus.query(f'leasehold_late_deletes_total{{queue="{busy_name}"}}')] == [0.0]
        depth = prometheus.query(f'sqs_approximate_number_of_messages_visible{{queue="{busy_name}"}}')
        assert [v for _, v in depth] == [1.0]
        (age,) = prometheus.query(f'sqs_approximate_age_of_oldest_message_seconds{{queue="{busy_name}"}}')
        # The server's clock was moved 5 s on after the message was sent.
        assert age[1] >= 5.0, age
        assert age[0]["queue"] == busy_name
        # The totals: one series each, no queue label, every queue's figures added up.
        prometheus.wait_for('leasehold_late_deletes_total{job="leasehold"}', lambda r: r and r[0][1] == 1.0)
        (late_total,) = prometheus.query('leasehold_late_deletes_total{job="leasehold"}')
        assert "queue" not in late_total[0], late_total
        assert [v for _, v in prometheus.query('leasehold_queues{job="leasehold"}')] == [2.0]
        assert [v for _, v in prometheus.query('leasehold_lease_hold_seconds_count{job="leasehold"}')] == [6.0]
    finally:
        if prometheus is not None:
            prometheus.stop()
        server.stop()
