//! Where a message's trace comes from: the producer's W3C `traceparent` message attribute
//! (what OpenTelemetry's JavaScript SQS instrumentation and Python's boto3sqs one inject, and
//! what any producer can with OpenTelemetry's propagator), or AWS X-Ray's `AWSTraceHeader`
//! system attribute.

use std::collections::HashMap;

use leasehold_engine::{AttributeData, MessageAttributes};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// The producer's span a message names, if it names one that parses: `traceparent` (and
/// `tracestate`) among its attributes first, then `AWSTraceHeader` among its system
/// attributes.
pub fn producer(attributes: &MessageAttributes, system: &MessageAttributes) -> Option<Context> {
    let text = |map: &MessageAttributes, name: &str| match &map.get(name)?.data {
        AttributeData::Text(value) => Some(value.clone()),
        AttributeData::Binary(_) => None,
    };
    if let Some(traceparent) = text(attributes, "traceparent") {
        let mut carrier = HashMap::from([("traceparent".to_string(), traceparent)]);
        if let Some(state) = text(attributes, "tracestate") {
            carrier.insert("tracestate".to_string(), state);
        }
        let context = TraceContextPropagator::new().extract(&carrier);
        if context.span().span_context().is_valid() {
            return Some(context);
        }
    }
    let header = text(system, "AWSTraceHeader")?;
    Some(Context::new().with_remote_span_context(xray(&header)?))
}

/// An X-Ray trace header, `Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;
/// Sampled=1`: the root's time and random parts make the 128-bit trace id.
fn xray(header: &str) -> Option<SpanContext> {
    let (mut root, mut parent, mut sampled) = (None, None, false);
    for part in header.split(';') {
        let Some(pair) = part.trim().split_once('=') else {
            continue;
        };
        match pair {
            ("Root", value) => root = Some(value),
            ("Parent", value) => parent = Some(value),
            ("Sampled", value) => sampled = value == "1",
            _ => {}
        }
    }
    let mut pieces = root?.split('-');
    let (version, time, random) = (pieces.next()?, pieces.next()?, pieces.next()?);
    if version != "1" || time.len() != 8 || random.len() != 24 || pieces.next().is_some() {
        return None;
    }
    let trace_id = TraceId::from_hex(&format!("{time}{random}")).ok()?;
    let parent = parent?;
    let span_id = (parent.len() == 16).then(|| SpanId::from_hex(parent).ok())??;
    let flags = match sampled {
        true => TraceFlags::SAMPLED,
        false => TraceFlags::default(),
    };
    let context = SpanContext::new(trace_id, span_id, flags, true, TraceState::default());
    context.is_valid().then_some(context)
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_engine::MessageAttribute;

    fn text(name: &str, value: &str) -> MessageAttributes {
        let attribute = MessageAttribute {
            data_type: "String".into(),
            data: AttributeData::Text(value.into()),
        };
        MessageAttributes::from([(name.to_string(), attribute)])
    }

    #[test]
    fn a_traceparent_names_the_producer_s_span() {
        let attributes = text(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        );
        let found = producer(&attributes, &MessageAttributes::new()).unwrap();
        let span = found.span().span_context().clone();
        assert_eq!(
            span.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(span.span_id().to_string(), "b7ad6b7169203331");
        assert!(span.is_sampled() && span.is_remote());
    }

    #[test]
    fn an_xray_header_names_the_producer_s_span() {
        let system = text(
            "AWSTraceHeader",
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1;",
        );
        let found = producer(&MessageAttributes::new(), &system).unwrap();
        let span = found.span().span_context().clone();
        assert_eq!(
            span.trace_id().to_string(),
            "5759e988bd862e3fe1be46a994272793"
        );
        assert_eq!(span.span_id().to_string(), "53995c3f42cd8ad8");
        assert!(span.is_sampled());
    }

    #[test]
    fn headers_that_do_not_parse_name_nothing() {
        for (name, value, system) in [
            ("traceparent", "00-zz-b7ad6b7169203331-01", false),
            ("traceparent", "", false),
            (
                "AWSTraceHeader",
                "Root=1-5759e988;Parent=53995c3f42cd8ad8",
                true,
            ),
            ("AWSTraceHeader", "Parent=53995c3f42cd8ad8;Sampled=1", true),
            (
                "AWSTraceHeader",
                "Root=1-5759e988-bd862e3fe1be46a994272793",
                true,
            ),
            ("AWSTraceHeader", "garbage", true),
            (
                "AWSTraceHeader",
                "Root=1-5759e988-bd862e3fe1be46a9942727;Parent=53995c3f42cd8ad8",
                true,
            ),
        ] {
            let (attributes, system_attributes) = match system {
                true => (MessageAttributes::new(), text(name, value)),
                false => (text(name, value), MessageAttributes::new()),
            };
            assert!(
                producer(&attributes, &system_attributes).is_none(),
                "{value}"
            );
        }
    }
}
