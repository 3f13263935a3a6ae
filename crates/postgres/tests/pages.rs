//! How messages sit in PostgreSQL's pages, on the machine's real database (127.0.0.1:5432,
//! database `test`), in a schema of the test's own. Test names carry `postgres`, which is
//! how `scripts/test --no-services` skips them.

use leasehold_backend::{Messages, QueueAdmin};
use leasehold_engine::{NewMessage, ReceiveRequest};

mod common;
use common::{Schema, URL};

/// Each message's row and the page (block) it sits on.
async fn pages_of(schema: &Schema) -> Vec<(i64, String)> {
    let (client, connection) = tokio_postgres::connect(URL, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let sql = format!(
        "SELECT seq, split_part(trim(both '()' from ctid::text), ',', 1)
         FROM {}.leasehold_messages ORDER BY seq",
        schema.0
    );
    let rows = client.query(&sql, &[]).await.unwrap();
    rows.iter().map(|row| (row.get(0), row.get(1))).collect()
}

/// A receive rewrites the rows of the messages it leases, and every new version finds room
/// on its row's page, even when one receive leases most of a page's messages at once: a
/// heap-only update (no index entry, a WAL record less), which V12's fillfactor leaves room
/// for. At the earlier fillfactor of 70 some of these leases moved to other pages (checked).
#[tokio::test]
async fn postgres_a_lease_rewrites_its_row_on_its_own_page() {
    let schema = Schema::new().await;
    let server = schema.server().await;
    server.create_queue("q", vec![], vec![]).await.unwrap();
    let body = "b".repeat(200);
    for _ in 0..4 {
        let batch = (0..10).map(|_| NewMessage::new(&body)).collect();
        let sent = server.send_batch("q", batch).await.unwrap();
        assert!(sent.iter().all(|s| s.is_ok()));
    }
    let before = pages_of(&schema).await;
    let pages = before
        .iter()
        .map(|(_, page)| page)
        .collect::<std::collections::HashSet<_>>();
    assert!(
        pages.len() > 1,
        "a page holds fewer than 40 messages: {before:?}"
    );
    for _ in 0..4 {
        let request = ReceiveRequest {
            max_messages: 10,
            visibility_s: Some(30),
            attempt_id: None,
        };
        let taken = server.receive("q", request).await.unwrap();
        assert_eq!(taken.deliveries.len(), 10);
    }
    assert_eq!(
        pages_of(&schema).await,
        before,
        "every lease stayed on its row's page"
    );
    schema.drop_all([server]).await;
}
