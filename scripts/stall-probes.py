#!/usr/bin/env python3
"""What one client can do to the others: idle connections, waiting receives, many waiters.

    python3 scripts/stall-probes.py target/release/leasehold [idle|waiting|waiters]

Starts the given `leasehold` binary in memory on a free loopback port (for `idle`, under a
1,024-descriptor limit with `--idle-timeout 5`), loads it, and prints what a probe client
saw. Bounded: at most about 30 s per probe; the server is killed at the end.

  idle     1,100 idle connections (as many as connect), then one ListQueues: its status
           (None: no answer within 30 s) and how long it took.
  waiting  10,050 receives waiting 20 s on an empty queue, then ListQueues: status, time.
  waiters  2,000 receives waiting on one queue while one client sends 500 messages one at
           a time: the send's p50 and p99.
"""
import asyncio
import json
import resource
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(action, body):
    data = json.dumps(body).encode()
    return (
        f"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-amz-json-1.0\r\n"
        f"X-Amz-Target: AmazonSQS.{action}\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode() + data


async def call(port, action, body, timeout=30):
    """One request on a new connection: (status, seconds), status None when unanswered."""
    started = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
        writer.write(request(action, body))
        line = await asyncio.wait_for(reader.readline(), timeout)
        writer.close()
        return int(line.split()[1]), time.monotonic() - started
    except (asyncio.TimeoutError, OSError, IndexError, ValueError):
        return None, time.monotonic() - started


class Keep:
    """A connection kept open, optionally with a request sent on it."""

    def __init__(self):
        self.writers = []

    async def open(self, port, payload=None):
        try:
            connecting = asyncio.open_connection("127.0.0.1", port)
            reader, writer = await asyncio.wait_for(connecting, 1)
        except (OSError, asyncio.TimeoutError):
            return
        if payload:
            writer.write(payload)
        self.writers.append((reader, writer))

    def close(self):
        for _, writer in self.writers:
            writer.close()


async def idle(port):
    keep = Keep()
    for _ in range(1100):
        await keep.open(port)
    status, took = await call(port, "ListQueues", {}, timeout=30)
    print(f"idle: {len(keep.writers)} idle connections; ListQueues answered {status} after {took:.2f} s")
    keep.close()


async def waiting(port):
    status, _ = await call(port, "CreateQueue", {"QueueName": "empty"})
    url = f"http://127.0.0.1:{port}/000000000000/empty"
    keep = Keep()
    payload = request("ReceiveMessage", {"QueueUrl": url, "WaitTimeSeconds": 20})
    for start in range(0, 10050, 500):
        await asyncio.gather(*(keep.open(port, payload) for _ in range(start, min(start + 500, 10050))))
    await asyncio.sleep(1)
    status, took = await call(port, "ListQueues", {})
    print(f"waiting: {len(keep.writers)} waiting receives; ListQueues answered {status} after {took * 1000:.1f} ms")
    keep.close()


async def waiters(port):
    await call(port, "CreateQueue", {"QueueName": "busy"})
    url = f"http://127.0.0.1:{port}/000000000000/busy"
    keep = Keep()
    payload = request("ReceiveMessage", {"QueueUrl": url, "WaitTimeSeconds": 20})
    await asyncio.gather(*(keep.open(port, payload) for _ in range(2000)))
    await asyncio.sleep(1)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    times = []
    for i in range(500):
        started = time.monotonic()
        writer.write(request("SendMessage", {"QueueUrl": url, "MessageBody": f"m{i}"}))
        await reader.readline()
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        await reader.read(4096)
        times.append(time.monotonic() - started)
    times.sort()
    print(f"waiters: 2,000 waiting; SendMessage p50 {times[250] * 1000:.2f} ms p99 {times[495] * 1000:.2f} ms")
    writer.close()
    keep.close()


def main():
    binary, probe = sys.argv[1], sys.argv[2]
    port = free_port()
    args = [binary, "serve", "--in-memory", "--bind", f"127.0.0.1:{port}"]
    limit = None
    if probe == "idle":
        limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
        if "--idle-timeout" in subprocess.run([binary, "serve", "--help"], capture_output=True, text=True).stdout:
            args += ["--idle-timeout", "5"]
    server = subprocess.Popen(args, preexec_fn=limit, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        asyncio.run(asyncio.wait_for({"idle": idle, "waiting": waiting, "waiters": waiters}[probe](port), 60))
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
