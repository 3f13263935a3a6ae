"""Behaviour recorded on real AWS (LocalStack's snapshots of it) that Leasehold matches,
through boto3 over both protocols."""
import base64
import json
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest
import boto3
from botocore.exceptions import ClientError

from conftest import error_code


def fifo(server, **attributes):
    name = f"f-{uuid.uuid4().hex[:12]}.fifo"
    attrs = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    attrs.update({k: str(v) for k, v in attributes.items()})
    return server.sqs.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]


def test_boolean_attributes_are_read_in_any_case(server):
    name = f"b-{uuid.uuid4().hex[:12]}.fifo"
    # Python's str(True) is "True".
    url = server.sqs.create_queue(
        QueueName=name, Attributes={"FifoQueue": str(True), "ContentBasedDeduplication": "TRUE"}
    )["QueueUrl"]
    assert server.attribute(url, "ContentBasedDeduplication") == "true"


def test_fifo_queue_attribute_is_fixed_but_may_be_said_again(server):
    url = fifo(server)
    server.sqs.set_queue_attributes(QueueUrl=url, Attributes={"FifoQueue": "true"})
    with pytest.raises(ClientError) as e:
        server.sqs.create_queue(QueueName=f"s-{uuid.uuid4().hex[:12]}", Attributes={"FifoQueue": "false"})
    assert error_code(e) == "InvalidAttributeName"


def test_a_fifo_queue_has_no_per_message_delay(server):
    url = fifo(server, DelaySeconds=5)
    server.sqs.send_message(QueueUrl=url, MessageBody="m", MessageGroupId="g", DelaySeconds=0)
    assert "Messages" not in server.sqs.receive_message(QueueUrl=url)
    assert server.attribute(url, "ApproximateNumberOfMessagesDelayed") == "1"


def test_a_purge_clears_the_deduplication_window(server):
    url = fifo(server)
    send = dict(QueueUrl=url, MessageBody="once", MessageGroupId="g", MessageDeduplicationId="d-1")
    first = server.sqs.send_message(**send)
    server.sqs.purge_queue(QueueUrl=url)
    again = server.sqs.send_message(**send)
    assert again["MessageId"] != first["MessageId"]
    got = server.sqs.receive_message(QueueUrl=url)["Messages"]
    assert [m["Body"] for m in got] == ["once"]


def test_message_attribute_names_take_a_star_and_prefixes(server):
    url = server.queue()
    attributes = {
        name: {"DataType": "String", "StringValue": name}
        for name in ["Prefix.one", "Prefix.two", "Other"]
    }
    server.sqs.send_message(QueueUrl=url, MessageBody="m", MessageAttributes=attributes)
    got = server.sqs.receive_message(QueueUrl=url, MessageAttributeNames=["*"], VisibilityTimeout=0)
    assert set(got["Messages"][0]["MessageAttributes"]) == {"Prefix.one", "Prefix.two", "Other"}
    got = server.sqs.receive_message(QueueUrl=url, MessageAttributeNames=["Prefix.*"])
    assert set(got["Messages"][0]["MessageAttributes"]) == {"Prefix.one", "Prefix.two"}


@pytest.mark.parametrize("missing", ["MessageGroupId", "MessageDeduplicationId"])
def test_a_fifo_batch_with_an_entry_missing_its_ids_is_refused_whole(server, missing):
    url = fifo(server, ContentBasedDeduplication="false")
    complete = {"Id": "ok", "MessageBody": "m", "MessageGroupId": "g", "MessageDeduplicationId": "d-1"}
    lacking = {k: v for k, v in dict(complete, Id="bad", MessageDeduplicationId="d-2").items() if k != missing}
    with pytest.raises(ClientError) as e:
        server.sqs.send_message_batch(QueueUrl=url, Entries=[complete, lacking])
    assert error_code(e) == "InvalidParameterValue"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert server.attribute(url, "ApproximateNumberOfMessages") == "0"


def test_attribute_names_may_have_letters_of_any_script(server):
    url = server.queue()
    name = "attr.1øßä"
    server.sqs.send_message(
        QueueUrl=url, MessageBody="m", MessageAttributes={name: {"DataType": "String", "StringValue": "v"}}
    )
    got = server.sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"][0]
    assert got["MessageAttributes"][name]["StringValue"] == "v"


@pytest.mark.parametrize("group", ["", "has space", "x" * 129])
def test_a_standard_queue_checks_a_group_id_as_a_fifo_queue_does(server, group):
    url = server.queue()
    with pytest.raises(ClientError) as e:
        server.sqs.send_message(QueueUrl=url, MessageBody="m", MessageGroupId=group)
    assert error_code(e) == "InvalidParameterValue"


def test_a_trace_id_header_becomes_the_aws_trace_header(server):
    import boto3

    client = boto3.client(
        "sqs", endpoint_url=server.endpoint, region_name="us-east-1",
        aws_access_key_id="test", aws_secret_access_key="test",
    )
    trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"

    def add_trace(request, **_):
        request.headers["X-Amzn-Trace-Id"] = trace

    client.meta.events.register("before-send.sqs.SendMessage", add_trace)
    url = server.queue()
    client.send_message(QueueUrl=url, MessageBody="traced")
    got = server.sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"][0]
    assert got["Attributes"]["AWSTraceHeader"] == trace


def bodies(server, url, **receive):
    got = server.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, **receive)
    return [m["Body"] for m in got.get("Messages", [])], got.get("Messages", [])


def test_a_released_head_is_delivered_while_the_rest_of_its_group_is_in_flight(server):
    url = fifo(server, VisibilityTimeout=30)
    for body, group in [("g1-m1", "g1"), ("g1-m2", "g1"), ("g2-m1", "g2")]:
        server.sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group)
    got = server.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2)["Messages"]
    assert [m["Body"] for m in got] == ["g1-m1", "g1-m2"]
    server.sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"], VisibilityTimeout=0
    )
    assert bodies(server, url)[0] == ["g2-m1", "g1-m1"]


def test_groups_served_with_visibility_zero_come_after_groups_that_waited(server):
    url = fifo(server)
    sends = [("g1-m1", "g1"), ("g2-m1", "g2"), ("g2-m2", "g2"), ("g3-m1", "g3"), ("g1-m2", "g1")]
    for body, group in sends:
        server.sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group)
    first = server.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=3, VisibilityTimeout=0)
    assert [m["Body"] for m in first["Messages"]] == ["g1-m1", "g1-m2", "g2-m1"]
    assert bodies(server, url, VisibilityTimeout=0)[0] == ["g3-m1", "g1-m1", "g1-m2", "g2-m1", "g2-m2"]


def test_an_expired_head_is_delivered_up_to_the_first_message_still_in_flight(server):
    url = fifo(server, VisibilityTimeout=10)
    for body in ["foo", "bar", "baz"]:
        server.sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="g")
    _, got = bodies(server, url)
    handles = {m["Body"]: m["ReceiptHandle"] for m in got}
    server.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handles["bar"], VisibilityTimeout=4)
    server.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handles["baz"], VisibilityTimeout=60)
    server.advance(5)
    assert bodies(server, url)[0] == []
    server.advance(6)
    assert bodies(server, url)[0] == ["foo", "bar"]


def error(excinfo):
    return excinfo.value.response["Error"]["Code"], excinfo.value.response["Error"]["Message"]


@pytest.mark.parametrize("param", ["MessageGroupId", "MessageDeduplicationId"])
def test_a_bad_fifo_id_is_refused_in_aws_words(server, param):
    ids = {"MessageGroupId": "g", "MessageDeduplicationId": "d", param: "has space"}
    with pytest.raises(ClientError) as e:
        server.sqs.send_message(QueueUrl=fifo(server), MessageBody="m", **ids)
    assert error(e) == (
        "InvalidParameterValue",
        f"Value has space for parameter {param} is invalid. Reason: {param} can only include"
        " alphanumeric and punctuation characters. 1 to 128 in length.",
    )


def test_an_empty_string_attribute_is_refused_in_aws_words(server):
    with pytest.raises(ClientError) as e:
        server.sqs.send_message(
            QueueUrl=server.queue(),
            MessageBody="test",
            MessageAttributes={"ErrorDetails": {"StringValue": "", "DataType": "String"}},
        )
    assert error(e) == (
        "InvalidParameterValue",
        "Message (user) attribute 'ErrorDetails' must contain a non-empty value of type 'String'.",
    )


def test_a_control_character_in_an_attribute_value_is_an_invalid_parameter(server):
    url = server.queue()
    with pytest.raises(ClientError) as e:
        server.sqs.send_message(
            QueueUrl=url,
            MessageBody="test",
            MessageAttributes={"attr1": {"StringValue": f"Invalid-{chr(8)},{chr(11)}", "DataType": "String"}},
        )
    assert error_code(e) == "InvalidParameterValue"
    # In a body the same character is InvalidMessageContents.
    with pytest.raises(ClientError) as e:
        server.sqs.send_message(QueueUrl=url, MessageBody=f"Invalid-{chr(8)}")
    assert error_code(e) == "InvalidMessageContents"


def test_an_unknown_queue_is_named_in_each_protocols_words(server):
    with pytest.raises(ClientError) as e:
        server.sqs.get_queue_attributes(QueueUrl=server.queue() + "-gone", AttributeNames=["All"])
    code, message = error(e)
    assert code == "AWS.SimpleQueueService.NonExistentQueue"
    if server.sqs.meta.service_model.protocol == "query":
        assert message == "The specified queue does not exist for this wsdl version."
    else:
        assert message == "The specified queue does not exist."


def test_fifo_queue_attribute_cannot_be_turned_off_or_read_on_a_standard_queue(server):
    with pytest.raises(ClientError) as e:
        server.sqs.set_queue_attributes(QueueUrl=fifo(server), Attributes={"FifoQueue": "false"})
    assert error(e) == (
        "InvalidAttributeValue",
        "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.",
    )
    with pytest.raises(ClientError) as e:
        server.sqs.get_queue_attributes(QueueUrl=server.queue(), AttributeNames=["FifoQueue"])
    assert error_code(e) == "InvalidAttributeName"


def test_a_standard_queue_refuses_fifo_attributes_in_aws_words(server):
    expected = {
        "FifoQueue": "Unknown Attribute FifoQueue.",
        "ContentBasedDeduplication": "Unknown Attribute ContentBasedDeduplication.",
        "DeduplicationScope": "You can specify the DeduplicationScope only when FifoQueue is set to true.",
        "FifoThroughputLimit": "You can specify the FifoThroughputLimit only when FifoQueue is set to true.",
    }
    values = {"FifoQueue": "false", "ContentBasedDeduplication": "false", "DeduplicationScope": "queue",
              "FifoThroughputLimit": "perQueue"}
    for name, message in expected.items():
        with pytest.raises(ClientError) as e:
            server.sqs.create_queue(QueueName=f"s-{uuid.uuid4().hex[:12]}", Attributes={name: values[name]})
        assert error(e) == ("InvalidAttributeName", message)


def test_message_attribute_names_select_as_aws_recorded(server):
    url = server.queue(VisibilityTimeout="0")
    server.sqs.send_message(QueueUrl=url, MessageBody="msg", MessageAttributes={
        "Help.Me": {"DataType": "String", "StringValue": "Me"},
        "Hello": {"DataType": "String", "StringValue": "There"},
        "General": {"DataType": "String", "StringValue": "Kenobi"},
    })
    # The names each selection returns, and the MD5 of just those, as AWS answered.
    recorded = [
        ([], [], None),
        (["All"], ["General", "Hello", "Help.Me"], "4c360f3fdafd970e05fae2f149d997f5"),
        (["*"], ["General", "Hello", "Help.Me"], "4c360f3fdafd970e05fae2f149d997f5"),
        ([".*"], ["General", "Hello", "Help.Me"], "4c360f3fdafd970e05fae2f149d997f5"),
        (["Foo", "Help"], [], None),
        (["Hello", "General"], ["General", "Hello"], "fca026605781cb4126a1e9044df24232"),
        (["Foo", "Hello"], ["Hello"], "a311262e065454b75da111d535b8dacd"),
        (["Hel.*"], ["Hello", "Help.Me"], "83fee93c1bcd8b9a5a923ffacdc636c7"),
        (["AWS."], [], None),
        (["..foo"], [], None),
    ]
    for names, selected, md5 in recorded:
        message = server.sqs.receive_message(QueueUrl=url, MessageAttributeNames=names)["Messages"][0]
        assert sorted(message.get("MessageAttributes", {})) == selected, names
        assert message.get("MD5OfMessageAttributes") == md5, names


def test_add_permission_writes_an_aws_policy_and_removing_the_last_leaves_none(server):
    url = server.queue()
    server.sqs.add_permission(
        QueueUrl=url, Label="crossaccountpermission", AWSAccountIds=["111111111111"], Actions=["ReceiveMessage"]
    )
    policy = json.loads(server.attribute(url, "Policy"))
    arn = server.attribute(url, "QueueArn")
    assert policy == {
        "Version": "2008-10-17",
        "Id": f"{arn}/SQSDefaultPolicy",
        "Statement": [
            {
                "Sid": "crossaccountpermission",
                "Effect": "Allow",
                "Principal": {"AWS": "arn:aws:iam::111111111111:root"},
                "Action": "SQS:ReceiveMessage",
                "Resource": arn,
            }
        ],
    }
    server.sqs.remove_permission(QueueUrl=url, Label="crossaccountpermission")
    answer = server.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])
    assert "Attributes" not in answer
    with pytest.raises(ClientError) as e:
        server.sqs.remove_permission(QueueUrl=url, Label="crossaccountpermission")
    assert error(e) == (
        "InvalidParameterValue",
        "Value crossaccountpermission for parameter Label is invalid. Reason: can't find label.",
    )


def encode_task_handle(task_id, source_arn):
    doc = f'{{"taskId":"{task_id}","sourceArn":"{source_arn}"}}'
    return base64.b64encode(doc.encode()).decode()


def test_a_move_task_handle_is_in_aws_form_and_unknown_tasks_are_not_found(server):
    dlq = server.queue()
    source_arn = server.attribute(dlq, "QueueArn")
    redrive = json.dumps({"deadLetterTargetArn": source_arn, "maxReceiveCount": 1})
    server.queue(RedrivePolicy=redrive)
    server.sqs.send_message(QueueUrl=dlq, MessageBody="m")
    handle = server.sqs.start_message_move_task(SourceArn=source_arn, MaxNumberOfMessagesPerSecond=1)["TaskHandle"]
    decoded = json.loads(base64.b64decode(handle))
    assert list(decoded) == ["taskId", "sourceArn"]
    assert decoded["sourceArn"] == source_arn
    assert server.sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"] == 0

    with pytest.raises(ClientError) as e:
        server.sqs.cancel_message_move_task(TaskHandle="foobared")
    assert error(e) == ("InvalidParameterValue", "Value for parameter TaskHandle is invalid.")
    unknown_source = "arn:aws:sqs:us-east-1:878966065785:test-queue-doesnt-exist-123456"
    with pytest.raises(ClientError) as e:
        server.sqs.cancel_message_move_task(TaskHandle=encode_task_handle(decoded["taskId"], unknown_source))
    assert error(e) == (
        "ResourceNotFoundException",
        "The resource that you specified for the SourceArn parameter doesn't exist.",
    )
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    with pytest.raises(ClientError) as e:
        server.sqs.cancel_message_move_task(
            TaskHandle=encode_task_handle("10f57157-fc38-4da9-a113-4de7e12d05aa", source_arn)
        )
    assert error(e) == ("ResourceNotFoundException", "Task does not exist.")


def http_get(url, params=None, accept=None):
    """A plain GET, as a browser or curl sends one to a queue URL (the query protocol)."""
    if params:
        url = f"{url}?{urllib.parse.urlencode(params)}"
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, response.headers["content-type"], response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["content-type"], e.read().decode()


@pytest.mark.parametrize("accept", [None, "application/json"])
def test_a_get_on_a_queue_url_without_an_action_is_an_unknown_operation(server, accept):
    status, _, body = http_get(server.queue(), accept=accept)
    assert (status, body) == (404, "<UnknownOperationException/>")


@pytest.mark.parametrize("action", ["CreateQueue", "ListQueues"])
def test_actions_about_no_one_queue_are_invalid_at_a_queue_url(server, action):
    url = server.queue()
    status, _, body = http_get(url, {"Action": action, "QueueName": f"x-{uuid.uuid4().hex[:8]}"})
    assert status == 400
    assert "<Code>InvalidAction</Code>" in body
    assert f"<Message>The action {action} is not valid for this endpoint.</Message>" in body
    status, content_type, body = http_get(url, {"Action": action}, accept="application/json")
    assert (status, content_type) == (400, "application/json")
    error = json.loads(body)["Error"]
    assert (error["Code"], error["Message"]) == ("InvalidAction", f"The action {action} is not valid for this endpoint.")


def test_a_query_get_that_accepts_json_gets_json(server):
    url = server.queue()
    status, content_type, body = http_get(
        url, {"Action": "GetQueueAttributes", "AttributeName.1": "All"}, accept="application/json"
    )
    assert (status, content_type) == (200, "application/json")
    doc = json.loads(body)
    attributes = doc["GetQueueAttributesResponse"]["GetQueueAttributesResult"]["Attributes"]
    arn = next(a["Value"] for a in attributes if a["Name"] == "QueueArn")
    assert arn.startswith("arn:aws:sqs:") and arn.endswith(url.split("/")[-1])
    assert doc["GetQueueAttributesResponse"]["ResponseMetadata"]["RequestId"]


def client_in(server, region):
    return boto3.client(
        "sqs",
        endpoint_url=server.endpoint,
        region_name=region,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


def test_the_same_name_in_two_regions_is_two_queues(server):
    name = f"r-{uuid.uuid4().hex[:12]}"
    east, frankfurt = client_in(server, "us-east-1"), client_in(server, "eu-central-1")
    east_url = east.create_queue(QueueName=name)["QueueUrl"]
    frankfurt_url = frankfurt.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "7"})["QueueUrl"]
    assert east_url != frankfurt_url
    assert frankfurt_url.endswith(f"/queue/eu-central-1/000000000000/{name}")
    arn = lambda client, url: client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    assert arn(east, east_url) == f"arn:aws:sqs:us-east-1:000000000000:{name}"
    assert arn(frankfurt, frankfurt_url) == f"arn:aws:sqs:eu-central-1:000000000000:{name}"
    assert frankfurt.get_queue_url(QueueName=name)["QueueUrl"] == frankfurt_url
    assert east.get_queue_url(QueueName=name)["QueueUrl"] == east_url
    assert frankfurt.list_queues(QueueNamePrefix=name)["QueueUrls"] == [frankfurt_url]
    assert east.list_queues(QueueNamePrefix=name)["QueueUrls"] == [east_url]

    frankfurt.send_message(QueueUrl=frankfurt_url, MessageBody="only in frankfurt")
    assert "Messages" not in east.receive_message(QueueUrl=east_url)
    got = frankfurt.receive_message(QueueUrl=frankfurt_url)["Messages"]
    assert [m["Body"] for m in got] == ["only in frankfurt"]

    # A name cannot reach into another region.
    with pytest.raises(ClientError) as e:
        east.get_queue_url(QueueName=f"eu-central-1/{name}")
    assert error_code(e) == "AWS.SimpleQueueService.NonExistentQueue"
    with pytest.raises(ClientError) as e:
        east.create_queue(QueueName=f"eu-central-1/{name}-x")
    assert error_code(e) == "InvalidParameterValue"

    # A dead-letter queue is in its source's region.
    with pytest.raises(ClientError) as e:
        frankfurt.create_queue(
            QueueName=f"{name}-src",
            Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": arn(east, east_url), "maxReceiveCount": 1})},
        )
    assert error_code(e) == "InvalidParameterValue"


def test_a_host_naming_a_region_puts_the_request_there(server):
    name = f"h-{uuid.uuid4().hex[:12]}"
    paris = client_in(server, "eu-west-3")
    url = paris.create_queue(QueueName=name)["QueueUrl"]
    request = urllib.request.Request(
        f"{server.endpoint}/?{urllib.parse.urlencode({'Action': 'ListQueues', 'QueueNamePrefix': name})}",
        headers={"Host": f"sqs.eu-west-3.localhost:{server.port}"},
    )
    with urllib.request.urlopen(request) as response:
        body = response.read().decode()
    # Addressed through a host that names the region, the URL needs no region path.
    assert f"<QueueUrl>http://sqs.eu-west-3.localhost:{server.port}/000000000000/{name}</QueueUrl>" in body
    assert url.endswith(f"/queue/eu-west-3/000000000000/{name}")
