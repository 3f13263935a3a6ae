//! A message's life through `Traced` on the real embedded backend, under a clock the tests
//! move; the spans taken from the SDK's in-memory exporter.

use std::collections::BTreeMap;

use leasehold_embedded::{Embedded, EngineSetup};
use leasehold_engine::{
    AttributeData, LeaseMode, ManualClock, MessageAttribute, MessageAttributes, Naming,
};
use opentelemetry::trace::{SpanKind, Status, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};

use super::*;
use leasehold_backend::QueueAdmin;

const PRODUCER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const PRODUCER_SPAN: &str = "b7ad6b7169203331";
const START_MS: u64 = 1_700_000_000_000;

struct Setup {
    traced: Traced,
    clock: ManualClock,
    exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
}

async fn setup() -> Setup {
    setup_in(LeaseMode::Aws).await
}

async fn setup_in(lease_mode: LeaseMode) -> Setup {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let clock = ManualClock::new(START_MS);
    let naming = Naming {
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
    };
    let engine = EngineSetup::serving(Arc::new(clock.clone()), lease_mode, naming);
    let backend: Arc<dyn Backend> = Arc::new(Embedded::in_memory(engine));
    let attributes = vec![("VisibilityTimeout".to_string(), "30".to_string())];
    backend
        .create_queue("orders", attributes, Vec::new())
        .await
        .unwrap();
    let spans = Spans::new(provider.tracer("test"));
    let traced = Traced::new(backend, Arc::new(clock.clone()), spans, lease_mode);
    Setup {
        traced,
        clock,
        exporter,
        provider,
    }
}

fn traced_message(traceparent: &str) -> NewMessage {
    let attribute = MessageAttribute {
        data_type: "String".into(),
        data: AttributeData::Text(traceparent.into()),
    };
    NewMessage {
        body: "work".into(),
        attributes: MessageAttributes::from([("traceparent".to_string(), attribute)]),
        ..NewMessage::default()
    }
}

fn producer_traceparent(flags: &str) -> String {
    format!("00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-{flags}")
}

impl Setup {
    async fn receive(&self, visibility_s: Option<u32>) -> Delivery {
        let request = ReceiveRequest {
            max_messages: 1,
            visibility_s,
            attempt_id: None,
        };
        let mut received = self.traced.receive("orders", request).await.unwrap();
        received.deliveries.pop().expect("a message")
    }

    fn advance_s(&self, seconds: u64) {
        self.clock.advance_ms(seconds * 1000);
    }

    fn spans(&self) -> Vec<SpanData> {
        self.provider.force_flush().unwrap();
        let mut spans = self.exporter.get_finished_spans().unwrap();
        spans.sort_by_key(|s| s.start_time);
        spans
    }
}

fn attributes(span: &SpanData) -> BTreeMap<String, Value> {
    let pairs = span.attributes.iter();
    pairs
        .map(|kv| (kv.key.to_string(), kv.value.clone()))
        .collect()
}

fn ms(span_time: std::time::SystemTime) -> u64 {
    let since = span_time.duration_since(std::time::UNIX_EPOCH).unwrap();
    since.as_millis() as u64
}

/// The probe of issue 47: a message whose traceparent names a trace is received, its lease
/// runs out, it is received again and deleted late. Its trace holds the server's send (a
/// child of the producer's span), its wait, both leases (both run out) and the late delete.
#[tokio::test]
async fn a_late_delete_and_the_leases_that_ran_out_are_in_the_producer_s_trace() {
    let s = setup().await;
    let message = traced_message(&producer_traceparent("01"));
    let sent = s.traced.send("orders", message).await.unwrap();
    s.advance_s(2);
    s.receive(None).await;
    s.advance_s(31); // the 30 s lease runs out
    let second = s.receive(Some(10)).await;
    assert_eq!(second.receive_count, 2);
    s.advance_s(12); // and the 10 s one too: the delete is late
    let deleted = s.traced.delete("orders", vec![second.receipt_handle]).await;
    assert_eq!(deleted.unwrap(), [Ok(())]);

    let spans = s.spans();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "send orders",
            "wait orders",
            "lease orders",
            "lease orders",
            "delete orders"
        ]
    );
    for span in &spans {
        assert_eq!(span.span_context.trace_id().to_string(), PRODUCER_TRACE);
        assert_eq!(
            attributes(span)["messaging.message.id"],
            Value::from(sent.message_id.clone())
        );
        assert_eq!(
            attributes(span)["messaging.destination.name"],
            Value::from("orders")
        );
    }
    let (send, wait, lease_1, lease_2, delete) =
        (&spans[0], &spans[1], &spans[2], &spans[3], &spans[4]);
    assert_eq!(send.parent_span_id.to_string(), PRODUCER_SPAN);
    assert_eq!(send.span_kind, SpanKind::Server);
    for child in [wait, lease_1, lease_2, delete] {
        assert_eq!(child.parent_span_id, send.span_context.span_id());
    }
    assert_eq!(ms(wait.end_time) - ms(wait.start_time), 2_000);
    // The first lease ran out at its 30 s deadline, unseen until the next receive.
    assert_eq!(
        attributes(lease_1)["leasehold.lease.ran_out"],
        Value::from(true)
    );
    assert_eq!(
        attributes(lease_1)["leasehold.lease.end"],
        Value::from("ran_out")
    );
    assert_eq!(
        attributes(lease_1)["leasehold.lease.number"],
        Value::from(1)
    );
    assert_eq!(ms(lease_1.end_time) - ms(lease_1.start_time), 30_000);
    assert!(matches!(lease_1.status, Status::Error { .. }));
    assert_eq!(
        attributes(lease_2)["leasehold.lease.number"],
        Value::from(2)
    );
    assert_eq!(
        attributes(lease_2)["leasehold.lease.ran_out"],
        Value::from(true)
    );
    assert_eq!(ms(lease_2.end_time) - ms(lease_2.start_time), 10_000);
    assert_eq!(
        attributes(delete)["leasehold.delete.late"],
        Value::from(true)
    );
    assert_eq!(
        attributes(delete)["leasehold.delete.lease_number"],
        Value::from(2)
    );
    assert_eq!(ms(delete.start_time), START_MS + 45_000);
}

/// A delete within the lease ends it there and is not late; a heartbeat on the way is an
/// event of the lease.
#[tokio::test]
async fn a_delete_within_an_extended_lease_is_on_time() {
    let s = setup().await;
    s.traced
        .send("orders", traced_message(&producer_traceparent("01")))
        .await
        .unwrap();
    let got = s.receive(None).await;
    s.advance_s(20);
    let extended = s
        .traced
        .change_visibility("orders", vec![(got.receipt_handle.clone(), 60)])
        .await;
    assert_eq!(extended.unwrap(), [Ok(())]);
    s.advance_s(40); // past the first deadline, within the extended one
    let deleted = s.traced.delete("orders", vec![got.receipt_handle]).await;
    assert_eq!(deleted.unwrap(), [Ok(())]);
    let spans = s.spans();
    let lease = spans.iter().find(|s| s.name == "lease orders").unwrap();
    assert_eq!(
        attributes(lease)["leasehold.lease.ran_out"],
        Value::from(false)
    );
    assert_eq!(
        attributes(lease)["leasehold.lease.end"],
        Value::from("deleted")
    );
    assert_eq!(
        attributes(lease)["leasehold.lease.extensions"],
        Value::from(1)
    );
    assert_eq!(
        attributes(lease)["leasehold.lease.held_ms"],
        Value::from(60_000)
    );
    assert_eq!(lease.events.len(), 1);
    let delete = spans.iter().find(|s| s.name == "delete orders").unwrap();
    assert_eq!(
        attributes(delete)["leasehold.delete.late"],
        Value::from(false)
    );
    assert_eq!(delete.status, Status::Unset);
}

/// A producer that decided not to sample has no server spans; a released lease ends as
/// released.
#[tokio::test]
async fn the_producer_s_sampling_decision_holds() {
    let s = setup().await;
    s.traced
        .send("orders", traced_message(&producer_traceparent("00")))
        .await
        .unwrap();
    let got = s.receive(None).await;
    let released = s
        .traced
        .change_visibility("orders", vec![(got.receipt_handle.clone(), 0)])
        .await;
    assert_eq!(released.unwrap(), [Ok(())]);
    s.traced
        .delete("orders", vec![got.receipt_handle])
        .await
        .unwrap();
    assert!(s.spans().is_empty(), "{:?}", s.spans());

    s.traced
        .send("orders", traced_message(&producer_traceparent("01")))
        .await
        .unwrap();
    let got = s.receive(None).await;
    let released = s
        .traced
        .change_visibility("orders", vec![(got.receipt_handle, 0)])
        .await;
    assert_eq!(released.unwrap(), [Ok(())]);
    let spans = s.spans();
    let lease = spans.iter().find(|s| s.name == "lease orders").unwrap();
    assert_eq!(
        attributes(lease)["leasehold.lease.end"],
        Value::from("released")
    );
    assert_eq!(
        attributes(lease)["leasehold.lease.ran_out"],
        Value::from(false)
    );
}

/// The book lets the longest-traced message go past its capacity, ending its open lease.
#[tokio::test]
async fn past_its_capacity_the_book_lets_the_oldest_go() {
    let s = setup().await;
    let traced = Traced {
        book: Book::new(2),
        ..s.traced
    };
    for _ in 0..3 {
        traced
            .send("orders", traced_message(&producer_traceparent("01")))
            .await
            .unwrap();
    }
    let inner = traced.book.drain();
    assert_eq!(inner.len(), 2);
}

/// In the strict lease mode a late delete does nothing: its span says so, and the lease of
/// the message's next receive is still its holder's, ended by that holder's delete.
#[tokio::test]
async fn a_late_delete_that_removes_nothing_leaves_the_next_lease_alone() {
    let s = setup_in(LeaseMode::Strict).await;
    s.traced
        .send("orders", traced_message(&producer_traceparent("01")))
        .await
        .unwrap();
    let first = s.receive(None).await;
    s.advance_s(31);
    let second = s.receive(None).await;
    let late = s.traced.delete("orders", vec![first.receipt_handle]).await;
    assert_eq!(late.unwrap(), [Ok(())]);
    s.advance_s(5);
    let on_time = s.traced.delete("orders", vec![second.receipt_handle]).await;
    assert_eq!(on_time.unwrap(), [Ok(())]);
    let spans = s.spans();
    let deletes: Vec<&SpanData> = spans.iter().filter(|s| s.name == "delete orders").collect();
    assert_eq!(deletes.len(), 2, "{spans:?}");
    assert_eq!(
        attributes(deletes[0])["leasehold.delete.late"],
        Value::from(true)
    );
    assert_eq!(
        attributes(deletes[0])["leasehold.delete.removed"],
        Value::from(false)
    );
    assert_eq!(
        attributes(deletes[1])["leasehold.delete.late"],
        Value::from(false)
    );
    assert_eq!(
        attributes(deletes[1])["leasehold.delete.removed"],
        Value::from(true)
    );
    let second_lease = spans
        .iter()
        .filter(|s| s.name == "lease orders")
        .find(|s| attributes(s)["leasehold.lease.number"] == Value::from(2))
        .unwrap();
    assert_eq!(
        attributes(second_lease)["leasehold.lease.end"],
        Value::from("deleted")
    );
    assert_eq!(
        attributes(second_lease)["leasehold.lease.held_ms"],
        Value::from(5_000)
    );
}

/// A FIFO queue's duplicate send answers the first send's id: the message's life goes on as
/// it was (its lease open, its delete on time), with one more send span.
#[tokio::test]
async fn a_duplicate_send_does_not_start_the_message_s_life_again() {
    let s = setup().await;
    let attributes_in = vec![
        ("FifoQueue".to_string(), "true".to_string()),
        ("ContentBasedDeduplication".to_string(), "true".to_string()),
    ];
    s.traced
        .create_queue("jobs.fifo", attributes_in, Vec::new())
        .await
        .unwrap();
    let fifo_message = || NewMessage {
        group_id: Some("g".into()),
        ..traced_message(&producer_traceparent("01"))
    };
    let first = s.traced.send("jobs.fifo", fifo_message()).await.unwrap();
    let request = ReceiveRequest::up_to(1);
    let got = s.traced.receive("jobs.fifo", request).await.unwrap();
    let handle = got.deliveries[0].receipt_handle.clone();
    let again = s.traced.send("jobs.fifo", fifo_message()).await.unwrap();
    assert_eq!(again.message_id, first.message_id);
    let deleted = s.traced.delete("jobs.fifo", vec![handle]).await.unwrap();
    assert_eq!(deleted, [Ok(())]);
    let spans = s.spans();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    let sends = names.iter().filter(|n| **n == "send jobs.fifo").count();
    assert_eq!(sends, 2, "{names:?}");
    let delete = spans.iter().find(|s| s.name == "delete jobs.fifo").unwrap();
    assert_eq!(
        attributes(delete)["leasehold.delete.late"],
        Value::from(false)
    );
    let lease = spans.iter().find(|s| s.name == "lease jobs.fifo").unwrap();
    assert_eq!(
        attributes(lease)["leasehold.lease.end"],
        Value::from("deleted")
    );
}
