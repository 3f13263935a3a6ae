//! Every field of every action's input, over both protocols (issue 35): requests generated
//! from SQS's own model of each action's input (`data/sqs-inputs.json`, botocore's), so every
//! member of every shape, nested ones included (batch entries, message attributes and their
//! list values, maps of attributes and tags), gets values, mostly plausible and sometimes
//! hostile or of the wrong type; serialised as AWS JSON 1.0 and as the query protocol
//! (the names a query client sends: `Attribute.1.Name`, `SendMessageBatchRequestEntry.2.
//! MessageAttribute.1.Value.StringListValue.1`). Every answer must be a well-formed SQS
//! success or error of that protocol, never a server error. With `LEASEHOLD_TEST_BACKEND=
//! postgres` (as the test command runs the suite a second time) it runs on PostgreSQL too.

use std::collections::BTreeSet;

use base64::Engine as _;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};

use crate::harness::TestServer;

const CASES_PER_PROTOCOL: usize = 600;
const MODEL: &str = include_str!("data/sqs-inputs.json");

struct Gen {
    rng: StdRng,
    model: Value,
    urls: Vec<String>,
    arns: Vec<String>,
    handles: Vec<String>,
    tasks: Vec<String>,
    /// A queue of the round that DeleteQueue takes instead of the others, mostly, so that
    /// the rest of the round has queues to work on.
    victim: String,
}

impl Gen {
    fn shape(&self, name: &str) -> &Value {
        &self.model["shapes"][name]
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    fn pick(&mut self, items: &[String]) -> String {
        match items.len() {
            0 => "nothing-here".into(),
            n => items[self.rng.random_range(0..n)].clone(),
        }
    }

    /// A value for the shape `name`, as the member `hint` would hold it.
    fn value(&mut self, name: &str, hint: &str, depth: u32) -> Value {
        let shape = self.shape(name).clone();
        if self.chance(0.03) {
            // The wrong type altogether.
            return [
                json!(null),
                json!(17),
                json!("text"),
                json!([1]),
                json!({"x": 1}),
            ][self.rng.random_range(0..5)]
            .clone();
        }
        match shape["type"].as_str().unwrap_or("string") {
            "structure" => {
                let required: BTreeSet<&str> = shape["required"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                let mut object = Map::new();
                for (member, reference) in shape["members"].as_object().into_iter().flatten() {
                    let keep = if required.contains(member.as_str()) {
                        0.92
                    } else {
                        0.5
                    };
                    if depth < 6 && self.chance(keep) {
                        let target = reference["shape"].as_str().unwrap_or("String");
                        object.insert(member.clone(), self.value(target, member, depth + 1));
                    }
                }
                Value::Object(object)
            }
            "list" => {
                let member = shape["member"]["shape"]
                    .as_str()
                    .unwrap_or("String")
                    .to_string();
                let n = match self.rng.random_range(0..10) {
                    0 => 0,
                    1 => 11,
                    _ => self.rng.random_range(1..4),
                };
                Value::Array(
                    (0..n)
                        .map(|_| self.value(&member, hint, depth + 1))
                        .collect(),
                )
            }
            "map" => {
                let key = shape["key"]["shape"]
                    .as_str()
                    .unwrap_or("String")
                    .to_string();
                let value = shape["value"]["shape"]
                    .as_str()
                    .unwrap_or("String")
                    .to_string();
                let n = self.rng.random_range(0..4);
                let mut map = Map::new();
                for _ in 0..n {
                    let k = match self.value(&key, "Key", depth + 1) {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    let v = self.value(&value, &k, depth + 1);
                    map.insert(k, v);
                }
                Value::Object(map)
            }
            "integer" | "long" => json!(self.integer()),
            "boolean" => json!(self.rng.random::<bool>()),
            "blob" => json!(self.blob()),
            _ => match shape["enum"].as_array() {
                Some(values) if self.chance(0.9) => {
                    values[self.rng.random_range(0..values.len())].clone()
                }
                _ => json!(self.text(hint)),
            },
        }
    }

    fn integer(&mut self) -> i64 {
        const EDGES: [i64; 14] = [
            -1,
            0,
            1,
            2,
            10,
            11,
            20,
            21,
            60,
            900,
            43_200,
            43_201,
            1_209_601,
            i64::MAX,
        ];
        EDGES[self.rng.random_range(0..EDGES.len())]
    }

    fn blob(&mut self) -> String {
        if self.chance(0.1) {
            return "not base64!".into();
        }
        let n = self.rng.random_range(0..40);
        let bytes: Vec<u8> = (0..n).map(|_| self.rng.random()).collect();
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// Text for the member `hint`: what it holds, mostly; anything, sometimes.
    fn text(&mut self, hint: &str) -> String {
        if self.chance(0.1) {
            return self.hostile();
        }
        let pool = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let choices = match hint {
            // The queue the handles are of, half the time.
            "QueueUrl" if self.chance(0.5) => self.urls[..1].to_vec(),
            "QueueUrl" => self.urls.clone(),
            "SourceArn" | "DestinationArn" => self.arns.clone(),
            "ReceiptHandle" => self.handles.clone(),
            "TaskHandle" => self.tasks.clone(),
            "QueueName" | "QueueNamePrefix" => {
                pool(&["fuzz-made", "fuzz-made.fifo", "fuzz", "", "no spaces"])
            }
            "Label" => pool(&["label", "l-2", "bad label!"]),
            "AWSAccountIds" => pool(&["111111111111", "000000000000", "12"]),
            "Actions" => pool(&[
                "SendMessage",
                "*",
                "ReceiveMessage",
                "DeleteQueue",
                "Teleport",
            ]),
            "Id" => pool(&["a", "b", "a", "bad id!"]),
            "MessageGroupId" | "MessageDeduplicationId" | "ReceiveRequestAttemptId" => {
                pool(&["g1", "g2", "dedup-1"])
            }
            "DataType" => pool(&[
                "String",
                "Number",
                "Binary",
                "Number.price",
                "String.x",
                "Custom",
            ]),
            "StringValue" | "StringListValues" => pool(&["12.5", "text", "-0", ""]),
            "RedrivePolicy" => vec![format!(
                r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":{}}}"#,
                self.pick(&self.arns.clone()),
                self.integer()
            )],
            "RedriveAllowPolicy" => pool(&[
                r#"{"redrivePermission":"allowAll"}"#,
                r#"{"redrivePermission":"byQueue"}"#,
            ]),
            "Policy" => pool(&[r#"{"Version":"2012-10-17","Statement":[]}"#, "{"]),
            "VisibilityTimeout"
            | "DelaySeconds"
            | "MessageRetentionPeriod"
            | "MaximumMessageSize"
            | "ReceiveMessageWaitTimeSeconds" => {
                vec![self.integer().to_string()]
            }
            "FifoQueue" | "ContentBasedDeduplication" | "SqsManagedSseEnabled" => {
                pool(&["true", "false", "yes"])
            }
            _ => pool(&[
                "fuzz",
                "value",
                "arn:aws:sqs:us-east-1:000000000000:fuzz",
                "0",
                "All",
            ]),
        };
        self.pick(&choices)
    }

    fn hostile(&mut self) -> String {
        match self.rng.random_range(0..5) {
            0 => "\u{0}\u{1}\u{fffe}".into(),
            1 => "x".repeat(self.rng.random_range(0..3_000)),
            2 => "99999999999999999999999999".into(),
            3 => "%FF %".into(),
            _ => (0..self.rng.random_range(0..30))
                .map(|_| char::from_u32(self.rng.random_range(0..0x11_0000)).unwrap_or('?'))
                .collect(),
        }
    }
}

/// `value`, of the shape `name`, as query parameters under `prefix`, the way botocore's query
/// serializer names them.
fn to_query(
    model: &Value,
    value: &Value,
    name: &str,
    prefix: &str,
    out: &mut Vec<(String, String)>,
) {
    let shape = &model["shapes"][name];
    let located = |reference: &Value, default: &str| {
        reference["locationName"]
            .as_str()
            .unwrap_or(default)
            .to_string()
    };
    match (shape["type"].as_str().unwrap_or("string"), value) {
        ("structure", Value::Object(members)) => {
            for (member, v) in members {
                let reference = &shape["members"][member];
                let part = located(reference, member);
                let full = if prefix.is_empty() {
                    part
                } else {
                    format!("{prefix}.{part}")
                };
                let target = reference["shape"].as_str().unwrap_or("String");
                let flattened = reference["flattened"].as_bool().unwrap_or(false);
                to_query_member(model, v, target, &full, flattened, out);
            }
        }
        _ => to_query_member(model, value, name, prefix, false, out),
    }
}

fn to_query_member(
    model: &Value,
    value: &Value,
    name: &str,
    prefix: &str,
    flattened_here: bool,
    out: &mut Vec<(String, String)>,
) {
    let shape = &model["shapes"][name];
    let flattened = flattened_here || shape["flattened"].as_bool().unwrap_or(false);
    match (shape["type"].as_str().unwrap_or("string"), value) {
        ("structure", Value::Object(_)) => to_query(model, value, name, prefix, out),
        ("list", Value::Array(items)) => {
            if items.is_empty() {
                out.push((prefix.to_string(), String::new()));
            }
            let member = &shape["member"];
            let list_prefix = if flattened {
                match member["locationName"].as_str() {
                    Some(located) => match prefix.rsplit_once('.') {
                        Some((head, _)) => format!("{head}.{located}"),
                        None => located.to_string(),
                    },
                    None => prefix.to_string(),
                }
            } else {
                format!(
                    "{prefix}.{}",
                    member["locationName"].as_str().unwrap_or("member")
                )
            };
            let target = member["shape"].as_str().unwrap_or("String");
            for (i, item) in items.iter().enumerate() {
                to_query_member(
                    model,
                    item,
                    target,
                    &format!("{list_prefix}.{}", i + 1),
                    false,
                    out,
                );
            }
        }
        ("map", Value::Object(entries)) => {
            let base = if flattened {
                prefix.to_string()
            } else {
                format!("{prefix}.entry")
            };
            let key = shape["key"]["locationName"].as_str().unwrap_or("key");
            let value_name = shape["value"]["locationName"].as_str().unwrap_or("value");
            let value_shape = shape["value"]["shape"].as_str().unwrap_or("String");
            for (i, (k, v)) in entries.iter().enumerate() {
                out.push((format!("{base}.{}.{key}", i + 1), k.clone()));
                to_query_member(
                    model,
                    v,
                    value_shape,
                    &format!("{base}.{}.{value_name}", i + 1),
                    false,
                    out,
                );
            }
        }
        (_, Value::String(s)) => out.push((prefix.to_string(), s.clone())),
        (_, Value::Null) => out.push((prefix.to_string(), String::new())),
        (_, other) => out.push((prefix.to_string(), other.to_string())),
    }
}

/// Checks an AWS JSON 1.0 answer: JSON, an object on success, `__type` and `message` and the
/// query-error header on an error.
fn check_json(case: usize, action: &str, status: u16, query_error: bool, body: &str) {
    assert!(
        status < 500,
        "case {case} ({action}) answered {status}: {body:.300}"
    );
    let parsed: Value = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("case {case} ({action}): not JSON ({e}): {body:.300}"));
    assert!(parsed.is_object(), "case {case} ({action}): {body:.300}");
    if status != 200 {
        assert!(
            parsed["__type"].is_string(),
            "case {case} ({action}): {body:.300}"
        );
        assert!(
            parsed["message"].is_string(),
            "case {case} ({action}): {body:.300}"
        );
        assert!(query_error, "case {case} ({action}): no x-amzn-query-error");
    }
}

/// Checks a query answer: well-formed XML, `{Action}Response` on success and an
/// `ErrorResponse` with a code on an error.
fn check_xml(case: usize, action: &str, status: u16, body: &str) {
    assert!(
        status < 500,
        "case {case} ({action}) answered {status}: {body:.300}"
    );
    let document = roxmltree::Document::parse(body)
        .unwrap_or_else(|e| panic!("case {case} ({action}): not XML ({e}): {body:.300}"));
    let root = document.root_element().tag_name().name();
    if status == 200 {
        assert_eq!(
            root,
            format!("{action}Response"),
            "case {case}: {body:.300}"
        );
    } else {
        assert_eq!(root, "ErrorResponse", "case {case} ({action}): {body:.300}");
        let code = document
            .descendants()
            .find(|n| n.has_tag_name("Code"))
            .and_then(|n| n.text());
        assert!(
            code.is_some_and(|c| !c.is_empty()),
            "case {case} ({action}): {body:.300}"
        );
    }
}

async fn fresh_queues(s: &TestServer, g: &mut Gen, round: usize) {
    let dlq = s.queue(&format!("shapes-{round}-dlq"), &[]).await;
    let arn = |name: &str| format!("arn:aws:sqs:us-east-1:000000000000:{name}");
    let redrive = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":1}}"#,
        arn(&format!("shapes-{round}-dlq"))
    );
    let source = s
        .queue(&format!("shapes-{round}"), &[("RedrivePolicy", &redrive)])
        .await;
    let fifo = s
        .queue(
            &format!("shapes-{round}.fifo"),
            &[("FifoQueue", "true"), ("ContentBasedDeduplication", "true")],
        )
        .await;
    for body in ["one", "two", "three"] {
        s.send(&source, body).await;
    }
    g.handles = s
        .receive(&source, 10)
        .await
        .into_iter()
        .filter_map(|m| m.receipt_handle)
        .collect();
    g.urls = vec![source, dlq, fifo, format!("{}/000000000000/absent", s.base)];
    g.arns = vec![
        arn(&format!("shapes-{round}-dlq")),
        arn(&format!("shapes-{round}")),
        arn("absent"),
        "arn:aws:sqs:us-east-1:111111111111:elsewhere".into(),
        "arn:nonsense".into(),
    ];
    g.tasks = vec!["eyJub3QiOiJhIHRhc2sifQ==".into(), "junk".into()];
    g.victim = s.queue(&format!("shapes-{round}-victim"), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_field_of_every_action_over_both_protocols_is_answered_in_its_format() {
    let s = TestServer::start().await;
    let model: Value = serde_json::from_str(MODEL).unwrap();
    let operations: BTreeSet<&str> = model["operations"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let ours: BTreeSet<&str> = leasehold_protocol::ACTIONS.iter().copied().collect();
    assert_eq!(ours, operations, "the actions! list and SQS's model differ");
    let actions: Vec<String> = operations.iter().map(|s| s.to_string()).collect();
    let mut g = Gen {
        rng: StdRng::seed_from_u64(0x5a9e),
        model: model.clone(),
        urls: Vec::new(),
        arns: Vec::new(),
        handles: Vec::new(),
        tasks: Vec::new(),
        victim: String::new(),
    };
    let http = reqwest::Client::new();
    // Successes per action: generated inputs must reach the actions, not only their checks.
    let mut succeeded: std::collections::BTreeMap<String, usize> = Default::default();
    for case in 0..2 * CASES_PER_PROTOCOL {
        if case % 150 == 0 {
            fresh_queues(&s, &mut g, case / 150).await;
        }
        let action = g.pick(&actions);
        let input = model["operations"][&action].as_str().unwrap().to_string();
        let mut value = g.value(&input, "", 0);
        if action == "DeleteQueue" && value["QueueUrl"].is_string() && g.chance(0.9) {
            value["QueueUrl"] = json!(g.victim);
        }
        if case % 2 == 0 {
            let response = http
                .post(format!("{}/", s.base))
                .header("content-type", "application/x-amz-json-1.0")
                .header("x-amz-target", format!("AmazonSQS.{action}"))
                .body(value.to_string())
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let query_error = response.headers().contains_key("x-amzn-query-error");
            let body = response.text().await.unwrap();
            check_json(case, &action, status, query_error, &body);
            if let Some(handle) = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v["TaskHandle"].as_str().map(str::to_string))
            {
                g.tasks.push(handle);
            }
            *succeeded.entry(action.clone()).or_default() += usize::from(status == 200);
        } else {
            let mut params = vec![("Action".to_string(), action.clone())];
            to_query(&model, &value, &input, "", &mut params);
            let response = http
                .post(format!("{}/", s.base))
                .form(&params)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let body = response.text().await.unwrap();
            check_xml(case, &action, status, &body);
            if let Some((_, rest)) = body.split_once("<TaskHandle>") {
                g.tasks
                    .push(rest.split('<').next().unwrap_or_default().to_string());
            }
            *succeeded.entry(action.clone()).or_default() += usize::from(status == 200);
        }
    }
    println!("successes per action: {succeeded:?}");
    let reached = succeeded.values().filter(|n| **n > 0).count();
    assert!(
        reached >= 21,
        "only {reached} actions ever succeeded: {succeeded:?}"
    );
    // Still serving.
    let url = s.queue("after-the-shapes", &[]).await;
    s.send(&url, "still here").await;
    assert_eq!(s.receive(&url, 1).await.len(), 1);
}
