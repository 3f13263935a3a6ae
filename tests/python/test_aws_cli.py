"""The aws CLI against the real binary: the README's commands, and regions kept apart."""
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

AWS = Path(sys.executable).parent / "aws"


def aws(server, *args, region="us-east-1"):
    env = dict(os.environ, AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x", AWS_PAGER="")
    env.pop("AWS_PROFILE", None)
    out = subprocess.run(
        [str(AWS), "--endpoint-url", server.endpoint, "--region", region, "--output", "json", "sqs", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if out.stdout.strip() else {}


@pytest.fixture(scope="module", autouse=True)
def cli_installed():
    if not AWS.exists():
        pytest.fail(f"{AWS} is missing: tests/python/requirements.txt installs awscli")


def test_the_readme_commands_create_send_and_receive(server):
    name = f"jobs-{uuid.uuid4().hex[:8]}"
    url = aws(server, "create-queue", "--queue-name", name)["QueueUrl"]
    assert url == f"{server.endpoint}/000000000000/{name}"
    aws(server, "send-message", "--queue-url", url, "--message-body", "hello")
    got = aws(server, "receive-message", "--queue-url", url)["Messages"]
    assert [m["Body"] for m in got] == ["hello"]


def test_the_cli_region_picks_the_queues_region(server):
    name = f"cli-{uuid.uuid4().hex[:8]}"
    east = aws(server, "create-queue", "--queue-name", name)["QueueUrl"]
    frankfurt = aws(server, "create-queue", "--queue-name", name, region="eu-central-1")["QueueUrl"]
    assert frankfurt == f"{server.endpoint}/queue/eu-central-1/000000000000/{name}"
    listed = aws(server, "list-queues", "--queue-name-prefix", name, region="eu-central-1")
    assert listed["QueueUrls"] == [frankfurt]
    arn = aws(server, "get-queue-attributes", "--queue-url", east, "--attribute-names", "QueueArn")
    assert arn["Attributes"]["QueueArn"] == f"arn:aws:sqs:us-east-1:000000000000:{name}"
