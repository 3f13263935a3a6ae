#!/usr/bin/env python3
"""A backlog bigger than memory: boto3 sends MESSAGES of SIZE KiB from 8 threads to a durable
server (fsync always) running in a memory cgroup of its own, while its resident memory is
sampled; then the server is killed and started again in the same cgroup, and the restart and
the stored count are measured. Needs root (cgroups) and boto3.

  .venv/bin/python scripts/bench-backlog.py --binary target/release/leasehold \
      --messages 15000 --size-kib 200 --cgroup-mb 1024

Small messages go faster in batches: --batch 10 sends SendMessageBatch of ten. With
--postgres URL the server keeps its queues there instead (give it a schema of its own:
postgres://postgres@127.0.0.1:5432/test?options=-c%20search_path%3Dbacklog).
Prints one JSON object.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import boto3
from botocore.config import Config


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_cgroup(limit):
    name = f"leasehold-bench-{os.getpid()}"
    unified = "/sys/fs/cgroup/cgroup.controllers"
    if os.path.exists(unified) and "memory" in open(unified).read():
        path, limit_file = f"/sys/fs/cgroup/{name}", "memory.max"
    else:
        path, limit_file = f"/sys/fs/cgroup/memory/{name}", "memory.limit_in_bytes"
    os.mkdir(path)
    with open(os.path.join(path, limit_file), "w") as f:
        f.write(str(limit))
    return path


def start(binary, data, cgroup, log, postgres=None):
    port = free_port()
    store = ["--postgres", postgres] if postgres else ["--data-dir", data]
    join = f"echo $$ > {cgroup}/cgroup.procs && " if cgroup else ""
    started = time.monotonic()
    proc = subprocess.Popen(
        ["sh", "-c", join + 'exec "$0" "$@"', binary, "serve",
         "--bind", f"127.0.0.1:{port}", *store],
        stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"the server exited with {proc.returncode}")
            time.sleep(0.01)
    return proc, port, time.monotonic() - started


def rss(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--messages", type=int, default=15000)
    parser.add_argument("--size-kib", type=float, default=200)
    parser.add_argument("--cgroup-mb", type=int, default=0, help="0: no cgroup")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--postgres", help="serve from this PostgreSQL URL instead")
    args = parser.parse_args()

    cgroup = make_cgroup(args.cgroup_mb << 20) if args.cgroup_mb else None
    data = tempfile.mkdtemp(prefix="leasehold-backlog-")
    log = open(os.path.join(data, "..", os.path.basename(data) + ".log"), "w")
    result = {"messages": args.messages, "size_kib": args.size_kib,
              "cgroup_mb": args.cgroup_mb}
    try:
        proc, port, _ = start(args.binary, os.path.join(data, "d"), cgroup, log, args.postgres)
        endpoint = f"http://127.0.0.1:{port}"
        config = Config(retries={"mode": "standard", "max_attempts": 20},
                        max_pool_connections=args.threads * 2)
        sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                           aws_access_key_id="x", aws_secret_access_key="x", config=config)
        url = sqs.create_queue(QueueName="backlog")["QueueUrl"]
        body = "x" * int(args.size_kib * 1024)
        peak, sampling = [0], [True]

        def sample():
            while sampling[0]:
                peak[0] = max(peak[0], rss(proc.pid))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        acked, failed, lock = [0], [0], threading.Lock()

        def produce(index):
            mine = range(index, args.messages // args.batch, args.threads)
            for _ in mine:
                try:
                    if args.batch == 1:
                        sqs.send_message(QueueUrl=url, MessageBody=body)
                        n = 1
                    else:
                        entries = [{"Id": str(i), "MessageBody": body}
                                   for i in range(args.batch)]
                        out = sqs.send_message_batch(QueueUrl=url, Entries=entries)
                        n = len(out.get("Successful", []))
                    with lock:
                        acked[0] += n
                except Exception:
                    with lock:
                        failed[0] += 1

        started = time.monotonic()
        threads = [threading.Thread(target=produce, args=(i,)) for i in range(args.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        sampling[0] = False
        sampler.join()
        alive = proc.poll() is None
        result.update({
            "acknowledged": acked[0], "failed_calls": failed[0],
            "stored_mib": round(acked[0] * args.size_kib / 1024),
            "send_seconds": round(elapsed, 1),
            "messages_per_second": round(acked[0] / elapsed),
            "server_alive": alive, "peak_rss_mib": peak[0] >> 20,
            "rss_after_mib": rss(proc.pid) >> 20,
        })
        if alive:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc, port, restart = start(args.binary, os.path.join(data, "d"), cgroup, log, args.postgres)
        sqs = boto3.client("sqs", endpoint_url=f"http://127.0.0.1:{port}",
                           region_name="us-east-1", aws_access_key_id="x",
                           aws_secret_access_key="x", config=config)
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        result.update({
            "restart_seconds": round(restart, 2),
            "stored_after_restart": int(attrs["ApproximateNumberOfMessages"]),
            "rss_after_restart_mib": rss(proc.pid) >> 20,
            "data_file_mib": None if args.postgres else
            os.path.getsize(os.path.join(data, "d", "leasehold.db")) >> 20,
        })
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        shutil.rmtree(data, ignore_errors=True)
        if cgroup:
            for _ in range(50):
                try:
                    os.rmdir(cgroup)
                    break
                except OSError:
                    time.sleep(0.1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
