//! Each run of a message as an OpenTelemetry span, `process QUEUE`, in the message's trace:
//! the producer's `traceparent` (and `tracestate`) message attributes, read through the
//! global propagator, on the global tracer. Both do nothing until a program installs them
//! (`leasehold work --otlp-endpoint` does), so a worker without tracing pays for a lookup in
//! the message's attributes and a no-op span.

use std::collections::HashMap;

use opentelemetry::global;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};

use crate::Message;

/// The attributes a producer's trace context travels in.
const CARRIED: [&str; 2] = ["traceparent", "tracestate"];

/// The context a run of `message` goes in: a new span, a child of the producer's.
pub(crate) fn run_context(queue_url: &str, message: &Message) -> Context {
    let carrier: HashMap<String, String> = CARRIED
        .iter()
        .filter_map(|name| {
            let value = message.message_attributes.get(*name)?.string_value()?;
            Some((name.to_string(), value.to_string()))
        })
        .collect();
    let parent = global::get_text_map_propagator(|propagator| propagator.extract(&carrier));
    let queue = queue_url.rsplit('/').next().unwrap_or(queue_url);
    let tracer = global::tracer("leasehold-worker");
    let span = tracer
        .span_builder(format!("process {queue}"))
        .with_kind(SpanKind::Consumer)
        .with_attributes([
            KeyValue::new("messaging.system", "aws_sqs"),
            KeyValue::new("messaging.destination.name", queue.to_string()),
            KeyValue::new("messaging.message.id", message.message_id.clone()),
            KeyValue::new("messaging.operation.type", "process"),
            KeyValue::new(
                "leasehold.message.receive_count",
                i64::from(message.receive_count),
            ),
        ])
        .start_with_context(&tracer, &parent);
    parent.with_span(span)
}

/// Ends the run's span: whether the message's work succeeded (it was deleted, or found done).
pub(crate) fn finished(context: &Context, succeeded: bool) {
    let span = context.span();
    span.set_attribute(KeyValue::new("leasehold.process.succeeded", succeeded));
    if !succeeded {
        span.set_status(Status::error(
            "not done: it failed, was stopped before its lease could end, or was put back",
        ));
    }
    span.end();
}
