#!/usr/bin/env python3
# /metrics/queues (a set of series per queue) with 100,000 queues and three scrapers: what it
# costs other clients.
#   python3 scripts/scrape-stall.py target/release/leasehold 19502
# Starts the server in memory, creates 100,000 queues, then for 12 s runs three scrapers and
# a probe (GetQueueUrl every 5 ms) and prints the probe's latency. The probe shares the
# scrapers' Python process, so its figures include their GIL time: compare builds, not absolutes.
import http.client, json, sys, threading, time, subprocess, statistics
binary, port = sys.argv[1], int(sys.argv[2])
srv = subprocess.Popen([binary, "serve", "--in-memory", "--bind", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(1)
def call(conn, action, body):
    conn.request("POST", "/", json.dumps(body), {"content-type": "application/x-amz-json-1.0", "x-amz-target": "AmazonSQS." + action})
    r = conn.getresponse(); data = r.read(); return r.status, data
def creator(start, n):
    c = http.client.HTTPConnection("127.0.0.1", port)
    for i in range(start, start + n): call(c, "CreateQueue", {"QueueName": f"q{i}"})
ts = [threading.Thread(target=creator, args=(k * 25000, 25000)) for k in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
stop = time.time() + 12
sizes = []
def scraper():
    c = http.client.HTTPConnection("127.0.0.1", port)
    while time.time() < stop:
        c.request("GET", "/metrics/queues"); r = c.getresponse(); sizes.append(len(r.read()))
lat = []
def probe():
    c = http.client.HTTPConnection("127.0.0.1", port)
    while time.time() < stop:
        t = time.time(); call(c, "GetQueueUrl", {"QueueName": "q7"}); lat.append((time.time() - t) * 1000); time.sleep(0.005)
ss = [threading.Thread(target=scraper) for _ in range(3)] + [threading.Thread(target=probe)]
[t.start() for t in ss]; [t.join() for t in ss]
lat.sort()
print(f"{binary}: scrapes {len(sizes)} of {sizes[0]/1e6:.0f} MB; probe {len(lat)} calls p50 {lat[len(lat)//2]:.1f} ms p99 {lat[int(len(lat)*0.99)]:.1f} ms max {lat[-1]:.1f} ms")
srv.kill()
