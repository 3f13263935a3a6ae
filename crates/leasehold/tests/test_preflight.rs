//! The README's test command on a machine that lacks what the suite needs (issue 28):
//! `scripts/preflight`, its first step, names everything missing in one line and stops at
//! once, rather than after minutes of building; on this machine, which has it all, it passes
//! silently.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn preflight() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/preflight")
}

fn which(program: &str) -> PathBuf {
    let out = Command::new("bash")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .expect("bash runs");
    PathBuf::from(String::from_utf8(out.stdout).expect("a path").trim())
}

#[test]
fn a_machine_without_the_tools_is_told_what_to_install_in_one_line_at_once() {
    // A PATH with a shell and nothing else the suite uses.
    let bare = tempfile::tempdir().unwrap();
    for program in ["bash", "id"] {
        std::os::unix::fs::symlink(which(program), bare.path().join(program)).unwrap();
    }
    let started = Instant::now();
    let out = Command::new(bare.path().join("bash"))
        .arg(preflight())
        .env_clear()
        .env("PATH", bare.path())
        .env("LEASEHOLD_NO_INSTALL", "1")
        .output()
        .expect("runs");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    for named in [
        "needs cargo python3 psql mkfs.ext4 node npm chromium",
        "apt-get install python3 postgresql-client e2fsprogs nodejs npm chromium",
        "https://rustup.rs",
    ] {
        assert!(stderr.contains(named), "{named:?} not in {stderr}");
    }
}

#[test]
fn a_machine_with_the_tools_passes_silently() {
    let out = Command::new("bash")
        .arg(preflight())
        .env("LEASEHOLD_NO_INSTALL", "1")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(out.stdout.is_empty() && stderr.is_empty(), "{stderr}");
}
