"""Queue actions through boto3: lifecycle, attributes, listing, tags, purge, error codes."""

import pytest
from botocore.exceptions import ClientError

from conftest import error_code


def test_create_get_list_and_delete_a_queue(server):
    sqs = server.sqs
    url = sqs.create_queue(QueueName="boto-life")["QueueUrl"]
    assert url == f"{server.endpoint}/000000000000/boto-life"
    assert sqs.get_queue_url(QueueName="boto-life")["QueueUrl"] == url
    assert url in sqs.list_queues(QueueNamePrefix="boto-life")["QueueUrls"]
    sqs.delete_queue(QueueUrl=url)
    with pytest.raises(ClientError) as e:
        sqs.get_queue_url(QueueName="boto-life")
    assert error_code(e) == "AWS.SimpleQueueService.NonExistentQueue"
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName="boto-life")


def test_create_is_idempotent_only_for_equal_attributes(server):
    sqs = server.sqs
    url = sqs.create_queue(QueueName="boto-idem", Attributes={"DelaySeconds": "3"})["QueueUrl"]
    assert sqs.create_queue(QueueName="boto-idem", Attributes={"DelaySeconds": "3"})["QueueUrl"] == url
    with pytest.raises(ClientError) as e:
        sqs.create_queue(QueueName="boto-idem", Attributes={"DelaySeconds": "4"})
    assert error_code(e) == "QueueAlreadyExists"


@pytest.mark.parametrize(
    "name,value",
    [
        ("VisibilityTimeout", "43201"),
        ("MessageRetentionPeriod", "59"),
        ("MaximumMessageSize", "1048577"),
        ("DelaySeconds", "-1"),
        ("ReceiveMessageWaitTimeSeconds", "21"),
    ],
)
def test_attribute_values_out_of_range_are_invalid_attribute_value(server, name, value):
    with pytest.raises(ClientError) as e:
        server.sqs.create_queue(QueueName="boto-range", Attributes={name: value})
    assert error_code(e) == "InvalidAttributeValue"


def test_unknown_attribute_names_are_refused(server):
    url = server.queue()
    with pytest.raises(ClientError) as e:
        server.sqs.set_queue_attributes(QueueUrl=url, Attributes={"Colour": "blue"})
    assert error_code(e) == "InvalidAttributeName"
    with pytest.raises(ClientError) as e:
        server.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Colour"])
    assert error_code(e) == "InvalidAttributeName"


def test_get_queue_attributes_all(server):
    url = server.queue(VisibilityTimeout=12)
    attrs = server.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["VisibilityTimeout"] == "12"
    assert attrs["QueueArn"] == "arn:aws:sqs:us-east-1:000000000000:" + url.rsplit("/", 1)[1]
    for counter in (
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ):
        assert attrs[counter] == "0"


def test_list_queues_paginates_with_max_results_and_next_token(server):
    for i in range(5):
        server.sqs.create_queue(QueueName=f"boto-page-{i}")
    seen, token = [], None
    while True:
        kwargs = {"QueueNamePrefix": "boto-page-", "MaxResults": 2}
        if token:
            kwargs["NextToken"] = token
        page = server.sqs.list_queues(**kwargs)
        seen += page.get("QueueUrls", [])
        token = page.get("NextToken")
        if not token:
            break
    assert [u.rsplit("/", 1)[1] for u in seen] == [f"boto-page-{i}" for i in range(5)]


def test_a_deleted_name_is_reserved_for_sixty_seconds(server):
    url = server.sqs.create_queue(QueueName="boto-recent")["QueueUrl"]
    server.sqs.delete_queue(QueueUrl=url)
    with pytest.raises(ClientError) as e:
        server.sqs.create_queue(QueueName="boto-recent")
    assert error_code(e) == "AWS.SimpleQueueService.QueueDeletedRecently"
    server.advance(60)
    server.sqs.create_queue(QueueName="boto-recent")


def test_purge_once_a_minute(server):
    url = server.queue()
    server.sqs.send_message(QueueUrl=url, MessageBody="x")
    server.sqs.purge_queue(QueueUrl=url)
    assert server.attribute(url, "ApproximateNumberOfMessages") == "0"
    with pytest.raises(ClientError) as e:
        server.sqs.purge_queue(QueueUrl=url)
    assert error_code(e) == "AWS.SimpleQueueService.PurgeQueueInProgress"


def test_tags(server):
    url = server.sqs.create_queue(QueueName="boto-tags", tags={"a": "1"})["QueueUrl"]
    server.sqs.tag_queue(QueueUrl=url, Tags={"b": "2"})
    assert server.sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"a": "1", "b": "2"}
    server.sqs.untag_queue(QueueUrl=url, TagKeys=["a"])
    assert server.sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"b": "2"}
