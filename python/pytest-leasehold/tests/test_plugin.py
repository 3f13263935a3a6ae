"""The plugin's own tests: each uses only the `leasehold` fixture, as a user's would."""

import time

import pytest
from botocore.exceptions import ClientError


def test_a_visibility_timeout_of_thirty_seconds_runs_out_after_advance_in_milliseconds(leasehold):
    started = time.monotonic()
    sqs = leasehold.sqs()
    url = sqs.create_queue(QueueName="orders")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="order 1")
    first = sqs.receive_message(QueueUrl=url, VisibilityTimeout=30)["Messages"]
    assert [m["Body"] for m in first] == ["order 1"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url), "leased for 30 s"
    leasehold.advance(29)
    assert "Messages" not in sqs.receive_message(QueueUrl=url), "still leased at 29 s"
    leasehold.advance(2)
    again = sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])["Messages"]
    assert [m["Body"] for m in again] == ["order 1"]
    assert again[0]["Attributes"]["ApproximateReceiveCount"] == "2"
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("run", [1, 2])
def test_each_test_starts_with_no_queues_in_any_region_and_may_reuse_a_name(leasehold, run):
    for region in ("us-east-1", "eu-west-1"):
        sqs = leasehold.sqs(region_name=region)
        assert sqs.list_queues().get("QueueUrls", []) == [], region
        url = sqs.create_queue(QueueName="orders")["QueueUrl"]
        counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        assert counts["Attributes"]["ApproximateNumberOfMessages"] == "0"
        sqs.send_message(QueueUrl=url, MessageBody=f"left by run {run}")


def test_a_refused_jump_says_why(leasehold):
    with pytest.raises(ValueError, match="N >= 0"):
        leasehold.advance(-1)


def test_the_endpoint_serves_a_client_made_by_hand(leasehold):
    import boto3

    sqs = boto3.client(
        "sqs",
        endpoint_url=leasehold.endpoint_url,
        region_name=leasehold.region,
        aws_access_key_id="any",
        aws_secret_access_key="any",
    )
    url = sqs.create_queue(QueueName="by-hand")["QueueUrl"]
    assert url.endswith("/by-hand")
    with pytest.raises(ClientError) as refused:
        sqs.get_queue_url(QueueName="missing")
    code = refused.value.response["Error"]["Code"]
    assert code in ("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue")
