"""Signatures, accounts and HTTPS through boto3 and the aws CLI, against the real binary:
the right key works; a wrong key, an unknown key, another account, an old timestamp or a
tampered body fail with AWS's codes; presigned URLs work (query protocol); HTTPS with a
test CA."""
import datetime
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import botocore.auth
import pytest
import trustme
from botocore.exceptions import ClientError

from conftest import EXPECTED_PROTOCOL, Server, error_code

ALICE = ("AKIDALICE", "alice-secret", "111111111111")
BOB = ("AKIDBOB", "bob-secret", "222222222222")
AWS = Path(sys.executable).parent / "aws"
NO_QUEUE = "AWS.SimpleQueueService.NonExistentQueue"


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    credentials = tmp_path_factory.mktemp("keys") / "credentials"
    credentials.write_text(
        "".join(
            f"[{key}]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\naccount_id = {account}\n"
            for key, secret, account in (ALICE, BOB)
        )
    )
    server = Server("--credentials", str(credentials), key=ALICE[:2])
    yield server
    server.stop()


def name():
    return f"auth-{uuid.uuid4().hex[:10]}"


def test_the_right_key_works_and_queues_belong_to_its_account(signed):
    url = signed.sqs.create_queue(QueueName=name())["QueueUrl"]
    assert f"/{ALICE[2]}/" in url
    signed.sqs.send_message(QueueUrl=url, MessageBody="signed")
    got = signed.sqs.receive_message(QueueUrl=url)["Messages"]
    assert [m["Body"] for m in got] == ["signed"]


def test_a_wrong_secret_or_an_unknown_key_is_refused(signed):
    with pytest.raises(ClientError) as wrong:
        signed.client(ALICE[0], "not-the-secret").list_queues()
    assert error_code(wrong) == "SignatureDoesNotMatch"
    assert wrong.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(ClientError) as unknown:
        signed.client("AKIDNOBODY", "x").list_queues()
    assert error_code(unknown) == "InvalidClientTokenId"


def test_another_account_cannot_see_the_queue(signed):
    queue = name()
    url = signed.sqs.create_queue(QueueName=queue)["QueueUrl"]
    bob = signed.client(*BOB[:2])
    assert url not in bob.list_queues().get("QueueUrls", [])
    with pytest.raises(ClientError) as foreign:
        bob.send_message(QueueUrl=url, MessageBody="not mine")
    assert error_code(foreign) == NO_QUEUE
    with pytest.raises(ClientError) as by_name:
        bob.get_queue_url(QueueName=queue)
    assert error_code(by_name) == NO_QUEUE
    signed.sqs.add_permission(QueueUrl=url, Label="bob", AWSAccountIds=[BOB[2]], Actions=["SendMessage"])
    bob.send_message(QueueUrl=url, MessageBody="allowed")
    assert signed.attribute(url, "ApproximateNumberOfMessages") == "1"


def test_an_old_timestamp_is_refused(signed, monkeypatch):
    real = datetime.datetime

    class TwentyMinutesAgo(real):
        @classmethod
        def utcnow(cls):
            return real.utcnow() - datetime.timedelta(minutes=20)

        @classmethod
        def now(cls, tz=None):
            return real.now(tz) - datetime.timedelta(minutes=20)

    client = signed.client(*ALICE[:2])
    monkeypatch.setattr(botocore.auth.datetime, "datetime", TwentyMinutesAgo)
    with pytest.raises(ClientError) as old:
        client.list_queues()
    monkeypatch.undo()
    assert error_code(old) == "RequestExpired"
    assert "Signature expired" in old.value.response["Error"]["Message"]


def test_a_body_changed_after_signing_is_refused_and_not_sent(signed):
    url = signed.sqs.create_queue(QueueName=name())["QueueUrl"]
    client = signed.client(*ALICE[:2])

    def tamper(request, **_):
        # The JSON protocol's body is bytes, the query protocol's a str.
        swap = (b"honest", b"forged") if isinstance(request.body, bytes) else ("honest", "forged")
        request.body = request.body.replace(*swap)

    client.meta.events.register("before-send.sqs.SendMessage", tamper)
    with pytest.raises(ClientError) as tampered:
        client.send_message(QueueUrl=url, MessageBody="honest")
    assert error_code(tampered) == "SignatureDoesNotMatch"
    assert signed.attribute(url, "ApproximateNumberOfMessages") == "0"


@pytest.mark.skipif(EXPECTED_PROTOCOL != "query", reason="a presigned URL carries a query-protocol request")
def test_a_presigned_url_sends_until_it_expires(signed):
    url = signed.sqs.create_queue(QueueName=name())["QueueUrl"]
    link = signed.sqs.generate_presigned_url(
        "send_message", Params={"QueueUrl": url, "MessageBody": "by link"}, ExpiresIn=60, HttpMethod="GET"
    )
    with urllib.request.urlopen(link) as response:
        assert response.status == 200
    tampered = link.replace("by+link", "forged").replace("by%20link", "forged")
    assert tampered != link
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(tampered)
    assert refused.value.code == 403
    assert b"<Code>SignatureDoesNotMatch</Code>" in refused.value.read()
    got = signed.sqs.receive_message(QueueUrl=url)["Messages"]
    assert [m["Body"] for m in got] == ["by link"]


def cli(endpoint, key, *args, ca_bundle=None):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=key[0], AWS_SECRET_ACCESS_KEY=key[1], AWS_PAGER="")
    env.pop("AWS_PROFILE", None)
    extra = ["--ca-bundle", ca_bundle] if ca_bundle else []
    return subprocess.run(
        [str(AWS), "--endpoint-url", endpoint, "--region", "us-east-1", *extra, "sqs", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_cli_signs_with_the_right_key_and_fails_with_a_wrong_one(signed):
    ok = cli(signed.endpoint, ALICE, "create-queue", "--queue-name", name())
    assert ok.returncode == 0, ok.stderr
    wrong = cli(signed.endpoint, (ALICE[0], "wrong"), "list-queues")
    assert wrong.returncode != 0
    assert "SignatureDoesNotMatch" in wrong.stderr


@pytest.fixture(scope="module")
def https(tmp_path_factory):
    ca = trustme.CA()
    certificate = ca.issue_cert("localhost", "127.0.0.1")
    folder = tmp_path_factory.mktemp("tls")
    cert, key, bundle = folder / "cert.pem", folder / "key.pem", folder / "ca.pem"
    certificate.cert_chain_pems[0].write_to_path(str(cert))
    for more in certificate.cert_chain_pems[1:]:
        more.write_to_path(str(cert), append=True)
    certificate.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(bundle))
    server = Server("--tls-cert", str(cert), "--tls-key", str(key), scheme="https", verify=str(bundle))
    server.bundle = str(bundle)
    yield server
    server.stop()


def test_boto3_and_the_cli_work_over_https_with_the_test_ca(https):
    url = https.sqs.create_queue(QueueName=name())["QueueUrl"]
    assert url.startswith("https://localhost:")
    https.sqs.send_message(QueueUrl=url, MessageBody="encrypted")
    got = cli(https.endpoint, ("x", "x"), "receive-message", "--queue-url", url, ca_bundle=https.bundle)
    assert got.returncode == 0, got.stderr
    assert "encrypted" in got.stdout
    untrusted = cli(https.endpoint, ("x", "x"), "list-queues")
    assert untrusted.returncode != 0
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr or "SSL" in untrusted.stderr
