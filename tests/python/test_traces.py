"""Each message's life as a trace (issue 47): a real server with `--otlp-endpoint` pointed at an
OTLP/HTTP receiver in this test, and a producer and a consumer instrumented with OpenTelemetry's
botocore instrumentation. One trace holds the producer's spans, the server's (its send, the
message's wait, both leases, the first marked as run out, and the late delete) and the
consumer's processing. `leasehold work --otlp-endpoint` runs each message in its trace and
hands the command its span as TRACEPARENT."""
import os
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import BINARY, EXPECTED_PROTOCOL, Server, _free_port

pytestmark = pytest.mark.skipif(
    EXPECTED_PROTOCOL == "query",
    reason="the server's spans are the same over either protocol: checked once, in the JSON run",
)


class Receiver:
    """An OTLP/HTTP trace receiver: keeps every span posted to /v1/traces (protobuf)."""

    def __init__(self):
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        self.spans = []
        self.resources = []
        lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path != "/v1/traces" or self.headers["Content-Type"] != "application/x-protobuf":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                with lock:
                    for resource_spans in request.resource_spans:
                        receiver.resources.append(resource_spans.resource)
                        for scope_spans in resource_spans.scope_spans:
                            receiver.spans.extend(scope_spans.spans)
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", _free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, done, limit_s=15):
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if done(self.spans):
                return self.spans
            time.sleep(0.1)
        raise AssertionError(f"not received within {limit_s} s: {[s.name for s in self.spans]}")

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def attributes(span):
    values = {}
    for kv in span.attributes:
        value = kv.value
        values[kv.key] = getattr(value, value.WhichOneof("value"))
    return values


def test_a_message_s_life_and_its_late_delete_are_spans_in_the_producer_s_trace():
    from opentelemetry import propagate
    from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    receiver = Receiver()
    server = Server("--otlp-endpoint", receiver.url)
    client_spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(client_spans))
    tracer = provider.get_tracer("leasehold-test")
    instrumentor = BotocoreInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        sqs = server.sqs
        url = server.queue(VisibilityTimeout=30)
        # The producer: its span's context in the message, as OpenTelemetry's JavaScript and
        # Go SQS instrumentations put it (`traceparent`, a String attribute).
        with tracer.start_as_current_span("produce", kind=SpanKind.PRODUCER) as produce:
            carrier = {}
            propagate.inject(carrier)
            attributes_in = {k: {"DataType": "String", "StringValue": v} for k, v in carrier.items()}
            sent = sqs.send_message(QueueUrl=url, MessageBody="work", MessageAttributes=attributes_in)
        trace_id = produce.get_span_context().trace_id
        message_id = sent["MessageId"]

        sqs.receive_message(QueueUrl=url)  # a consumer that dies with it
        server.advance(31)  # its 30 s lease runs out
        (again,) = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"]
        carrier = {k: v["StringValue"] for k, v in again["MessageAttributes"].items()}
        with tracer.start_as_current_span("process", context=propagate.extract(carrier), kind=SpanKind.CONSUMER):
            server.advance(31)  # the handler outlives this lease too
            sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])

        ours = lambda spans: [s for s in spans if int.from_bytes(s.trace_id, "big") == trace_id]
        done = lambda spans: any(s.name == "delete " + url.rsplit("/", 1)[1] for s in ours(spans))
        spans = ours(receiver.wait_for(done))
        queue = url.rsplit("/", 1)[1]
        by_name = {}
        for span in spans:
            by_name.setdefault(span.name, []).append(span)
        assert sorted(by_name) == sorted([f"send {queue}", f"wait {queue}", f"lease {queue}", f"delete {queue}"])
        (send,) = by_name[f"send {queue}"]
        assert int.from_bytes(send.parent_span_id, "big") == produce.get_span_context().span_id
        for span in spans:
            assert attributes(span)["messaging.message.id"] == message_id
            assert attributes(span)["messaging.system"] == "aws_sqs"
        first, second = sorted(by_name[f"lease {queue}"], key=lambda s: s.start_time_unix_nano)
        assert attributes(first)["leasehold.lease.number"] == 1
        assert attributes(first)["leasehold.lease.ran_out"] is True
        assert (first.end_time_unix_nano - first.start_time_unix_nano) // 1_000_000 == 30_000
        assert attributes(second)["leasehold.lease.number"] == 2
        (delete,) = by_name[f"delete {queue}"]
        assert attributes(delete)["leasehold.delete.late"] is True
        assert attributes(delete)["leasehold.delete.lease_number"] == 2
        assert any(
            kv.key == "service.name" and kv.value.string_value == "leasehold"
            for resource in receiver.resources
            for kv in resource.attributes
        )
        # The producer's and the consumer's own spans are in the same trace: botocore's
        # client spans and the handler's processing.
        client = [s for s in client_spans.get_finished_spans() if s.context.trace_id == trace_id]
        names = {s.name for s in client}
        assert {"produce", "SQS.SendMessage", "process", "SQS.DeleteMessage"} <= names, names
    finally:
        instrumentor.uninstrument()
        server.stop()
        receiver.stop()


def test_leasehold_work_runs_a_message_in_its_trace_and_hands_the_command_its_span(tmp_path):
    receiver = Receiver()
    server = Server()
    worker = None
    try:
        url = server.queue(VisibilityTimeout=30)
        queue = url.rsplit("/", 1)[1]
        trace_id, producer = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
        traceparent = {"DataType": "String", "StringValue": f"00-{trace_id}-{producer}-01"}
        server.sqs.send_message(QueueUrl=url, MessageBody="work", MessageAttributes={"traceparent": traceparent})
        out = tmp_path / "traceparent"
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "OUT": str(out)}
        worker = subprocess.Popen(
            [str(BINARY), "work", "--endpoint-url", server.endpoint, "--region", "us-east-1", "--queue-url", url,
             "--lease", "3", "--otlp-endpoint", receiver.url, "--", "sh", "-c", 'printf %s "$TRACEPARENT" > "$OUT"'],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        spans = receiver.wait_for(lambda spans: any(s.name == f"process {queue}" for s in spans))
        (process,) = [s for s in spans if s.name == f"process {queue}"]
        assert process.trace_id.hex() == trace_id
        assert process.parent_span_id.hex() == producer
        assert attributes(process)["leasehold.process.succeeded"] is True
        assert attributes(process)["messaging.destination.name"] == queue
        # The command saw the run's own span, so its spans can join the trace.
        assert out.read_text() == f"00-{trace_id}-{process.span_id.hex()}-01"
        assert any(
            kv.key == "service.name" and kv.value.string_value == "leasehold-work"
            for resource in receiver.resources
            for kv in resource.attributes
        )
    finally:
        if worker is not None:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=20)
        server.stop()
        receiver.stop()
