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
        // Rendered first: clap_complete panics on a write error, and stdout may
        // be a pipe its reader has closed.
        let mut script = Vec::new();
        clap_complete::generate(self.shell, cmd, "tinybox", &mut script);
        crate::output::write_out(&script);
    }
}
