"""Messages through boto3: checksums verified independently, batches, limits, delays."""

import hashlib
import struct

import pytest
from botocore.exceptions import ClientError

from conftest import error_code


def md5_of_attributes(attributes):
    """The documented MD5OfMessageAttributes encoding, written independently of the server."""
    buf = b""
    for name in sorted(attributes):
        value = attributes[name]
        data_type = value["DataType"]
        buf += struct.pack(">I", len(name.encode())) + name.encode()
        buf += struct.pack(">I", len(data_type.encode())) + data_type.encode()
        if "BinaryValue" in value:
            raw = value["BinaryValue"]
            buf += b"\x02" + struct.pack(">I", len(raw)) + raw
        else:
            raw = value["StringValue"].encode()
            buf += b"\x01" + struct.pack(">I", len(raw)) + raw
    return hashlib.md5(buf).hexdigest()


def test_send_receive_delete_with_checksums(server):
    url = server.queue()
    attributes = {
        "city": {"DataType": "String", "StringValue": "Zürich"},
        "count": {"DataType": "Number", "StringValue": "42"},
        "raw": {"DataType": "Binary", "BinaryValue": b"\x00\xffdata"},
        "kind": {"DataType": "String.custom", "StringValue": "x"},
    }
    body = "héllo wörld \U0001F600"
    sent = server.sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attributes)
    assert sent["MD5OfMessageBody"] == hashlib.md5(body.encode()).hexdigest()
    assert sent["MD5OfMessageAttributes"] == md5_of_attributes(attributes)

    got = server.sqs.receive_message(
        QueueUrl=url, MessageAttributeNames=["All"], AttributeNames=["All"]
    )["Messages"]
    assert len(got) == 1
    m = got[0]
    assert m["Body"] == body
    assert m["MessageId"] == sent["MessageId"]
    assert m["MD5OfBody"] == hashlib.md5(body.encode()).hexdigest()
    assert m["MessageAttributes"] == attributes
    assert m["MD5OfMessageAttributes"] == md5_of_attributes(attributes)
    assert m["Attributes"]["ApproximateReceiveCount"] == "1"
    assert set(m["Attributes"]) >= {"SenderId", "SentTimestamp", "ApproximateFirstReceiveTimestamp"}
    server.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert server.attribute(url, "ApproximateNumberOfMessagesNotVisible") == "0"


def test_an_empty_receive_has_no_messages_key(server):
    url = server.queue()
    assert "Messages" not in server.sqs.receive_message(QueueUrl=url)


def test_forbidden_characters_are_invalid_message_contents(server):
    url = server.queue()
    with pytest.raises(ClientError) as e:
        server.sqs.send_message(QueueUrl=url, MessageBody="bad \x00 byte")
    assert error_code(e) == "InvalidMessageContents"


def test_oversized_messages_and_batches_are_refused(server):
    url = server.queue(MaximumMessageSize=1024)
    with pytest.raises(ClientError) as e:
        server.sqs.send_message(QueueUrl=url, MessageBody="x" * 1025)
    assert error_code(e) == "InvalidParameterValue"
    # Entries are held to the queue's limit one by one (AWS-recorded): both fit, so both go.
    sent = server.sqs.send_message_batch(
        QueueUrl=url,
        Entries=[{"Id": "a", "MessageBody": "x" * 600}, {"Id": "b", "MessageBody": "y" * 600}],
    )
    assert [e["Id"] for e in sent["Successful"]] == ["a", "b"]
    # The whole batch is held to SQS's fixed 1 MiB.
    with pytest.raises(ClientError) as e:
        server.sqs.send_message_batch(
            QueueUrl=url,
            Entries=[{"Id": "a", "MessageBody": "x" * 600_000}, {"Id": "b", "MessageBody": "y" * 600_000}],
        )
    assert error_code(e) == "AWS.SimpleQueueService.BatchRequestTooLong"
    assert server.attribute(url, "ApproximateNumberOfMessages") == "2"


def test_batch_errors_use_aws_codes(server):
    url = server.queue()
    cases = [
        ([], "AWS.SimpleQueueService.EmptyBatchRequest"),
        ([{"Id": str(i), "MessageBody": "x"} for i in range(11)], "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"),
        ([{"Id": "no spaces", "MessageBody": "x"}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
        ([{"Id": "a", "MessageBody": "x"}, {"Id": "a", "MessageBody": "y"}], "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"),
    ]
    for entries, code in cases:
        with pytest.raises(ClientError) as e:
            server.sqs.send_message_batch(QueueUrl=url, Entries=entries)
        assert error_code(e) == code


def test_batches_round_trip(server):
    url = server.queue()
    out = server.sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": f"m{i}", "MessageBody": f"body {i}"} for i in range(10)]
    )
    assert len(out["Successful"]) == 10
    assert not out.get("Failed")
    got = server.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == sorted(f"body {i}" for i in range(10))
    deleted = server.sqs.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
    )
    assert len(deleted["Successful"]) == 10
    assert server.attribute(url, "ApproximateNumberOfMessagesNotVisible") == "0"


def test_per_message_delay_and_retention(server):
    url = server.queue(MessageRetentionPeriod=120)
    server.sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=30)
    assert server.attribute(url, "ApproximateNumberOfMessagesDelayed") == "1"
    assert "Messages" not in server.sqs.receive_message(QueueUrl=url)
    server.advance(30)
    assert server.attribute(url, "ApproximateNumberOfMessages") == "1"
    server.advance(90)
    assert server.attribute(url, "ApproximateNumberOfMessages") == "0", "dropped after retention"
