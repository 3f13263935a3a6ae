"""Dead-letter queues, redrive policies, move tasks and permissions through boto3."""

import json
import time
import uuid

import pytest
from botocore.exceptions import ClientError

from conftest import error_code


def arn(server, url):
    return server.attribute(url, "QueueArn")


def redrive(server, dlq_url, max_receive_count):
    return json.dumps({"deadLetterTargetArn": arn(server, dlq_url), "maxReceiveCount": max_receive_count})


def test_redrive_policy_is_validated_and_normalised(server):
    dlq = server.queue()
    with pytest.raises(ClientError) as e:
        server.queue(RedrivePolicy=json.dumps({"deadLetterTargetArn": arn(server, dlq), "maxReceiveCount": 1001}))
    assert error_code(e) == "InvalidParameterValue"
    missing_target = json.dumps({"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:absent", "maxReceiveCount": 3})
    with pytest.raises(ClientError) as e:
        server.queue(RedrivePolicy=missing_target)
    assert error_code(e) == "InvalidParameterValue"
    src = server.queue(RedrivePolicy=json.dumps({"deadLetterTargetArn": arn(server, dlq), "maxReceiveCount": "3"}))
    assert json.loads(server.attribute(src, "RedrivePolicy")) == {
        "deadLetterTargetArn": arn(server, dlq),
        "maxReceiveCount": 3,
    }
    sources = server.sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"]
    assert sources == [src]


def test_redrive_allow_policy_is_enforced(server):
    dlq = server.queue(RedriveAllowPolicy=json.dumps({"redrivePermission": "denyAll"}))
    with pytest.raises(ClientError) as e:
        server.queue(RedrivePolicy=redrive(server, dlq, 3))
    assert error_code(e) == "InvalidParameterValue"


def test_poison_message_moves_to_the_dlq_with_its_id_and_source(server):
    dlq = server.queue()
    src = server.queue(VisibilityTimeout=10, RedrivePolicy=redrive(server, dlq, 2))
    sent = server.sqs.send_message(
        QueueUrl=src, MessageBody="poison", MessageAttributes={"k": {"DataType": "String", "StringValue": "v"}}
    )
    for _ in range(2):
        assert len(server.sqs.receive_message(QueueUrl=src)["Messages"]) == 1
        server.advance(10)
    assert "Messages" not in server.sqs.receive_message(QueueUrl=src)
    moved = server.sqs.receive_message(QueueUrl=dlq, AttributeNames=["All"], MessageAttributeNames=["All"])["Messages"][0]
    assert moved["MessageId"] == sent["MessageId"]
    assert moved["Body"] == "poison"
    assert moved["MessageAttributes"]["k"]["StringValue"] == "v"
    assert moved["Attributes"]["DeadLetterQueueSourceArn"] == arn(server, src)


def test_move_task_redrives_to_the_source_and_resets_the_receive_count(server):
    dlq = server.queue()
    src = server.queue(VisibilityTimeout=10, RedrivePolicy=redrive(server, dlq, 1))
    server.sqs.send_message(QueueUrl=src, MessageBody="m")
    server.sqs.receive_message(QueueUrl=src)
    server.advance(10)
    assert "Messages" not in server.sqs.receive_message(QueueUrl=src)
    with pytest.raises(ClientError) as e:
        server.sqs.start_message_move_task(SourceArn=arn(server, src))
    assert error_code(e) == "InvalidParameterValue"
    handle = server.sqs.start_message_move_task(SourceArn=arn(server, dlq))["TaskHandle"]
    assert handle
    deadline = time.monotonic() + 5
    while True:
        tasks = server.sqs.list_message_move_tasks(SourceArn=arn(server, dlq))["Results"]
        if tasks[0]["Status"] == "COMPLETED" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert tasks[0]["Status"] == "COMPLETED"
    assert tasks[0]["ApproximateNumberOfMessagesMoved"] == 1
    assert tasks[0]["ApproximateNumberOfMessagesToMove"] == 1
    back = server.sqs.receive_message(QueueUrl=src, AttributeNames=["All"])["Messages"][0]
    assert back["Attributes"]["ApproximateReceiveCount"] == "1", "a moved message starts afresh"


def test_move_task_rate_running_status_and_cancel(server):
    dlq = server.queue()
    other = server.queue()
    src = server.queue(VisibilityTimeout=1, RedrivePolicy=redrive(server, dlq, 1))
    for i in range(5):
        server.sqs.send_message(QueueUrl=src, MessageBody=f"m{i}")
    server.sqs.receive_message(QueueUrl=src, MaxNumberOfMessages=10)
    server.advance(1)
    server.sqs.receive_message(QueueUrl=src, MaxNumberOfMessages=10)
    assert server.attribute(dlq, "ApproximateNumberOfMessages") == "5"
    handle = server.sqs.start_message_move_task(
        SourceArn=arn(server, dlq), DestinationArn=arn(server, other), MaxNumberOfMessagesPerSecond=1
    )["TaskHandle"]
    with pytest.raises(ClientError) as e:
        server.sqs.start_message_move_task(SourceArn=arn(server, dlq))
    assert error_code(e) == "InvalidParameterValue"
    running = server.sqs.list_message_move_tasks(SourceArn=arn(server, dlq))["Results"][0]
    assert running["Status"] == "RUNNING"
    assert running["TaskHandle"] == handle
    assert running["MaxNumberOfMessagesPerSecond"] == 1
    assert running["DestinationArn"] == arn(server, other)
    cancelled = server.sqs.cancel_message_move_task(TaskHandle=handle)
    assert cancelled["ApproximateNumberOfMessagesMoved"] < 5
    status = server.sqs.list_message_move_tasks(SourceArn=arn(server, dlq))["Results"][0]["Status"]
    assert status == "CANCELLED"
    with pytest.raises(ClientError) as e:
        server.sqs.cancel_message_move_task(TaskHandle="not-a-handle")
    assert error_code(e) == "InvalidParameterValue"
    with pytest.raises(ClientError) as e:
        server.sqs.start_message_move_task(SourceArn="arn:aws:sqs:us-east-1:000000000000:absent")
    assert error_code(e) == "ResourceNotFoundException"


def test_add_and_remove_permission_build_the_policy(server):
    url = server.queue()
    server.sqs.add_permission(QueueUrl=url, Label="send", AWSAccountIds=["111122223333"], Actions=["SendMessage"])
    policy = json.loads(server.attribute(url, "Policy"))
    statement = policy["Statement"][0]
    assert statement["Sid"] == "send"
    assert statement["Principal"] == {"AWS": "arn:aws:iam::111122223333:root"}
    assert statement["Action"] == "SQS:SendMessage"
    assert statement["Resource"] == arn(server, url)
    with pytest.raises(ClientError) as e:
        server.sqs.add_permission(QueueUrl=url, Label="send", AWSAccountIds=["1"], Actions=["SendMessage"])
    assert error_code(e) == "InvalidParameterValue"
    server.sqs.remove_permission(QueueUrl=url, Label="send")
    attrs = server.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"]).get("Attributes", {})
    assert "Policy" not in attrs
    with pytest.raises(ClientError) as e:
        server.sqs.remove_permission(QueueUrl=url, Label="send")
    assert error_code(e) == "InvalidParameterValue"
