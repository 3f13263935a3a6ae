//! HTTPS: the server with a certificate from a test CA, the SDK trusting that CA, both
//! protocols' actions over it; queue URLs say https; a client that does not trust the CA
//! is refused at the handshake.

use aws_sdk_sqs::Client;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};
use leasehold_server::ServerConfig;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A CA, and a certificate it signed for localhost and 127.0.0.1: (CA PEM, cert PEM, key PEM).
pub fn test_ca() -> (String, String, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "Leasehold test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca_cert.pem(), server.pem(), key.serialize_pem())
}

fn client_trusting(endpoint: &str, ca_pem: Option<&str>) -> Client {
    let trust = match ca_pem {
        Some(pem) => TrustStore::empty().with_pem_certificate(pem.as_bytes()),
        None => TrustStore::empty().with_native_roots(true),
    };
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
        .tls_context(
            TlsContext::builder()
                .with_trust_store(trust)
                .build()
                .unwrap(),
        )
        .build_https();
    let config = crate::harness::sdk_config(endpoint, "test", "test", "us-east-1")
        .http_client(http)
        .build();
    Client::from_conf(config)
}

struct TlsServer {
    endpoint: String,
    ca: String,
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start_tls() -> TlsServer {
    let (ca, cert, key) = test_ca();
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert).unwrap();
    std::fs::write(&key_path, key).unwrap();
    let acceptor = leasehold_server::tls::acceptor(&cert_path, &key_path).unwrap();
    let state = super::harness::in_memory(ServerConfig {
        tls: true,
        ..ServerConfig::default()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!(
        "https://localhost:{}",
        listener.local_addr().unwrap().port()
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listeners = leasehold_server::Listeners {
        tls: Some(acceptor),
        admin: None,
    };
    let served = tokio::spawn(leasehold_server::serve_with(
        listener,
        state,
        listeners,
        async {
            let _ = stopped.await;
        },
    ));
    TlsServer {
        endpoint,
        ca,
        stop,
        served,
    }
}

#[tokio::test]
async fn the_sdk_works_over_https_trusting_the_test_ca() {
    let server = start_tls().await;
    let sqs = client_trusting(&server.endpoint, Some(&server.ca));
    let url = sqs
        .create_queue()
        .queue_name("secure")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    assert!(url.starts_with("https://localhost:"), "{url}");
    sqs.send_message_batch()
        .queue_url(&url)
        .entries(
            aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                .id("a")
                .message_body("one")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let got = sqs
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let message = &got.messages()[0];
    assert_eq!(message.body(), Some("one"));
    sqs.delete_message()
        .queue_url(&url)
        .receipt_handle(message.receipt_handle().unwrap())
        .send()
        .await
        .unwrap();
    let error = sqs
        .get_queue_url()
        .queue_name("absent")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        crate::harness::code(&error),
        "AWS.SimpleQueueService.NonExistentQueue"
    );
    let _ = server.stop.send(());
    server.served.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_ca_is_refused_at_the_handshake() {
    let server = start_tls().await;
    let sqs = client_trusting(&server.endpoint, None);
    let error = sqs.list_queues().send().await.unwrap_err();
    let shown = format!("{:?}", error);
    assert!(
        shown.contains("Certificate") || shown.contains("certificate"),
        "{shown}"
    );
    let _ = server.stop.send(());
    server.served.await.unwrap().unwrap();
}
