//! `leasehold completions SHELL` (issue 28): a completion script that names the commands and
//! their flags, for each shell offered; an unknown shell is a usage error.

use std::process::Command;

fn leasehold(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn each_shell_gets_a_script_naming_the_commands_and_their_flags() {
    // What each shell's script is recognised by, and a subcommand's flag it must complete.
    for (shell, marker) in [
        ("bash", "complete -F _leasehold"),
        ("zsh", "#compdef leasehold"),
        ("fish", "complete -c leasehold"),
    ] {
        let (code, out, err) = leasehold(&["completions", shell]);
        assert_eq!(code, Some(0), "{shell}: {err}");
        assert!(out.contains(marker), "{shell}: no {marker:?}");
        // Flags as each shell writes them: `--data-dir`, or fish's `-l data-dir`.
        for word in ["serve", "work", "visibility-timeout", "data-dir"] {
            assert!(out.contains(word), "{shell}: {word} not completed");
        }
        // The hidden guardian is not offered.
        assert!(
            !out.contains("guard "),
            "{shell} offers the hidden guard command"
        );
    }
}

#[test]
fn an_unknown_shell_is_a_usage_error_naming_the_choices() {
    let (code, out, err) = leasehold(&["completions", "powershell"]);
    assert_eq!(code, Some(2));
    assert!(out.is_empty());
    assert!(err.contains("[possible values: bash, zsh, fish]"), "{err}");
}
