"""Proves which wire protocol this run speaks, so a run meant for one cannot pass on the other."""

import pytest


def test_the_client_speaks_the_expected_protocol(server):
    from conftest import EXPECTED_PROTOCOL

    if EXPECTED_PROTOCOL is None:
        pytest.skip("LEASEHOLD_EXPECT_PROTOCOL not set (scripts/test sets it)")
    response = server.sqs.list_queues()
    content_type = response["ResponseMetadata"]["HTTPHeaders"]["content-type"]
    expected = {"json": "application/x-amz-json-1.0", "query": "text/xml"}[EXPECTED_PROTOCOL]
    assert content_type == expected
