//! A TCP proxy for fault tests, on 127.0.0.1 in front of one upstream port: it passes bytes
//! through, delays them, stalls them (connections stay open, nothing flows), cuts every open
//! connection, or refuses new ones (accepted and closed at once).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Each chunk, either way, waits this long.
    Delay(Duration),
    /// Nothing flows until the fault changes.
    Stall,
    /// New connections are closed at once.
    Refuse,
}

pub struct Proxy {
    pub port: u16,
    fault: watch::Sender<Fault>,
    cuts: watch::Sender<u64>,
    task: JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (fault, _) = watch::channel(Fault::None);
        let (cuts, _) = watch::channel(0u64);
        let task = tokio::spawn({
            let (fault, cuts) = (fault.clone(), cuts.clone());
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    if *fault.borrow() == Fault::Refuse {
                        continue;
                    }
                    tokio::spawn(connection(
                        client,
                        upstream,
                        fault.subscribe(),
                        cuts.subscribe(),
                    ));
                }
            }
        });
        Proxy {
            port,
            fault,
            cuts,
            task,
        }
    }

    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }

    /// Closes every open connection (new ones are taken as the fault says).
    pub fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut();
    }
}

async fn connection(
    client: TcpStream,
    upstream: u16,
    fault: watch::Receiver<Fault>,
    mut cuts: watch::Receiver<u64>,
) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    cuts.mark_unchanged();
    tokio::select! {
        _ = pump(client_read, server_write, fault.clone()) => {}
        _ = pump(server_read, client_write, fault) => {}
        _ = cuts.changed() => {}
    }
}

async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut fault: watch::Receiver<Fault>) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        loop {
            let now = *fault.borrow_and_update();
            match now {
                Fault::Stall => {
                    if fault.changed().await.is_err() {
                        return;
                    }
                }
                Fault::Delay(delay) => {
                    tokio::time::sleep(delay).await;
                    break;
                }
                Fault::None | Fault::Refuse => break,
            }
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}
