//! Failover that loses nothing (issue 26): a PostgreSQL primary and a synchronous streaming
//! standby built on this machine (Debian's `pg_createcluster`, `pg_basebackup`), two real
//! `leasehold serve` processes on a multi-host URL (`target_session_attrs=read-write`) under
//! load, the primary killed with SIGKILL (every one of its processes, as a crashed machine)
//! and the standby promoted. The checker (`common/checker.rs`) asserts nothing acknowledged is
//! lost, no acknowledged delete comes back, no message is handed out twice under a live lease,
//! and every request the failover met was refused with a 5xx; service comes back within a
//! bound. Needs root (the clusters run as `postgres`), as CI has; removes its clusters.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::checker::{under_load, ONE_AT_A_TIME};
use common::free_port;

/// The newest PostgreSQL version installed (`/etc/postgresql/VERSION`).
fn version() -> String {
    std::fs::read_dir("/etc/postgresql")
        .expect("PostgreSQL's clusters are under /etc/postgresql")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .max()
        .expect("a PostgreSQL version")
}

fn run(program: &str, args: &[&str]) {
    let status = Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(status.success(), "{program} {args:?} failed");
}

/// A PostgreSQL cluster of the test's own on a free port, dropped at the end.
struct Cluster {
    version: String,
    name: String,
    port: u16,
}

impl Cluster {
    /// A new cluster, not started, that trusts local connections (replication too).
    fn create(role: &str) -> Cluster {
        let cluster = Cluster {
            version: version(),
            name: format!("lh_{role}_{}", std::process::id()),
            port: free_port(),
        };
        let port = cluster.port.to_string();
        run(
            "pg_createcluster",
            &[&cluster.version, &cluster.name, "-p", &port],
        );
        let hba = "local all all trust\nlocal replication all trust\n\
                   host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n";
        std::fs::write(cluster.config_dir().join("pg_hba.conf"), hba).unwrap();
        cluster.configure("listen_addresses = '127.0.0.1'\n");
        cluster
    }

    fn config_dir(&self) -> PathBuf {
        PathBuf::from(format!("/etc/postgresql/{}/{}", self.version, self.name))
    }

    fn data_dir(&self) -> PathBuf {
        PathBuf::from(format!(
            "/var/lib/postgresql/{}/{}",
            self.version, self.name
        ))
    }

    fn configure(&self, lines: &str) {
        use std::io::Write;
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(self.config_dir().join("postgresql.conf"))
            .unwrap();
        conf.write_all(lines.as_bytes()).unwrap();
    }

    fn ctl(&self, action: &str) {
        run(
            "pg_ctlcluster",
            &[
                "--skip-systemctl-redirect",
                &self.version,
                &self.name,
                action,
            ],
        );
    }

    /// Makes this (created, not started) cluster a streaming standby of `primary`.
    fn follow(&self, primary: &Cluster) {
        // Emptied, not removed: the directory above it is not the `postgres` user's to write.
        let data = self.data_dir();
        for entry in std::fs::read_dir(&data).unwrap() {
            let path = entry.unwrap().path();
            match path.is_dir() {
                true => std::fs::remove_dir_all(&path).unwrap(),
                false => std::fs::remove_file(&path).unwrap(),
            }
        }
        run(
            "runuser",
            &[
                "-u",
                "postgres",
                "--",
                "pg_basebackup",
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
                "-D",
                &data.display().to_string(),
                "-R",
                "-X",
                "stream",
                "--checkpoint=fast",
                "-d",
                "application_name=standby",
            ],
        );
    }

    /// Kills every process of the cluster at once, as a crashed machine would.
    fn crash(&self) {
        let pattern = format!("{}/{}", self.version, self.name);
        let _ = Command::new("pkill").args(["-9", "-f", &pattern]).status();
    }

    fn query(&self, sql: &str) -> String {
        let out = Command::new("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-qAtc",
                sql,
            ])
            .output()
            .expect("psql runs");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.crash();
        let _ = Command::new("pg_dropcluster")
            .args([&self.version, &self.name])
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_primary_killed_under_load_fails_over_to_its_standby_losing_nothing() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let primary = Cluster::create("primary");
    // Every commit waits for the standby to have it on disk.
    primary.configure("synchronous_standby_names = 'standby'\nsynchronous_commit = on\n");
    primary.ctl("start");
    let standby = Cluster::create("standby");
    standby.follow(&primary);
    standby.ctl("start");
    let deadline = Instant::now() + Duration::from_secs(30);
    while primary.query("SELECT sync_state FROM pg_stat_replication") != "sync" {
        assert!(
            Instant::now() < deadline,
            "the standby never became synchronous"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port, standby.port
    );
    let promoted = std::sync::Arc::new(std::sync::Mutex::new(None));
    let at = promoted.clone();
    let standby_name = (standby.version.clone(), standby.name.clone());
    let primary_pattern = format!("{}/{}", primary.version, primary.name);
    let ledger = under_load(&url, move |a| {
        let killed = Instant::now();
        let _ = Command::new("pkill")
            .args(["-9", "-f", &primary_pattern])
            .status();
        run(
            "pg_ctlcluster",
            &[
                "--skip-systemctl-redirect",
                &standby_name.0,
                &standby_name.1,
                "promote",
            ],
        );
        *at.lock().unwrap() = Some((killed, Instant::now()));
        Some(a)
    })
    .await;
    let (killed, promoted) = promoted.lock().unwrap().expect("the failover ran");
    let (first_refusal, last_refusal) = ledger.refusing.expect("requests met the failover");
    let back = last_refusal.saturating_duration_since(promoted);
    eprintln!(
        "primary killed; standby promoted {:.2} s later; requests refused for {:.2} s, the last \
         {:.2} s after the promotion; {} sends acknowledged, none lost, no delete back, none \
         handed out twice under a live lease; refused: {:?}",
        promoted.duration_since(killed).as_secs_f64(),
        last_refusal.duration_since(first_refusal).as_secs_f64(),
        back.as_secs_f64(),
        ledger.sent.len(),
        ledger.refusals
    );
    ledger.assert_refused_only_with("5xx");
    assert!(
        back < Duration::from_secs(5),
        "service came back {back:?} after the promotion"
    );
    drop(standby);
    drop(primary);
}
