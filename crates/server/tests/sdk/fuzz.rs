//! A bounded fuzzer over the wire: a fixed number of seeded random requests to every action,
//! through both protocols (JSON bodies; query GETs and form POSTs), mixing valid members with
//! parameter names thousands of segments deep, huge counts and indices, bad percent- and
//! UTF-8 encodings, deep JSON and junk values. Every one must be answered, and never with a
//! server error; the server must still work afterwards.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};

use crate::harness::TestServer;

const CASES_PER_PROTOCOL: usize = 1_500;

/// Every action from the one list (`actions!`), and one that does not exist.
fn actions() -> Vec<&'static str> {
    leasehold_protocol::ACTIONS
        .iter()
        .copied()
        .chain(["Teleport"])
        .collect()
}

/// Members the actions read (JSON names), so random requests reach real code.
const MEMBERS: &[&str] = &[
    "QueueUrl",
    "QueueName",
    "Attributes",
    "Tags",
    "TagKeys",
    "MessageBody",
    "DelaySeconds",
    "MessageAttributes",
    "MessageSystemAttributes",
    "MessageGroupId",
    "MessageDeduplicationId",
    "Entries",
    "Id",
    "ReceiptHandle",
    "VisibilityTimeout",
    "MaxNumberOfMessages",
    "AttributeNames",
    "MessageAttributeNames",
    "MessageSystemAttributeNames",
    "MaxResults",
    "NextToken",
    "QueueNamePrefix",
    "Label",
    "AWSAccountIds",
    "Actions",
    "SourceArn",
    "DestinationArn",
    "TaskHandle",
    "MaxNumberOfMessagesPerSecond",
    "ReceiveRequestAttemptId",
];

/// Query parameter names: the flat forms of the members above, and deeper ones.
const QUERY_NAMES: &[&str] = &[
    "QueueUrl",
    "QueueName",
    "MessageBody",
    "DelaySeconds",
    "VisibilityTimeout",
    "MaxNumberOfMessages",
    "ReceiptHandle",
    "MessageGroupId",
    "Attribute.1.Name",
    "Attribute.1.Value",
    "Attribute.4294967296.Name",
    "AttributeName.1",
    "AttributeName.99999999999999999999",
    "MessageAttributeName.1",
    "MessageAttribute.1.Name",
    "MessageAttribute.1.Value.DataType",
    "MessageAttribute.1.Value.StringValue",
    "MessageAttribute.1.Value.BinaryValue",
    "Tag.1.Key",
    "Tag.1.Value",
    "TagKey.1",
    "SendMessageBatchRequestEntry.1.Id",
    "SendMessageBatchRequestEntry.1.MessageBody",
    "SendMessageBatchRequestEntry.11.Id",
    "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringListValue.1",
    "DeleteMessageBatchRequestEntry.1.Id",
    "DeleteMessageBatchRequestEntry.1.ReceiptHandle",
    "ChangeMessageVisibilityBatchRequestEntry.1.Id",
    "ChangeMessageVisibilityBatchRequestEntry.1.VisibilityTimeout",
    "AWSAccountId.1",
    "ActionName.1",
    "Label",
    "SourceArn",
    "TaskHandle",
    "Entries",
];

struct Fuzzer {
    rng: StdRng,
    urls: Vec<String>,
    handles: Vec<String>,
    /// Values small enough for a URL (HTTP caps a request target at 64 KiB).
    short: bool,
}

impl Fuzzer {
    fn pick<'a>(&mut self, items: &'a [&'a str]) -> &'a str {
        items[self.rng.random_range(0..items.len())]
    }

    /// A text value: often meaningful, sometimes hostile.
    fn text(&mut self) -> String {
        match self.rng.random_range(0..16) {
            0 | 1 => self.urls[self.rng.random_range(0..self.urls.len())].clone(),
            2 if !self.handles.is_empty() => {
                self.handles[self.rng.random_range(0..self.handles.len())].clone()
            }
            3 => "fuzz".into(),
            4 => self.rng.random_range(-5i64..50_000).to_string(),
            5 => "99999999999999999999999999".into(),
            6 => "-1".into(),
            7 => "All".into(),
            8 => "\u{0}\u{1}\u{ffff}\u{fffe}".into(),
            9 if self.short => "x".repeat(self.rng.random_range(0..2_000)),
            9 => "x".repeat(self.rng.random_range(0..300_000)),
            10 => "String".into(),
            11 => "Binary".into(),
            12 => r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:fuzz","maxReceiveCount":"1"}"#.into(),
            13 => "arn:aws:sqs:us-east-1:000000000000:fuzz".into(),
            14 => "true".into(),
            _ => (0..self.rng.random_range(0..40))
                .map(|_| char::from_u32(self.rng.random_range(0..0x11_0000)).unwrap_or('?'))
                .collect(),
        }
    }

    fn json_value(&mut self, depth: u32) -> Value {
        match self.rng.random_range(0..14) {
            0 => Value::Null,
            1 => json!(self.rng.random::<bool>()),
            2 => json!(self.rng.random::<i64>()),
            3 => json!(self.rng.random::<f64>() * 1e30),
            4 | 5 if depth < 4 => {
                let n = self.rng.random_range(0..12);
                Value::Array((0..n).map(|_| self.json_value(depth + 1)).collect())
            }
            6 | 7 if depth < 4 => Value::Object(self.json_members(depth + 1)),
            8 => {
                // Nesting far past any parser's recursion limit.
                let deep = self.rng.random_range(100..20_000);
                serde_json::from_str(&format!(
                    "{}{}",
                    "[".repeat(deep.min(120)),
                    "]".repeat(deep.min(120))
                ))
                .unwrap_or(Value::Null)
            }
            _ => Value::String(self.text()),
        }
    }

    fn json_members(&mut self, depth: u32) -> Map<String, Value> {
        let n = self.rng.random_range(0..8);
        (0..n)
            .map(|_| (self.pick(MEMBERS).to_string(), self.json_value(depth)))
            .collect()
    }

    /// A JSON body: a random document, or bytes no JSON parser accepts.
    fn json_body(&mut self) -> Vec<u8> {
        match self.rng.random_range(0..10) {
            0 => (0..self.rng.random_range(0..200))
                .map(|_| self.rng.random::<u8>())
                .collect(),
            1 => format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes(),
            2 => b"{\"QueueName\": \"\\ud800\"}".to_vec(),
            _ => Value::Object(self.json_members(0)).to_string().into_bytes(),
        }
    }

    /// Query parameters as one encoded string: names known and deep, values hostile, and
    /// raw bytes that do not decode as UTF-8.
    fn form(&mut self, action: &str) -> String {
        let mut parts = vec![format!("Action={action}")];
        for _ in 0..self.rng.random_range(0..10) {
            let name = match self.rng.random_range(0..12) {
                0 => vec!["a"; self.rng.random_range(2..5_000)].join("."),
                1 => format!("Attribute.{}.Name", self.rng.random::<u64>()),
                _ => self.pick(QUERY_NAMES).to_string(),
            };
            let value = match self.rng.random_range(0..8) {
                0 => "%FF%FE%C3%28".to_string(),
                1 => "%".to_string(),
                _ => form_urlencoded::byte_serialize(self.text().as_bytes()).collect(),
            };
            parts.push(format!("{name}={value}"));
        }
        parts.join("&")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_requests_to_every_action_over_both_protocols_never_crash_or_fault() {
    let s = TestServer::start().await;
    let http = reqwest::Client::new();
    let mut f = Fuzzer {
        rng: StdRng::seed_from_u64(0x5eed),
        urls: Vec::new(),
        handles: Vec::new(),
        short: false,
    };
    let mut answered = 0;
    let actions = actions();
    for case in 0..2 * CASES_PER_PROTOCOL {
        if case % 200 == 0 {
            // Fresh queues and handles, since the fuzzer deletes and purges them.
            // New names each round: a deleted name is refused for 60 s, as on AWS.
            let round = case / 200;
            f.urls = vec![
                s.queue(&format!("fuzz-{round}"), &[]).await,
                s.queue(
                    &format!("fuzz-{round}.fifo"),
                    &[("FifoQueue", "true"), ("ContentBasedDeduplication", "true")],
                )
                .await,
                format!("{}/000000000000/absent", s.base),
            ];
            s.send(&f.urls[0], "seed").await;
            f.handles = s
                .receive(&f.urls[0], 10)
                .await
                .into_iter()
                .filter_map(|m| m.receipt_handle)
                .collect();
        }
        let action = f.pick(&actions);
        let request = if case % 2 == 0 {
            http.post(format!("{}/", s.base))
                .header("content-type", "application/x-amz-json-1.0")
                .header("x-amz-target", format!("AmazonSQS.{action}"))
                .body(f.json_body())
        } else if f.rng.random::<bool>() {
            f.short = true;
            let query = f.form(action);
            f.short = false;
            http.get(format!("{}/?{query}", s.base))
        } else {
            http.post(format!("{}/", s.base))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(f.form(action))
        };
        let response = request.send().await.unwrap_or_else(|e| {
            panic!(
                "case {case} ({action}) got no answer: {:.300}",
                e.to_string()
            )
        });
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        assert!(
            status < 500,
            "case {case} ({action}) answered {status}: {body:.300}"
        );
        answered += 1;
    }
    assert_eq!(answered, 2 * CASES_PER_PROTOCOL);
    s.sqs.list_queues().send().await.unwrap();
    let url = s.queue("after-the-fuzz", &[]).await;
    s.send(&url, "still here").await;
    assert_eq!(s.receive(&url, 1).await.len(), 1);
}
