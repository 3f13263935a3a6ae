//! Wake-ups across servers: a command that makes messages receivable (a send, a release)
//! sends `NOTIFY leasehold_ready` in its transaction, delivered when it commits; every server
//! listens on one connection of its own and wakes as many of its waiting receives on that
//! queue. A server wakes its own waiters at once and skips its own notifications.

use std::sync::Arc;
use std::time::Duration;

use leasehold_backend::Waiters;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Config, NoTls};

use crate::tx::Tx;
use crate::{cached, cause, unavailable};

const CHANNEL: &str = "leasehold_ready";

/// The notifications' statement (`notify_many`): one per queue.
pub(crate) const NOTIFY_SQL: &str = "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p";

/// How long a lost listening connection waits before it connects again.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// Tells every other server that `count` messages of `queue` may be receivable, when `tx`
/// commits.
pub(crate) async fn notify(
    tx: &Tx,
    server: u64,
    queue: &str,
    count: usize,
) -> Result<(), leasehold_backend::BackendError> {
    notify_many(tx, server, &[(queue, count)]).await
}

/// `notify` for several queues, in one statement.
pub(crate) async fn notify_many(
    tx: &Tx,
    server: u64,
    counts: &[(&str, usize)],
) -> Result<(), leasehold_backend::BackendError> {
    let payloads: Vec<String> = counts
        .iter()
        .filter(|(_, count)| *count > 0)
        .map(|(queue, count)| format!("{server} {count} {queue}"))
        .collect();
    if payloads.is_empty() {
        return Ok(());
    }
    tx.execute(&cached(tx, NOTIFY_SQL).await?, &[&CHANNEL, &payloads])
        .await
        .map_err(|e| unavailable(&e))?;
    Ok(())
}

/// Listens for other servers' notifications until dropped, reconnecting when the database
/// goes away; after a reconnection every waiter looks again, since notifications sent
/// meanwhile are lost.
pub(crate) struct Listener(JoinHandle<()>);

impl Drop for Listener {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Listener {
    /// Starts listening; returns once the first connection listens (so no send after it
    /// goes unheard), or with the reason it could not.
    pub(crate) async fn start(
        config: Config,
        server: u64,
        waiters: Arc<Waiters>,
    ) -> Result<Listener, String> {
        let (listening, first) = tokio::sync::oneshot::channel();
        let mut listening = Some(listening);
        let task = tokio::spawn(async move {
            loop {
                let outcome = listen(&config, server, &waiters, &mut listening).await;
                if let (Err(why), Some(first)) = (&outcome, listening.take()) {
                    let _ = first.send(Err(why.clone()));
                    return;
                }
                if let Err(why) = outcome {
                    tracing::warn!(%why, "lost the connection that hears other servers' sends; connecting again");
                }
                tokio::time::sleep(RECONNECT_AFTER).await;
                waiters.wake_all();
            }
        });
        let listener = Listener(task);
        match first.await {
            Ok(Ok(())) => Ok(listener),
            Ok(Err(why)) => Err(why),
            Err(_) => Err("the listener stopped before it listened".into()),
        }
    }
}

type Listening = Option<tokio::sync::oneshot::Sender<Result<(), String>>>;

/// One listening connection, until it fails.
async fn listen(
    config: &Config,
    server: u64,
    waiters: &Waiters,
    listening: &mut Listening,
) -> Result<(), String> {
    let (client, mut connection) = config.connect(NoTls).await.map_err(|e| cause(&e))?;
    let (sender, mut received) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        loop {
            let message = std::future::poll_fn(|cx| connection.poll_message(cx)).await;
            match message {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if sender.send(n.payload().to_string()).is_err() {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {CHANNEL}"))
        .await
        .map_err(|e| cause(&e))?;
    if let Some(first) = listening.take() {
        let _ = first.send(Ok(()));
    }
    while let Some(payload) = received.recv().await {
        let mut parts = payload.splitn(3, ' ');
        let (Some(from), Some(count), Some(queue)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if from.parse() == Ok(server) {
            continue;
        }
        waiters.wake_some(queue, count.parse().unwrap_or(1));
    }
    driver.abort();
    Err("the listening connection closed".into())
}
