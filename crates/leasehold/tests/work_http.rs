//! `leasehold work --http URL` against a real HTTP app (a small axum server here): each
//! message POSTed as Elastic Beanstalk's worker daemon (sqsd) does, with its headers; a 200
//! deletes it, a failure or no answer in --http-timeout retries it after the backoff, slow
//! work keeps its lease by heartbeats, a lost lease aborts the request, and a Ctrl-C lets the
//! requests open finish.

mod common;

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::MessageAttributeValue;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use common::{wait_for, Server};

/// What the app saw: each request's body and headers, and what became of it.
#[derive(Default)]
struct App {
    requests: Mutex<Vec<(String, HashMap<String, String>)>>,
    ends: Mutex<Vec<(String, &'static str)>>,
}

impl App {
    fn seen(&self, body: &str) -> Vec<HashMap<String, String>> {
        let requests = self.requests.lock().unwrap();
        (requests.iter().filter(|(b, _)| b == body))
            .map(|(_, headers)| headers.clone())
            .collect()
    }

    fn ended(&self, body: &str, how: &str) -> bool {
        let ends = self.ends.lock().unwrap();
        ends.iter().any(|(b, h)| b == body && *h == how)
    }
}

/// Notes how a request ended: answered, or dropped unanswered (the client went away).
struct Ending {
    app: Arc<App>,
    body: String,
    how: &'static str,
}

impl Drop for Ending {
    fn drop(&mut self) {
        let ended = (std::mem::take(&mut self.body), self.how);
        self.app.ends.lock().unwrap().push(ended);
    }
}

/// The app: `ok` answers 200; `fail-once` 500, then 200; `created-once` 201, then 200;
/// `hang-once` never answers, then 200; `slow` and `drain` answer 200 after 4 s and 1.5 s;
/// `hold` never answers.
async fn handle(State(app): State<Arc<App>>, headers: HeaderMap, body: String) -> StatusCode {
    let shown = (headers.iter())
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let before = app.seen(&body).len();
    app.requests.lock().unwrap().push((body.clone(), shown));
    let mut ending = Ending {
        app: app.clone(),
        body: body.clone(),
        how: "aborted",
    };
    let status = match (body.as_str(), before) {
        ("fail-once", 0) => StatusCode::INTERNAL_SERVER_ERROR,
        ("created-once", 0) => StatusCode::CREATED,
        ("hang-once", 0) | ("hold", _) => {
            tokio::time::sleep(Duration::from_secs(600)).await;
            StatusCode::OK
        }
        ("slow", _) => {
            tokio::time::sleep(Duration::from_secs(4)).await;
            StatusCode::OK
        }
        ("drain", _) => {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            StatusCode::OK
        }
        _ => StatusCode::OK,
    };
    ending.how = "answered";
    status
}

/// The app on a free loopback port: its URL.
async fn start_app(app: Arc<App>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/work", listener.local_addr().unwrap());
    let router = axum::Router::new()
        .route("/work", axum::routing::post(handle))
        .with_state(app);
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

/// `leasehold work --http` in a process group of its own, as a shell runs a foreground job:
/// a 3 s lease heartbeated every second, an answer timeout of `timeout_s`, retries after 1 s.
fn work(server: &Server, queue: &str, app: &str, timeout_s: u32) -> Child {
    common::leasehold_work(server, queue)
        .process_group(0)
        .args(["--lease", "3", "--heartbeat", "1", "--http", app])
        .args(["--http-timeout", &timeout_s.to_string()])
        .args(["--backoff", "1", "--max-backoff", "1"])
        .spawn()
        .unwrap()
}

fn stop(mut worker: Child) {
    let _ = worker.kill();
    let _ = worker.wait();
}

#[tokio::test]
async fn each_message_is_posted_as_sqsd_does_and_only_a_200_deletes_it() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let queue = common::create_queue(&sqs, "posted").await;
    let tag = MessageAttributeValue::builder()
        .data_type("String")
        .string_value("blue")
        .build()
        .unwrap();
    let ok = (sqs.send_message().queue_url(&queue).message_body("ok"))
        .message_attributes("colour", tag)
        .send()
        .await
        .unwrap()
        .message_id
        .unwrap();
    for body in ["fail-once", "created-once", "hang-once", "slow"] {
        common::send(&sqs, &queue, body).await;
    }
    let app = Arc::new(App::default());
    let url = start_app(app.clone()).await;
    let worker = work(&server, &queue, &url, 6);
    wait_for("every message deleted", Duration::from_secs(30), || {
        app.ended("hang-once", "answered") && app.seen("hang-once").len() == 2
    })
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while common::stored(&sqs, &queue).await != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the queue did not empty"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop(worker);

    let seen = app.seen("ok");
    assert_eq!(seen.len(), 1, "a 200 deletes the message: posted once");
    let headers = &seen[0];
    assert_eq!(headers["x-aws-sqsd-msgid"], ok);
    assert_eq!(headers["x-aws-sqsd-queue"], "posted");
    assert_eq!(headers["x-aws-sqsd-receive-count"], "1");
    assert_eq!(headers["x-aws-sqsd-attr-colour"], "blue");
    assert_eq!(headers["x-leasehold-idempotency-key"], ok);
    assert_eq!(headers["content-type"], "application/json");
    let first = &headers["x-aws-sqsd-first-received-at"];
    assert!(
        first.len() >= 20 && first.ends_with('Z') && first.contains('T'),
        "{first}"
    );
    // A 500, a 201 (only a 200 deletes, as with sqsd), and no answer within --http-timeout,
    // each retried on the next receive.
    let counts = |body: &str| -> Vec<String> {
        (app.seen(body).iter())
            .map(|h| h["x-aws-sqsd-receive-count"].clone())
            .collect()
    };
    assert_eq!(counts("fail-once"), ["1", "2"]);
    assert_eq!(counts("created-once"), ["1", "2"]);
    assert_eq!(counts("hang-once"), ["1", "2"]);
    assert!(
        app.ended("hang-once", "aborted"),
        "the timed-out request was not dropped"
    );
    // Four seconds of work on a three-second lease: heartbeats kept it, posted once.
    assert_eq!(counts("slow"), ["1"]);
}

#[tokio::test]
async fn a_lost_lease_aborts_the_request_open() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let queue = common::create_queue(&sqs, "held").await;
    common::send(&sqs, &queue, "hold").await;
    let app = Arc::new(App::default());
    let url = start_app(app.clone()).await;
    // An answer timeout far beyond the wait below: only the lost lease can end the request.
    let worker = work(&server, &queue, &url, 120);
    wait_for("the request is open", Duration::from_secs(10), || {
        app.seen("hold").len() == 1
    })
    .await;
    // The message disappears under the worker: its next heartbeat finds the lease gone.
    sqs.purge_queue().queue_url(&queue).send().await.unwrap();
    wait_for("the request was aborted", Duration::from_secs(5), || {
        app.ended("hold", "aborted")
    })
    .await;
    stop(worker);
}

#[tokio::test]
async fn ctrl_c_lets_the_requests_open_finish_and_deletes_their_messages() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let queue = common::create_queue(&sqs, "drained").await;
    common::send(&sqs, &queue, "drain").await;
    let app = Arc::new(App::default());
    let url = start_app(app.clone()).await;
    let mut worker = work(&server, &queue, &url, 6);
    wait_for("the request is open", Duration::from_secs(10), || {
        app.seen("drain").len() == 1
    })
    .await;
    assert!(common::interrupt(&mut worker).await.success());
    assert!(app.ended("drain", "answered"), "the request was cut off");
    assert_eq!(
        common::stored(&sqs, &queue).await,
        0,
        "finished work is deleted"
    );
}
