//! The spans of a message's life, after OpenTelemetry's messaging conventions
//! (`messaging.system`, `messaging.destination.name`, `messaging.message.id`,
//! `messaging.operation.type`), with Leasehold's own `leasehold.*` attributes for what the
//! lease did. Every time is the server's clock's, the one its leases run on.

use std::time::{Duration, SystemTime};

use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, Span};

use crate::book::Lease;

/// How a lease ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaseEnd {
    /// Deleted while it was live.
    Deleted,
    /// It ran out: the message could be received again (its delete, if one comes, is late).
    RanOut,
    /// Given back early: its visibility set to 0.
    Released,
    /// The server stopped tracing the message (let go, or the server stopped) while it
    /// was live.
    Untraced,
}

impl LeaseEnd {
    fn name(self) -> &'static str {
        match self {
            LeaseEnd::Deleted => "deleted",
            LeaseEnd::RanOut => "ran_out",
            LeaseEnd::Released => "released",
            LeaseEnd::Untraced => "untraced",
        }
    }
}

/// Makes the spans, on the server's own tracer.
pub(crate) struct Spans {
    tracer: SdkTracer,
}

fn at(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

/// The queue's name in a key (`region/name`, `ACCOUNT:region/name`, or the bare name).
fn queue_name(key: &str) -> &str {
    leasehold_engine::name_of(key)
}

/// The messaging conventions' attributes; `operation`: the type (`send`, `receive`,
/// `settle`) and the SQS action, for the spans of one.
fn common(
    queue: &str,
    message_id: &str,
    operation: Option<(&'static str, &'static str)>,
) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("messaging.system", "aws_sqs"),
        KeyValue::new("messaging.destination.name", queue_name(queue).to_string()),
        KeyValue::new("messaging.message.id", message_id.to_string()),
    ];
    if let Some((kind, action)) = operation {
        attributes.push(KeyValue::new("messaging.operation.type", kind));
        attributes.push(KeyValue::new("messaging.operation.name", action));
    }
    attributes
}

impl Spans {
    pub fn new(tracer: SdkTracer) -> Spans {
        Spans { tracer }
    }

    fn start(
        &self,
        name: String,
        kind: SpanKind,
        start_ms: u64,
        attributes: Vec<KeyValue>,
        parent: &Context,
    ) -> Span {
        self.tracer
            .span_builder(name)
            .with_kind(kind)
            .with_start_time(at(start_ms))
            .with_attributes(attributes)
            .start_with_context(&self.tracer, parent)
    }

    /// The send, a child of the producer's span (a new trace where there is none, if the
    /// sampler takes it): the context its other spans are children of, or None if the
    /// trace is not sampled.
    pub fn send(
        &self,
        queue: &str,
        message_id: &str,
        now_ms: u64,
        producer: &Context,
    ) -> Option<Context> {
        let mut span = self.start(
            format!("send {}", queue_name(queue)),
            SpanKind::Server,
            now_ms,
            common(queue, message_id, Some(("send", "SendMessage"))),
            producer,
        );
        let context = span.span_context().clone();
        span.end_with_timestamp(at(now_ms));
        context
            .is_sampled()
            .then(|| Context::new().with_remote_span_context(context))
    }

    /// Whether spans under `parent` are sampled: a producer's context seen first at a
    /// receive (its send went through another server) follows the producer's decision.
    pub fn sampled(parent: &Context) -> bool {
        parent.span().span_context().is_sampled()
    }

    /// The time the message waited in the queue before its first receive.
    pub fn wait(&self, queue: &str, message_id: &str, sent_ms: u64, now_ms: u64, parent: &Context) {
        let mut span = self.start(
            format!("wait {}", queue_name(queue)),
            SpanKind::Internal,
            sent_ms,
            common(queue, message_id, None),
            parent,
        );
        span.end_with_timestamp(at(now_ms.max(sent_ms)));
    }

    /// A lease begins: receive number `number`, running out at `deadline_ms`.
    pub fn lease(
        &self,
        (queue, message_id): (&str, &str),
        (number, handle): (u32, String),
        (now_ms, deadline_ms): (u64, u64),
        parent: &Context,
    ) -> Lease {
        let mut attributes = common(queue, message_id, Some(("receive", "ReceiveMessage")));
        attributes.push(KeyValue::new("leasehold.lease.number", i64::from(number)));
        attributes.push(KeyValue::new(
            "leasehold.lease.visibility_timeout_s",
            (deadline_ms.saturating_sub(now_ms) / 1000) as i64,
        ));
        let span = self.start(
            format!("lease {}", queue_name(queue)),
            SpanKind::Internal,
            now_ms,
            attributes,
            parent,
        );
        Lease {
            span,
            number,
            handle,
            started_ms: now_ms,
            deadline_ms,
            extensions: 0,
        }
    }

    /// A lease's visibility changed while it was live: an extension (a heartbeat) or a
    /// shorter lease.
    pub fn extended(lease: &mut Lease, now_ms: u64, new_deadline_ms: u64) {
        lease.extensions += 1;
        lease.deadline_ms = new_deadline_ms;
        lease.span.add_event_with_timestamp(
            "visibility changed",
            at(now_ms),
            vec![KeyValue::new(
                "leasehold.lease.runs_out_in_ms",
                new_deadline_ms.saturating_sub(now_ms) as i64,
            )],
        );
    }

    /// Ends a lease: at `now_ms`, or at its deadline if it ran out before.
    pub fn end_lease(mut lease: Lease, now_ms: u64, how: LeaseEnd) {
        let ran_out = how == LeaseEnd::RanOut || now_ms > lease.deadline_ms;
        let end_ms = match ran_out {
            true => lease.deadline_ms,
            false => now_ms,
        };
        let how = match (ran_out, how) {
            (true, LeaseEnd::Deleted | LeaseEnd::Released) => LeaseEnd::RanOut,
            (_, how) => how,
        };
        lease.span.set_attributes([
            KeyValue::new("leasehold.lease.end", how.name()),
            KeyValue::new("leasehold.lease.ran_out", ran_out),
            KeyValue::new(
                "leasehold.lease.held_ms",
                end_ms.saturating_sub(lease.started_ms) as i64,
            ),
            KeyValue::new("leasehold.lease.extensions", i64::from(lease.extensions)),
        ]);
        if ran_out {
            lease.span.set_status(Status::error(
                "the lease ran out: the message could be received again",
            ));
        }
        lease
            .span
            .end_with_timestamp(at(end_ms.max(lease.started_ms)));
    }

    /// A delete that the backend took: `late` when the lease of the handle it named had run
    /// out (work another consumer may have done too), `removed` unless it did nothing (a
    /// late delete in the strict lease mode).
    pub fn delete(
        &self,
        (queue, message_id): (&str, &str),
        lease_number: Option<u32>,
        (late, removed): (bool, bool),
        now_ms: u64,
        parent: &Context,
    ) {
        let mut attributes = common(queue, message_id, Some(("settle", "DeleteMessage")));
        attributes.push(KeyValue::new("leasehold.delete.late", late));
        attributes.push(KeyValue::new("leasehold.delete.removed", removed));
        if let Some(number) = lease_number {
            attributes.push(KeyValue::new(
                "leasehold.delete.lease_number",
                i64::from(number),
            ));
        }
        let mut span = self.start(
            format!("delete {}", queue_name(queue)),
            SpanKind::Server,
            now_ms,
            attributes,
            parent,
        );
        if late {
            span.set_status(Status::error(
                "a late delete: the message's lease had run out",
            ));
        }
        span.end_with_timestamp(at(now_ms));
    }
}
