//! The guardian: a small process `leasehold work` starts beside itself that outlives it, so a
//! worker killed outright (SIGKILL, the OOM killer) does not leave its commands running while
//! their messages go to another worker.
//!
//! Each command registers its process group with the guardian itself, from the forked child
//! before it execs (`+PGID` on a pipe; a write of a few bytes to a pipe is atomic), so no
//! command ever runs unregistered; the worker writes `-PGID` once that group is empty. When the
//! pipe closes (the worker is gone, however it went), the guardian kills every group still
//! registered and exits. It is in a process group of its own and ignores the terminal's and a
//! supervisor's stop signals, so only the worker's end ends it.

use std::collections::HashSet;
use std::io::BufRead;
use std::os::fd::{AsRawFd, RawFd};
use std::process::Stdio;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The hidden subcommand the guardian runs as.
pub const SUBCOMMAND: &str = "guard";

pub struct Guardian {
    pipe: Mutex<Option<ChildStdin>>,
    fd: RawFd,
    /// Waits for the guardian's exit.
    exit: Mutex<Option<JoinHandle<()>>>,
    finishing: Arc<AtomicBool>,
    died: Arc<AtomicBool>,
}

impl Guardian {
    /// Starts the guardian. Should it ever exit while the worker runs, `shutdown` is
    /// cancelled: the worker drains rather than run commands nothing could stop.
    pub fn start(shutdown: CancellationToken) -> anyhow::Result<Arc<Guardian>> {
        let exe = std::env::current_exe()?;
        let mut child = tokio::process::Command::new(exe)
            .arg(SUBCOMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start the guardian of the commands: {e}"))?;
        let pipe = child.stdin.take().expect("stdin was piped");
        let fd = pipe.as_raw_fd();
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
            pipe: Mutex::new(Some(pipe)),
            fd,
            exit: Mutex::new(Some(exit)),
            finishing,
            died,
        }))
    }

    /// The pipe's descriptor, for a forked command to register its group on (it is closed on
    /// exec, so the command itself never holds it).
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// The group is empty: the guardian forgets it.
    pub async fn forget(&self, group: u32) {
        if let Some(pipe) = self.pipe.lock().await.as_mut() {
            let _ = pipe.write_all(format!("-{group}\n").as_bytes()).await;
        }
    }

    /// The worker is done: the guardian's pipe closes, it exits, and is waited for. An error
    /// if it had died while the worker ran.
    pub async fn finish(&self) -> anyhow::Result<()> {
        self.finishing.store(true, Ordering::Release);
        self.pipe.lock().await.take();
        if let Some(exit) = self.exit.lock().await.take() {
            let _ = exit.await;
        }
        if self.died.load(Ordering::Acquire) {
            anyhow::bail!("the guardian of the commands exited while the worker ran");
        }
        Ok(())
    }
}

/// Writes `+PID\n` to `fd` without allocating: called in a forked child before exec, where
/// only async-signal-safe calls belong.
#[allow(unsafe_code)]
pub fn register_self(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: getpid and write are async-signal-safe; the buffer lives on this stack frame.
    let pid = unsafe { libc::getpid() };
    let mut buffer = [0u8; 24];
    let mut end = buffer.len();
    buffer[end - 1] = b'\n';
    end -= 1;
    let mut n = pid as u32;
    loop {
        end -= 1;
        buffer[end] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    end -= 1;
    buffer[end] = b'+';
    let line = &buffer[end..];
    // SAFETY: writes `line` (valid for its length) to a descriptor this process holds.
    let written = unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) };
    if written == line.len() as isize {
        Ok(())
    } else {
        Err(std::io::Error::other(
            "the guardian of the commands is gone: not starting a command it could not stop",
        ))
    }
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
