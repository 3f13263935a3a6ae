"""/metrics and /metrics/queues as Prometheus reads them: the body and its content type agree,
in both formats, and Prometheus's own client library parses every family with its samples;
/metrics is a fixed set of series whatever the number of queues, /metrics/queues a set per
queue of those its prefix names."""
import urllib.parse
import urllib.request
import uuid

from conftest import Server

from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text


def scrape(server, accept=None, path="/metrics/queues"):
    request = urllib.request.Request(f"{server.endpoint}{path}")
    if accept:
        request.add_header("Accept", accept)
    with urllib.request.urlopen(request) as response:
        return response.headers["Content-Type"], response.read().decode()


def busy(server):
    url = server.queue()
    for i in range(5):
        server.sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")
    for m in server.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]:
        server.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return url.rsplit("/", 1)[1]


def families(parsed):
    return {f.name: f for f in parsed}


def check(found, queue):
    deleted = found["sqs_number_of_messages_deleted"]
    assert deleted.type == "counter"
    assert [s.value for s in deleted.samples if s.labels.get("queue") == queue] == [5.0]
    hold = found["leasehold_lease_hold_seconds"]
    assert hold.type == "histogram"
    buckets = [s for s in hold.samples if s.name.endswith("_bucket") and s.labels["queue"] == queue]
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == 5.0
    count = [s for s in hold.samples if s.name.endswith("_count") and s.labels["queue"] == queue]
    assert [s.value for s in count] == [5.0]
    recent = found["leasehold_lease_hold_recent_seconds"]
    assert {s.labels["quantile"] for s in recent.samples} == {"0.5", "0.9", "0.99", "0.999"}
    # What the alert on a hold time near its lease compares it with.
    lease = found["leasehold_visibility_timeout_seconds"]
    assert lease.type == "gauge"
    assert [s.value for s in lease.samples if s.labels.get("queue") == queue] == [30.0]


def test_the_text_format_is_what_plain_scrapers_get_and_parses(server):
    queue = busy(server)
    content_type, body = scrape(server)
    assert content_type.startswith("text/plain; version=0.0.4")
    assert "# EOF" not in body
    check(families(parse_text(body)), queue)


def test_openmetrics_is_served_to_who_asks_for_it_and_parses(server):
    queue = busy(server)
    content_type, body = scrape(server, "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    assert body.endswith("# EOF\n")
    check(families(parse_openmetrics(body)), queue)


def samples(body):
    """Every sample of a text-format body: (name, labels) -> value."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in parse_text(body) for s in f.samples}


def test_metrics_adds_every_queue_up_in_the_same_series_however_many_queues():
    server = Server()
    try:
        _, before = scrape(server, path="/metrics")
        urls = [server.queue() for _ in range(30)]
        for url in urls:
            server.sqs.send_message(QueueUrl=url, MessageBody="m")
            (m,) = server.sqs.receive_message(QueueUrl=url)["Messages"]
            server.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        server.sqs.send_message(QueueUrl=urls[0], MessageBody="waiting")
        _, after = scrape(server, path="/metrics")
        first, then = samples(before), samples(after)
        assert first.keys() == then.keys()
        assert not [key for key in then if "queue" in dict(key[1])]
        assert then[("leasehold_queues", ())] == 30
        assert then[("sqs_number_of_messages_deleted_total", ())] == 30
        assert then[("sqs_approximate_number_of_messages_visible", ())] == 1
        assert then[("leasehold_lease_hold_seconds_count", ())] == 30
        assert then[("leasehold_finished_messages_by_receive_count", (("receive_count", "1"),))] == 30
        # The server's own gauges are there too, and only there.
        assert ("leasehold_memory_resident_bytes", ()) in then
        _, per_queue = scrape(server)
        assert "leasehold_memory_resident_bytes" not in per_queue
        deleted = {dict(k[1])["queue"]: v for k, v in samples(per_queue).items() if k[0] == "sqs_number_of_messages_deleted_total"}
        assert deleted == {url.rsplit("/", 1)[1]: 1.0 for url in urls}
        # Deleted queues take their figures out of the gauges, not out of the counters,
        # which never fall (Prometheus would take a fall for a restart).
        for url in urls[20:]:
            server.sqs.delete_queue(QueueUrl=url)
        _, later = scrape(server, path="/metrics")
        later = samples(later)
        assert later[("leasehold_queues", ())] == 20
        assert later[("sqs_number_of_messages_deleted_total", ())] == 30
        assert later[("leasehold_lease_hold_seconds_count", ())] == 30
    finally:
        server.stop()


def test_the_per_queue_endpoint_keeps_to_the_queues_its_prefix_names(server):
    tag = uuid.uuid4().hex[:8]
    for name in [f"orders-{tag}-a", f"orders-{tag}-b", f"other-{tag}"]:
        server.sqs.create_queue(QueueName=name)
    prefix = urllib.parse.quote(f"orders-{tag}")
    _, body = scrape(server, path=f"/metrics/queues?prefix={prefix}")
    visible = [s for f in parse_text(body) for s in f.samples if s.name == "sqs_approximate_number_of_messages_visible"]
    assert sorted(s.labels["queue"] for s in visible) == [f"orders-{tag}-a", f"orders-{tag}-b"]
    _, none = scrape(server, path=f"/metrics/queues?prefix=nothing-{tag}")
    assert not [s for f in parse_text(none) for s in f.samples]
