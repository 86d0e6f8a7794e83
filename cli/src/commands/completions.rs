//! `tinybox completions SHELL`: prints the shell completion script clap generates.

use clap::Args;
use clap_complete::Shell;

#[derive(Debug, Args)]
pub struct CompletionsCmd {
    /// bash, zsh, fish, elvish or powershell.
    pub shell: Shell,
}

impl CompletionsCmd {
    pub fn print(&self, cmd: &mut clap::Command) {
        clap_complete::generate(self.shell, cmd, "tinybox", &mut std::io::stdout());
    }
}
