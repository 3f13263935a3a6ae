//! What checking a signature costs a request: a SendMessage as the AWS SDK for Rust signs it,
//! its claim read and its signature computed again and compared.
//! `cargo bench -p leasehold-server --bench sigv4`

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use criterion::{criterion_group, criterion_main, Criterion};
use leasehold_server::auth::sigv4::{claim, verify, Arrived};

fn signed_send() -> (HeaderMap, Vec<u8>, SystemTime) {
    let body = br#"{"QueueUrl":"http://127.0.0.1:9324/000000000000/jobs","MessageBody":"a body of about two hundred bytes, as the benchmarks send: lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua."}"#.to_vec();
    let now = SystemTime::now();
    let identity: Identity = Credentials::new("AKIDBENCH", "bench-secret", None, None, "b").into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("sqs")
        .time(now)
        .settings(SigningSettings::default())
        .build()
        .unwrap()
        .into();
    let headers = [
        ("content-type", "application/x-amz-json-1.0"),
        ("host", "127.0.0.1:9324"),
        ("x-amz-target", "AmazonSQS.SendMessage"),
        (
            "amz-sdk-invocation-id",
            "4a9c3e1b-7f1d-4f0e-9d7e-0a1b2c3d4e5f",
        ),
        ("amz-sdk-request", "attempt=1; max=1"),
    ];
    let signable = SignableRequest::new(
        "POST",
        "http://127.0.0.1:9324/",
        headers.iter().copied(),
        SignableBody::Bytes(&body),
    )
    .unwrap();
    let (instructions, _) = sign(signable, &params).unwrap().into_parts();
    let mut map = HeaderMap::new();
    for (name, value) in headers.iter().copied().chain(instructions.headers()) {
        map.insert(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    (map, body, now)
}

fn bench(c: &mut Criterion) {
    let (headers, body, now) = signed_send();
    let arrived = Arrived {
        method: "POST",
        path_and_query: "/",
        headers: &headers,
        body: &body,
    };
    c.bench_function("sigv4: claim and verify a signed SendMessage", |b| {
        b.iter(|| {
            let claim = claim(&arrived).unwrap();
            verify(&arrived, &claim, "bench-secret", "sqs", now).unwrap();
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
