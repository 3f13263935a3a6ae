//! AWS's published Signature Version 4 test vectors (`sigv4-test-suite/`): Leasehold's
//! verifier accepts every signed request, header-signed and presigned, and refuses each one
//! whose signature, body, key or time was changed.

use std::path::Path;
use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use leasehold_protocol::ProtocolError;
use leasehold_server::auth::sigv4::{claim, verify, Arrived};

struct Case {
    name: String,
    secret: String,
    service: String,
    now: SystemTime,
}

/// A raw request from the suite: `METHOD PATH HTTP/1.1`, headers, a blank line, the body.
struct Raw {
    method: String,
    path_and_query: String,
    headers: HeaderMap,
    body: Vec<u8>,
}

fn cases() -> Vec<Case> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sigv4-test-suite");
    let mut cases: Vec<Case> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| {
            let context: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(e.path().join("context.json")).unwrap(),
            )
            .unwrap();
            Case {
                name: e.file_name().to_string_lossy().into_owned(),
                secret: context["credentials"]["secret_access_key"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                service: context["service"].as_str().unwrap().to_string(),
                // 2015-08-30T12:36:00Z, every case's time.
                now: SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160),
            }
        })
        .collect();
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(cases.len() >= 25, "the suite is there: {}", cases.len());
    cases
}

fn read(case: &Case, file: &str) -> Raw {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sigv4-test-suite")
        .join(&case.name)
        .join(file);
    let text = std::fs::read_to_string(path).unwrap();
    let (head, body) = text.split_once("\n\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let request_line = lines.next().unwrap();
    let (method, rest) = request_line.split_once(' ').unwrap();
    let target = rest.rsplit_once(' ').unwrap().0;
    let mut headers = HeaderMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').unwrap();
        headers.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    Raw {
        method: method.to_string(),
        path_and_query: encode_path(target),
        headers,
        body: body.as_bytes().to_vec(),
    }
}

/// What an HTTP client puts on the wire: the path's non-ASCII bytes and spaces
/// percent-encoded (the suite writes them raw).
fn encode_path(target: &str) -> String {
    target
        .bytes()
        .map(|b| {
            if b.is_ascii_graphic() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn check(case: &Case, raw: &Raw, secret: &str, now: SystemTime) -> Result<(), ProtocolError> {
    let arrived = Arrived {
        method: &raw.method,
        path_and_query: &raw.path_and_query,
        headers: &raw.headers,
        body: &raw.body,
    };
    let claim = claim(&arrived)?;
    verify(&arrived, &claim, secret, &case.service, now)
}

#[test]
fn every_header_signed_request_of_the_suite_is_accepted() {
    for case in cases() {
        let raw = read(&case, "header-signed-request.txt");
        check(&case, &raw, &case.secret, case.now)
            .unwrap_or_else(|e| panic!("{}: {e:?}", case.name));
    }
}

#[test]
fn every_presigned_request_of_the_suite_is_accepted_until_it_expires() {
    for case in cases() {
        let raw = read(&case, "query-signed-request.txt");
        check(&case, &raw, &case.secret, case.now)
            .unwrap_or_else(|e| panic!("{}: {e:?}", case.name));
        // Every case presigns for an hour.
        let later = case.now + Duration::from_secs(3_601);
        assert!(
            matches!(
                check(&case, &raw, &case.secret, later),
                Err(ProtocolError::RequestExpired(_))
            ),
            "{}",
            case.name
        );
    }
}

#[test]
fn a_changed_signature_secret_or_body_does_not_match() {
    for case in cases() {
        let raw = read(&case, "header-signed-request.txt");
        let wrong_secret = check(&case, &raw, "not-the-secret", case.now);
        assert!(
            matches!(wrong_secret, Err(ProtocolError::SignatureDoesNotMatch(_))),
            "{}: {wrong_secret:?}",
            case.name
        );
        let mut tampered = read(&case, "header-signed-request.txt");
        tampered.body.extend_from_slice(b"tampered");
        let result = check(&case, &tampered, &case.secret, case.now);
        assert!(
            matches!(result, Err(ProtocolError::SignatureDoesNotMatch(_))),
            "{}: {result:?}",
            case.name
        );
        let mut resigned = read(&case, "header-signed-request.txt");
        let authorization = resigned.headers["authorization"].to_str().unwrap();
        let (kept, last) = authorization.split_at(authorization.len() - 1);
        let flipped = format!("{kept}{}", if last == "0" { "1" } else { "0" });
        resigned
            .headers
            .insert("authorization", HeaderValue::from_str(&flipped).unwrap());
        let result = check(&case, &resigned, &case.secret, case.now);
        assert!(
            matches!(result, Err(ProtocolError::SignatureDoesNotMatch(_))),
            "{}: {result:?}",
            case.name
        );
    }
}

#[test]
fn more_than_fifteen_minutes_of_skew_is_refused_either_way() {
    let case = cases()
        .into_iter()
        .find(|c| c.name == "get-vanilla")
        .unwrap();
    let raw = read(&case, "header-signed-request.txt");
    let minutes = |m: u64| Duration::from_secs(m * 60);
    assert!(check(&case, &raw, &case.secret, case.now + minutes(14)).is_ok());
    assert!(check(&case, &raw, &case.secret, case.now - minutes(14)).is_ok());
    let late = check(&case, &raw, &case.secret, case.now + minutes(16));
    match late {
        Err(ProtocolError::RequestExpired(message)) => assert_eq!(
            message,
            "Signature expired: 20150830T123600Z is now earlier than 20150830T123700Z (20150830T125200Z - 15 min.)"
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        check(&case, &raw, &case.secret, case.now - minutes(16)),
        Err(ProtocolError::RequestExpired(_))
    ));
}

#[test]
fn a_missing_or_partial_signature_is_named_as_aws_names_it() {
    let case = cases()
        .into_iter()
        .find(|c| c.name == "get-vanilla")
        .unwrap();
    let mut raw = read(&case, "header-signed-request.txt");
    raw.headers.remove("authorization");
    assert_eq!(
        check(&case, &raw, &case.secret, case.now),
        Err(ProtocolError::MissingAuthenticationToken)
    );
    raw.headers.insert(
        "authorization",
        HeaderValue::from_static(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request",
        ),
    );
    match check(&case, &raw, &case.secret, case.now) {
        Err(ProtocolError::IncompleteSignature(message)) => {
            assert!(
                message.contains("requires 'Signature' parameter"),
                "{message}"
            );
            assert!(
                message.contains("requires 'SignedHeaders' parameter"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    let mut sqs = read(&case, "header-signed-request.txt");
    sqs.headers.remove("x-amz-date");
    assert!(matches!(
        check(&case, &sqs, &case.secret, case.now),
        Err(ProtocolError::IncompleteSignature(_))
    ));
    let other_service = Case {
        service: "sqs".into(),
        ..case
    };
    let raw = read(&other_service, "header-signed-request.txt");
    match check(
        &other_service,
        &raw,
        &other_service.secret,
        other_service.now,
    ) {
        Err(ProtocolError::SignatureDoesNotMatch(message)) => {
            assert_eq!(
                message,
                "Credential should be scoped to correct service: 'sqs'."
            )
        }
        other => panic!("{other:?}"),
    }
}
