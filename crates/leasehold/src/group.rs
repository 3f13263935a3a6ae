//! A child's process group: stopped (SIGTERM, then SIGKILL after a grace) and waited for until
//! it is empty, so nothing the child started outlives it; killed outright when dropped.

use std::time::Duration;

/// How long a SIGKILLed group may take to empty (the kernel tears it down; init reaps what
/// was orphaned) before the caller goes on without it.
pub(crate) const KILL_WAIT: Duration = Duration::from_millis(250);

/// The process group a child runs in (its id is the child's pid).
pub(crate) struct ProcessGroup {
    id: u32,
    /// Seen empty: its id may belong to another group by now, so it is not signalled again.
    emptied: bool,
}

impl ProcessGroup {
    pub(crate) fn new(id: u32) -> ProcessGroup {
        ProcessGroup { id, emptied: false }
    }

    #[allow(unsafe_code)]
    fn signal(&self, signal: libc::c_int) -> std::io::Result<()> {
        if self.emptied {
            return Ok(());
        }
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is shared.
        match unsafe { libc::kill(-(self.id as libc::pid_t), signal) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }

    /// Whether any process is left in the group (a zombie nobody has reaped counts, and so
    /// does one this process may not signal).
    fn is_alive(&self) -> bool {
        match self.signal(0) {
            Ok(()) => true,
            Err(error) => error.raw_os_error() != Some(libc::ESRCH),
        }
    }

    /// Waits up to `limit` for the group to empty, reaping the child itself; true if it did.
    async fn emptied(&mut self, child: &mut tokio::process::Child, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let _ = child.try_wait();
            if !self.is_alive() {
                self.emptied = true;
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// SIGTERM to the group, then SIGKILL to whatever is left after `grace`; returns once
    /// the group is empty (or `KILL_WAIT` after the SIGKILL).
    pub(crate) async fn stop(&mut self, child: &mut tokio::process::Child, grace: Duration) {
        let _ = self.signal(libc::SIGTERM);
        if !self.emptied(child, grace).await {
            self.finish(child).await;
        }
    }

    /// The child is done (or must be): SIGKILL to whatever is left in its group, and wait
    /// for the group to empty (at most `KILL_WAIT`).
    pub(crate) async fn finish(&mut self, child: &mut tokio::process::Child) {
        let _ = self.signal(libc::SIGKILL);
        if !self.emptied(child, KILL_WAIT).await {
            tracing::warn!(
                group = self.id,
                "a killed process group has not emptied (zombies nobody reaps?)"
            );
        }
    }
}

impl Drop for ProcessGroup {
    /// Killed outright unless it was seen empty.
    fn drop(&mut self) {
        let _ = self.signal(libc::SIGKILL);
    }
}
