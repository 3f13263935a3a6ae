//! The README's test command on a machine that lacks what the suite needs (issue 28):
//! `scripts/preflight`, its first step, names everything missing in one line and stops at
//! once, rather than after minutes of building; with everything there it passes silently.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn which(program: &str) -> PathBuf {
    let out = Command::new("bash")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .expect("bash runs");
    PathBuf::from(String::from_utf8(out.stdout).expect("a path").trim())
}

/// A directory for PATH holding a shell, `id`, and a stub that succeeds for each of `stubs`.
fn path_with(stubs: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for program in ["bash", "id"] {
        symlink(which(program), dir.path().join(program)).unwrap();
    }
    for stub in stubs {
        let file = dir.path().join(stub);
        std::fs::write(&file, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

fn preflight(path: &Path, args: &[&str]) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/preflight");
    let started = Instant::now();
    let out = Command::new(path.join("bash"))
        .arg(script)
        .args(args)
        .env_clear()
        .env("PATH", path)
        .env("LEASEHOLD_NO_INSTALL", "1")
        .output()
        .expect("runs");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "it stops at once"
    );
    out
}

/// Exit 1 with one line on stderr, which it answers.
fn refusal(out: Output) -> String {
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn a_machine_without_the_tools_is_told_what_to_install_in_one_line_at_once() {
    let bare = path_with(&[]);
    let line = refusal(preflight(bare.path(), &[]));
    for named in [
        "scripts/test needs cargo python3 ",
        " node npm chromium promtool psql, which this machine lacks",
        "; as root: apt-get install python3 ",
        " nodejs npm chromium prometheus postgresql-client python3-venv; cargo: https://rustup.rs",
    ] {
        assert!(line.contains(named), "{named:?} not in {line}");
    }
}

#[test]
fn without_services_psql_is_not_asked_for() {
    let bare = path_with(&["cargo", "python3", "mkfs.ext4", "node", "npm", "promtool"]);
    let line = refusal(preflight(bare.path(), &["--no-services"]));
    assert_eq!(
        line.trim_end(),
        "scripts/test needs chromium, which this machine lacks; as root: apt-get install chromium"
    );
}

#[test]
fn a_machine_with_the_tools_passes_silently() {
    let all = [
        "cargo",
        "python3",
        "mkfs.ext4",
        "node",
        "npm",
        "chromium",
        "promtool",
        "psql",
    ];
    let out = preflight(path_with(&all).path(), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(out.stdout.is_empty() && stderr.is_empty(), "{stderr}");
}
