//! `leasehold completions SHELL`: the command line's completion script for bash, zsh or fish,
//! made by clap from the same definitions the parser uses, so it never falls behind a flag.

use clap::CommandFactory;

#[derive(clap::Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: Shell,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Shell {
    Bash,
    Zsh,
    Fish,
}

pub(crate) fn print(args: CompletionsArgs) -> anyhow::Result<()> {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    clap_complete::generate(shell, &mut offered(), "leasehold", &mut std::io::stdout());
    Ok(())
}

/// The command line as offered to a person: clap's generators also complete hidden
/// subcommands (`guard`, run only by `work`), so they are left out here.
fn offered() -> clap::Command {
    let full = crate::Cli::command();
    let visible: Vec<clap::Command> = (full.get_subcommands())
        .filter(|sub| !sub.is_hide_set())
        .cloned()
        .collect();
    let mut offered = clap::Command::new("leasehold")
        .args(full.get_arguments().cloned())
        .subcommands(visible);
    if let Some(version) = full.get_version() {
        offered = offered.version(version.to_string());
    }
    offered
}
