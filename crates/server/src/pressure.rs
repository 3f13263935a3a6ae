//! The memory budget: the server knows its memory limit and measures its resident memory ten
//! times a second; near the limit, sends are refused (`RequestThrottled`, which the SDKs back
//! off from) while receives, deletes and visibility changes go on, so consumers drain the
//! backlog instead of the kernel's OOM killer ending the server. (The embedded store's disk
//! reserve refuses sends the same way, in the backend: `Backend::refusing_sends`.)

use std::sync::atomic::{AtomicU64, Ordering};

use leasehold_backend::SendGate;

/// Sends are refused once resident memory reaches this share of the limit...
const REFUSE_AT: f64 = 0.80;
/// ...and accepted again once it is back under this share, so the state does not flap.
const RESUME_AT: f64 = 0.70;
/// Without a cgroup limit or `--memory-limit`, the budget is this share of the machine's RAM
/// (RabbitMQ's default high watermark is the same share).
const SHARE_OF_RAM: f64 = 0.6;

/// What one received message may hold at its peak: a body of up to 1 MiB in several copies
/// at once (the store's, the decoded, the answer's own, the rendered and escaped bytes).
const MESSAGE_PEAK_BYTES: u64 = 5 << 20;
/// The share of the memory limit receives may hold together.
const RECEIVES_SHARE: f64 = 0.35;
/// The most messages one receive asks for: one receive always fits.
const MAX_RECEIVE: usize = 10;

/// How many messages receives may take and render at once, each receive counting the
/// messages it asks for: receives are what drains a backlog, so they are never refused for
/// memory, but without a bound a crowd of them over big messages holds far more than the
/// limit (48 receives of ten 1 MiB messages took a server in a 256 MiB cgroup past it). A
/// receive's attempt waits for its share; one waiting for messages holds none. At least one
/// receive's worth; no bound without a limit.
pub fn messages_at_once(limit: u64) -> usize {
    if limit == 0 {
        return usize::MAX >> 4;
    }
    let share = (limit as f64 * RECEIVES_SHARE) as u64;
    usize::try_from(share / MESSAGE_PEAK_BYTES)
        .unwrap_or(usize::MAX >> 4)
        .max(MAX_RECEIVE)
}

/// Where a memory limit came from, for the log line at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitSource {
    Flag,
    Cgroup,
    ShareOfRam,
    Unknown,
}

/// The server's memory limit, its resident memory as last measured, and whether sends are
/// refused because of it.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    resident: AtomicU64,
    gate: SendGate,
    /// Sends refused since start, for `/metrics`.
    refused: AtomicU64,
}

impl MemoryBudget {
    /// A budget of `limit` bytes; 0 measures but never refuses.
    pub fn new(limit: u64) -> MemoryBudget {
        MemoryBudget {
            limit,
            resident: AtomicU64::new(0),
            gate: SendGate::new("memory"),
            refused: AtomicU64::new(0),
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn resident(&self) -> u64 {
        self.resident.load(Ordering::Relaxed)
    }

    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Measures resident memory now and decides; logs only when the decision changes.
    pub fn sample(&self) {
        if let Some(resident) = resident_bytes() {
            self.record(resident);
        }
    }

    /// Takes a measurement of resident memory.
    pub fn record(&self, resident: u64) {
        self.resident.store(resident, Ordering::Relaxed);
        if self.limit == 0 {
            return;
        }
        let share = resident as f64 / self.limit as f64;
        let bound = if self.gate.is_refusing() {
            RESUME_AT
        } else {
            REFUSE_AT
        };
        self.gate.decide(share >= bound, || {
            format!("{} MiB of {} MiB", resident >> 20, self.limit >> 20)
        });
    }

    /// Why sends are refused now, if they are; counts the refusal.
    pub fn refusal(&self) -> Option<String> {
        let why = self.reason()?;
        self.refused.fetch_add(1, Ordering::Relaxed);
        Some(why)
    }

    /// Why sends are refused now, if they are, without counting: for `/ready`.
    pub fn reason(&self) -> Option<String> {
        self.gate.is_refusing().then(|| {
            format!(
                "The server's memory ({} MiB) is near its limit ({} MiB): sends are refused until consumers drain the backlog.",
                self.resident() >> 20,
                self.limit >> 20
            )
        })
    }
}

/// The memory limit to keep under: `flag` when given, else the cgroup's limit, else a share of
/// the machine's RAM.
pub fn memory_limit(flag: Option<u64>) -> (u64, LimitSource) {
    if let Some(limit) = flag {
        return (limit, LimitSource::Flag);
    }
    let ram = total_ram();
    match (cgroup_limit(), ram) {
        (Some(cgroup), Some(ram)) if cgroup < ram => (cgroup, LimitSource::Cgroup),
        (Some(cgroup), None) => (cgroup, LimitSource::Cgroup),
        (_, Some(ram)) => ((ram as f64 * SHARE_OF_RAM) as u64, LimitSource::ShareOfRam),
        (None, None) => (0, LimitSource::Unknown),
    }
}

/// The memory limit of the cgroup this process runs in: `memory.max` (v2) or
/// `memory.limit_in_bytes` (v1); None when there is none.
fn cgroup_limit() -> Option<u64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let file = if controllers.is_empty() {
            format!("/sys/fs/cgroup{path}/memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
        } else {
            continue;
        };
        let limit = std::fs::read_to_string(&file)
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok());
        // v1 says "no limit" with a number near 2^63; v2 with "max", which does not parse.
        if let Some(limit) = limit.filter(|l| *l < 1 << 62) {
            return Some(limit);
        }
    }
    None
}

fn total_ram() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// This process's resident memory.
pub fn resident_bytes() -> Option<u64> {
    resident_bytes_of("self")
}

/// The resident memory of process `pid` (`VmRSS` in `/proc/PID/status`).
pub fn resident_bytes_of(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A size on the command line: bytes, or a number with K, M, G or T (KiB, MiB, GiB, TiB; `B`
/// and `iB` may follow), e.g. `256MiB`, `1G`, `1073741824`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let digits = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("expected a size such as 512MiB or 2GiB, not {text:?}"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(format!("unknown size unit in {text:?}: use K, M, G or T")),
    };
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_at_once_follow_the_memory_limit() {
        assert_eq!(messages_at_once(64 << 20), 10);
        assert_eq!(messages_at_once(256 << 20), 17);
        assert_eq!(messages_at_once(1 << 30), 71);
        assert!(messages_at_once(0) > 1_000_000);
    }

    #[test]
    fn sizes_read_with_or_without_units() {
        assert_eq!(parse_size("1073741824"), Ok(1 << 30));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("64 mb"), Ok(64 << 20));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5 parsecs").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn sends_stop_near_the_limit_and_resume_well_under_it() {
        let budget = MemoryBudget::new(1000);
        budget.record(790);
        assert_eq!(budget.reason(), None);
        budget.record(800);
        assert!(budget.refusal().is_some());
        budget.record(750);
        assert!(budget.reason().is_some(), "not until it is back under 70%");
        budget.record(699);
        assert_eq!(budget.reason(), None);
        assert_eq!(budget.refused(), 1);
    }

    #[test]
    fn a_budget_of_nothing_never_refuses() {
        let budget = MemoryBudget::new(0);
        budget.record(u64::MAX);
        assert_eq!(budget.reason(), None);
    }

    #[test]
    fn this_process_knows_its_resident_memory_and_some_limit() {
        assert!(resident_bytes().is_some_and(|r| r > 1 << 20));
        assert!(memory_limit(None).0 > 0);
        assert_eq!(memory_limit(Some(5)), (5, LimitSource::Flag));
    }
}
