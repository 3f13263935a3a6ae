"""Leases through boto3: visibility, receive counts, extensions, the 12-hour ceiling, handles."""

import threading
import time

import pytest
from botocore.exceptions import ClientError

from conftest import error_code


def receive_one(sqs, url, **kwargs):
    messages = sqs.receive_message(QueueUrl=url, AttributeNames=["All"], **kwargs).get("Messages", [])
    return messages[0] if messages else None


def test_lease_hides_then_redelivers_with_a_new_handle(server):
    url = server.queue(VisibilityTimeout=30)
    server.sqs.send_message(QueueUrl=url, MessageBody="job")
    first = receive_one(server.sqs, url)
    assert receive_one(server.sqs, url) is None
    assert server.attribute(url, "ApproximateNumberOfMessagesNotVisible") == "1"
    server.advance(30)
    second = receive_one(server.sqs, url)
    assert second["ReceiptHandle"] != first["ReceiptHandle"]
    assert second["Attributes"]["ApproximateReceiveCount"] == "2"
    assert (
        second["Attributes"]["ApproximateFirstReceiveTimestamp"]
        == first["Attributes"]["ApproximateFirstReceiveTimestamp"]
    )


def test_heartbeat_extends_from_now_and_zero_releases(server):
    url = server.queue(VisibilityTimeout=30)
    server.sqs.send_message(QueueUrl=url, MessageBody="job")
    handle = receive_one(server.sqs, url)["ReceiptHandle"]
    for _ in range(5):
        server.advance(20)
        server.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=30)
        assert receive_one(server.sqs, url) is None, "each beat buys 30 s from now"
    server.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
    assert receive_one(server.sqs, url) is not None


def test_twelve_hour_ceiling(server):
    url = server.queue()
    server.sqs.send_message(QueueUrl=url, MessageBody="job")
    handle = receive_one(server.sqs, url)["ReceiptHandle"]
    server.advance(7200)
    with pytest.raises(ClientError) as e:
        server.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=36001)
    assert error_code(e) == "InvalidParameterValue"
    assert "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]" in str(e.value)
    server.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=36000)


def test_aws_mode_stale_handles_still_delete(server):
    url = server.queue(VisibilityTimeout=30)
    server.sqs.send_message(QueueUrl=url, MessageBody="job")
    a = receive_one(server.sqs, url)["ReceiptHandle"]
    server.advance(31)
    b = receive_one(server.sqs, url)["ReceiptHandle"]
    server.sqs.delete_message(QueueUrl=url, ReceiptHandle=a)
    server.sqs.delete_message(QueueUrl=url, ReceiptHandle=a)
    assert server.attribute(url, "ApproximateNumberOfMessagesNotVisible") == "0"
    with pytest.raises(ClientError) as e:
        server.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=b, VisibilityTimeout=5)
    assert error_code(e) == "InvalidParameterValue"
    with pytest.raises(ClientError) as e:
        server.sqs.delete_message(QueueUrl=url, ReceiptHandle="never-issued")
    assert error_code(e) == "ReceiptHandleIsInvalid"


def test_strict_mode_late_delete_does_nothing(strict_server):
    s = strict_server
    url = s.queue(VisibilityTimeout=30)
    s.sqs.send_message(QueueUrl=url, MessageBody="job")
    a = receive_one(s.sqs, url)["ReceiptHandle"]
    s.advance(30)
    b = receive_one(s.sqs, url)["ReceiptHandle"]
    s.sqs.delete_message(QueueUrl=url, ReceiptHandle=a)
    assert s.attribute(url, "ApproximateNumberOfMessagesNotVisible") == "1"
    with pytest.raises(ClientError) as e:
        s.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=a, VisibilityTimeout=5)
    assert error_code(e) == "AWS.SimpleQueueService.MessageNotInflight"
    s.sqs.delete_message(QueueUrl=url, ReceiptHandle=b)
    assert s.attribute(url, "ApproximateNumberOfMessagesNotVisible") == "0"


def test_long_poll_returns_when_a_message_arrives(server):
    url = server.queue()
    result = {}

    def poll():
        started = time.monotonic()
        result["messages"] = server.sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10).get("Messages", [])
        result["took"] = time.monotonic() - started

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.3)
    server.sqs.send_message(QueueUrl=url, MessageBody="wake")
    thread.join(timeout=15)
    assert len(result["messages"]) == 1
    assert result["took"] < 3


def test_the_older_attribute_names_parameter_selects_system_attributes(server):
    url = server.queue()
    server.sqs.send_message(QueueUrl=url, MessageBody="job")
    m = server.sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount", "SentTimestamp"])["Messages"][0]
    assert set(m["Attributes"]) == {"ApproximateReceiveCount", "SentTimestamp"}
    assert m["Attributes"]["ApproximateReceiveCount"] == "1"
