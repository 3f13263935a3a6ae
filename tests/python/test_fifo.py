"""FIFO queues through boto3: group order, deduplication, sequence numbers, attempts."""

import uuid

import pytest
from botocore.exceptions import ClientError

from conftest import error_code


def fifo_queue(server, **attributes):
    name = f"f-{uuid.uuid4().hex[:10]}.fifo"
    attrs = {"FifoQueue": "true", **{k: str(v) for k, v in attributes.items()}}
    return server.sqs.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]


def bodies(messages):
    return [m["Body"] for m in messages]


def test_fifo_needs_the_suffix_and_the_attribute_together(server):
    with pytest.raises(ClientError) as e:
        server.sqs.create_queue(QueueName="nosuffix", Attributes={"FifoQueue": "true"})
    assert error_code(e) == "InvalidParameterValue"
    with pytest.raises(ClientError) as e:
        server.sqs.create_queue(QueueName="noattr.fifo")
    assert error_code(e) == "InvalidParameterValue"
    url = fifo_queue(server)
    attrs = server.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["FifoQueue"] == "true"
    assert attrs["ContentBasedDeduplication"] == "false"
    assert attrs["DeduplicationScope"] == "queue"
    assert attrs["FifoThroughputLimit"] == "perQueue"


def test_fifo_send_rules(server):
    url = fifo_queue(server)
    with pytest.raises(ClientError) as e:
        server.sqs.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="d")
    assert error_code(e) == "MissingParameter"
    with pytest.raises(ClientError) as e:
        server.sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g")
    assert error_code(e) == "InvalidParameterValue"
    with pytest.raises(ClientError) as e:
        server.sqs.send_message(
            QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d", DelaySeconds=5
        )
    assert error_code(e) == "InvalidParameterValue"


def test_order_within_a_group_and_groups_do_not_block_each_other(server):
    url = fifo_queue(server, ContentBasedDeduplication="true")
    for body, group in [("a1", "a"), ("b1", "b"), ("a2", "a"), ("a3", "a"), ("b2", "b")]:
        server.sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group)
    first = server.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2)["Messages"]
    assert bodies(first) == ["a1", "a2"]
    second = server.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert bodies(second) == ["b1", "b2"], "group a is blocked while a1 and a2 are in flight"
    assert "Messages" not in server.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    for m in first:
        server.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert bodies(server.sqs.receive_message(QueueUrl=url)["Messages"]) == ["a3"]


def test_duplicates_inside_five_minutes_return_the_original_id(server):
    url = fifo_queue(server)
    first = server.sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d")
    again = server.sqs.send_message(QueueUrl=url, MessageBody="y", MessageGroupId="g", MessageDeduplicationId="d")
    assert again["MessageId"] == first["MessageId"]
    assert again["SequenceNumber"] == first["SequenceNumber"]
    assert server.attribute(url, "ApproximateNumberOfMessages") == "1"
    server.advance(300)
    later = server.sqs.send_message(QueueUrl=url, MessageBody="z", MessageGroupId="g", MessageDeduplicationId="d")
    assert later["MessageId"] != first["MessageId"]
    assert int(later["SequenceNumber"]) > int(first["SequenceNumber"])
    # As AWS writes them: 20 digits, no leading zeros.
    assert len(first["SequenceNumber"]) == 20 and not first["SequenceNumber"].startswith("0")
    assert server.attribute(url, "ApproximateNumberOfMessages") == "2"


def test_received_fifo_messages_carry_their_group_dedup_id_and_sequence_number(server):
    url = fifo_queue(server)
    sent = server.sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g1", MessageDeduplicationId="d1")
    m = server.sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"][0]
    assert m["Attributes"]["MessageGroupId"] == "g1"
    assert m["Attributes"]["MessageDeduplicationId"] == "d1"
    assert m["Attributes"]["SequenceNumber"] == sent["SequenceNumber"]


def test_a_retried_receive_attempt_gets_the_same_messages(server):
    url = fifo_queue(server, ContentBasedDeduplication="true")
    server.sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g")
    first = server.sqs.receive_message(QueueUrl=url, ReceiveRequestAttemptId="attempt-1")["Messages"]
    again = server.sqs.receive_message(QueueUrl=url, ReceiveRequestAttemptId="attempt-1")["Messages"]
    assert [m["ReceiptHandle"] for m in again] == [m["ReceiptHandle"] for m in first]


def test_an_expired_handle_cannot_delete_on_a_fifo_queue(server):
    url = fifo_queue(server, ContentBasedDeduplication="true", VisibilityTimeout=30)
    server.sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g")
    handle = server.sqs.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
    server.advance(30)
    with pytest.raises(ClientError) as e:
        server.sqs.delete_message(QueueUrl=url, ReceiptHandle=handle)
    assert error_code(e) == "InvalidParameterValue"
    assert "The receipt handle has expired" in str(e.value)
