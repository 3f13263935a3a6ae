"""/metrics as Prometheus reads it: the body and its content type agree, in both formats,
and Prometheus's own client library parses every family with its samples."""
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text


def scrape(server, accept=None):
    request = urllib.request.Request(f"{server.endpoint}/metrics")
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
