//! The guardian: a small process `leasehold work` starts beside itself that outlives it, so a
//! worker killed outright (SIGKILL, the OOM killer) does not leave its commands running while
//! their messages go to another worker.
//!
//! Each command registers its process group with the guardian itself, from the forked child
//! before it execs (`+PGID` on a socket, one small send), so no command ever runs
//! unregistered; the worker sends `-PGID` once that group is empty (or killed past saving).
//! When the socket closes (the worker is gone, however it went), the guardian kills every
//! group still registered and exits. It is in a process group of its own and ignores the terminal's and a
//! supervisor's stop signals, so only the worker's end ends it.

use std::collections::HashSet;
use std::io::BufRead;
use std::os::fd::{AsRawFd, RawFd};
use std::process::Stdio;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use std::os::unix::net::UnixStream;
use std::sync::Mutex;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The hidden subcommand the guardian runs as.
pub const SUBCOMMAND: &str = "guard";

pub struct Guardian {
    /// The worker's end of the guardian's socket (its stdin).
    socket: Mutex<Option<UnixStream>>,
    fd: RawFd,
    /// Waits for the guardian's exit.
    exit: tokio::sync::Mutex<Option<JoinHandle<()>>>,
    finishing: Arc<AtomicBool>,
    died: Arc<AtomicBool>,
}

impl Guardian {
    /// Starts the guardian. Should it ever exit while the worker runs, `shutdown` is
    /// cancelled: the worker drains rather than run commands nothing could stop.
    pub fn start(shutdown: CancellationToken) -> anyhow::Result<Arc<Guardian>> {
        let exe = std::env::current_exe()?;
        // A socket rather than a pipe: a send can say MSG_NOSIGNAL, so a guardian that is gone
        // is an error to the sender, never a SIGPIPE (std resets SIGPIPE in a forked child).
        let (ours, theirs) = UnixStream::pair()?;
        let mut child = tokio::process::Command::new(exe)
            .arg(SUBCOMMAND)
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start the guardian of the commands: {e}"))?;
        let fd = ours.as_raw_fd();
        let finishing = Arc::new(AtomicBool::new(false));
        let died = Arc::new(AtomicBool::new(false));
        let exit = tokio::spawn({
            let (finishing, died) = (finishing.clone(), died.clone());
            async move {
                let status = child.wait().await;
                if !finishing.load(Ordering::Acquire) {
                    died.store(true, Ordering::Release);
                    tracing::error!(
                        ?status,
                        "the guardian of the commands exited: stopping the worker"
                    );
                    shutdown.cancel();
                }
            }
        });
        Ok(Arc::new(Guardian {
            socket: Mutex::new(Some(ours)),
            fd,
            exit: tokio::sync::Mutex::new(Some(exit)),
            finishing,
            died,
        }))
    }

    /// The socket's descriptor, for a forked command to register its group on (it is closed
    /// on exec, so the command itself never holds it).
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// The group is empty, or killed past saving: the guardian forgets it. Never blocks.
    pub fn forget(&self, group: u32) {
        let socket = self.socket.lock().unwrap_or_else(|p| p.into_inner());
        if socket.is_some() {
            let _ = send_line(self.fd, b'-', group);
        }
    }

    /// The worker is done: the guardian's socket closes, it exits, and is waited for. An
    /// error if it had died while the worker ran.
    pub async fn finish(&self) -> anyhow::Result<()> {
        self.finishing.store(true, Ordering::Release);
        self.socket.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(exit) = self.exit.lock().await.take() {
            let _ = exit.await;
        }
        if self.died.load(Ordering::Acquire) {
            anyhow::bail!("the guardian of the commands exited while the worker ran");
        }
        Ok(())
    }
}

/// Sends `{sign}{pid}\n` on `fd` without allocating and without waiting or raising SIGPIPE:
/// safe in a forked child before exec, where only async-signal-safe calls belong.
#[allow(unsafe_code)]
fn send_line(fd: RawFd, sign: u8, pid: u32) -> std::io::Result<()> {
    let mut buffer = [0u8; 16];
    let mut end = buffer.len() - 1;
    buffer[end] = b'\n';
    let mut n = pid;
    loop {
        end -= 1;
        buffer[end] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    end -= 1;
    buffer[end] = sign;
    let line = &buffer[end..];
    let flags = libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT;
    // SAFETY: sends `line` (valid for its length) on a descriptor this process holds.
    let sent = unsafe { libc::send(fd, line.as_ptr().cast(), line.len(), flags) };
    if sent == line.len() as isize {
        Ok(())
    } else {
        // From the raw code: nothing allocated.
        Err(std::io::Error::from_raw_os_error(libc::EPIPE))
    }
}

/// Registers the calling process (a forked child, before exec: its pid is its group's id)
/// with the guardian; an error stops the command from starting.
#[allow(unsafe_code)]
pub fn register_self(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: getpid is async-signal-safe and touches no memory of ours.
    let pid = unsafe { libc::getpid() };
    send_line(fd, b'+', pid as u32)
}

/// The guardian itself: reads registrations until its pipe closes, then kills every group
/// still registered.
#[allow(unsafe_code)]
pub fn run() -> anyhow::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: setting a signal's disposition to ignore touches no memory of ours.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
    let mut groups = HashSet::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let (sign, pid) = line.split_at(1.min(line.len()));
        match (sign, pid.parse::<i32>()) {
            ("+", Ok(pid)) if pid > 1 => {
                groups.insert(pid);
            }
            ("-", Ok(pid)) => {
                groups.remove(&pid);
            }
            _ => {}
        }
    }
    for group in groups {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is shared.
        unsafe { libc::kill(-group, libc::SIGKILL) };
        eprintln!(
            "leasehold guard: the worker is gone; killed the process group {group} of its command"
        );
    }
    Ok(())
}
