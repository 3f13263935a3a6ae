"""Fair queues through boto3, on whichever wire protocol this run's botocore speaks, as AWS
has them since July 2025: on a standard queue MessageGroupId names a tenant; one holding 60
messages in flight with 540 more waiting is noisy, and three quiet tenants' messages, sent
after, are handed out before its own. The lease report says who is noisy."""

import json
import urllib.request

import pytest

from conftest import BACKEND


def _send(sqs, url, tenant, count):
    for first in range(0, count, 10):
        entries = [
            {"Id": f"e{i}", "MessageBody": f"{tenant}-{i}", "MessageGroupId": tenant}
            for i in range(first, min(count, first + 10))
        ]
        assert not sqs.send_message_batch(QueueUrl=url, Entries=entries).get("Failed")


def _receive(sqs, url, count):
    got = []
    while len(got) < count:
        answer = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=min(10, count - len(got)),
            VisibilityTimeout=3600,
            AttributeNames=["MessageGroupId"],  # what old and new botocore both take
        )
        messages = answer.get("Messages", [])
        assert messages, f"ran dry after {len(got)}"
        got.extend(messages)
    return got


def test_quiet_tenants_go_before_a_tenant_with_sixty_in_flight(server):
    if BACKEND == "postgres":
        pytest.skip("fair queues are not kept on PostgreSQL yet (issue 34)")
    sqs, url = server.sqs, server.queue()
    _send(sqs, url, "flood", 600)
    assert {m["Attributes"]["MessageGroupId"] for m in _receive(sqs, url, 60)} == {"flood"}
    for tenant in ("a", "b", "c"):
        _send(sqs, url, tenant, 5)
    tenants = [m["Attributes"]["MessageGroupId"] for m in _receive(sqs, url, 10)]
    assert tenants.count("flood") <= 1, tenants

    name = url.rsplit("/", 1)[1]
    with urllib.request.urlopen(f"{server.endpoint}/_leasehold/queues/{name}/leases") as r:
        fairness = json.load(r)["fairness"]
    assert fairness["noisy_groups"] == 1
    assert [t["group"] for t in fairness["noisy_tenants"]] == ["flood"]
