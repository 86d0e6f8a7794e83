//! `tinybox`: create boxes, run code in them, and see what confines it.
//!
//! Argument parsing and presentation only: every verb is one file in
//! `commands/` calling one `tinybox_core::Tinybox` operation. Policy — what
//! is allowed, what is in force — is core's alone.

mod args;
mod commands;
mod output;
mod progress;
mod stdio;
mod terminal;
mod verifier;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// Isolated places to run code you do not trust, with the isolation stated.
#[derive(Debug, Parser)]
#[command(name = "tinybox", version, about, propagate_version = true)]
struct Cli {
    /// The store directory (boxes and templates). Default: $TINYBOX_HOME, else $XDG_STATE_HOME/tinybox.
    #[arg(long, global = true, value_name = "DIR")]
    store: Option<PathBuf>,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a box and print its identifier.
    Create(commands::create::CreateCmd),
    /// Copy files and directories into or out of a box: `cp SRC BOX:DST`, `cp BOX:SRC DST` (`-` is a tar stream).
    Cp(commands::cp::CpCmd),
    /// Serve the Model Context Protocol on stdio: tools for an agent to make and use boxes.
    Mcp(commands::mcp::McpCmd),
    /// Serve the HTTP API and the E2B protocol on a loopback port (`serve env`: the settings clients need).
    Serve(commands::serve::ServeCmd),
    /// Run a command in a box; exits with the command's own status.
    Exec(commands::exec::ExecCmd),
    /// Create a box, run one command in it, remove it.
    Run(commands::run::RunCmd),
    /// List boxes (`--all`: with those waiting in warm pools).
    Ls(commands::ls::LsCmd),
    /// Show a box: placement, isolation, limits and network in force, state.
    Inspect(commands::inspect::InspectCmd),
    /// Show a box's logs: `--network`, each connection its egress proxy allowed or refused.
    Logs(commands::logs::LogsCmd),
    /// Remove boxes.
    Rm(commands::rm::RmCmd),
    /// Remove every ephemeral box whose ttl has passed.
    Reap,
    /// Snapshot a box's workspace (`snapshot BOX`), or list the store's snapshots (`snapshot ls`).
    Snapshot(commands::snapshot::SnapshotCmd),
    /// Remove the snapshots nothing keeps: no box was made from one, no persistent box resumes from it, no template names it.
    Prune(commands::prune::PruneCmd),
    /// Create a new box from a fresh snapshot of another.
    Fork(commands::fork::ForkCmd),
    /// Snapshot a persistent box and remove its instances; `resume` brings it back.
    Stop(commands::stop::StopCmd),
    /// Bring a stopped box back from its newest snapshot, under the same identifier.
    Resume(commands::resume::ResumeCmd),
    /// Snapshot every persistent box whose autosnapshot is due, and report on each (for cron).
    Autosnapshot,
    /// Named snapshots to start boxes from.
    #[command(subcommand)]
    Template(commands::template::TemplateCmd),
    /// Named hosts: where boxes can be placed (`local`, or machines reached with ssh).
    #[command(subcommand)]
    Host(commands::host::HostCmd),
    /// Send a directory to a remote box's workspace (skipped when nothing changed).
    Sync(commands::sync::SyncCmd),
    /// List installed drivers (`drivers ls`, the default) or check one's declared claims live (`drivers verify NAME`).
    Drivers(commands::drivers::DriversCmd),
    /// Make a box's port reachable on this machine's 127.0.0.1 (held until Ctrl-C, or by the daemon with --detach).
    PortForward(commands::forward::PortForwardCmd),
    /// List the port forwards held now.
    Ports(commands::forward::PortsCmd),
    /// OCI images: pull from a registry, import an archive, list, inspect, remove, prune.
    #[command(subcommand)]
    Image(commands::image::ImageCmd),
    /// Warm pools: boxes made ahead, handed out at once by `create --pool NAME`.
    #[command(subcommand)]
    Pool(commands::pool::PoolCmd),
    /// The optional supervisor: reaps expired boxes, takes due snapshots, keeps pools full.
    #[command(subcommand)]
    Daemon(commands::daemon::DaemonCmd),
    /// Print a shell completion script.
    Completions(commands::completions::CompletionsCmd),
}

fn main() -> ExitCode {
    // Nothing this process inherited reaches a driver, and through it a box.
    tinybox_sdk::process::seal_inherited_fds();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    if let Command::Completions(c) = &cli.command {
        c.print(&mut Cli::command());
        return ExitCode::from(output::exit_code(0));
    }
    // Workers get the main thread's 8 MiB of stack, not tokio's 2: the
    // conformance kit, run on first use, can run on one (an MCP tool call
    // is a task of its own) and nests deep enough in a debug build to
    // overflow 2 MiB (seen: the MCP server's first docker box).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(8 << 20)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = runtime.block_on(commands::dispatch(cli.store, cli.json, cli.command));
    ExitCode::from(output::exit_code(code))
}

/// Help and version print as clap renders them; a usage error is one line
/// naming the value and the rule, and exit status 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    // The first paragraph holds the message (and, for missing arguments, their names).
    let rendered = e.render().to_string();
    let paragraph: Vec<&str> = rendered.lines().take_while(|l| !l.trim().is_empty()).map(str::trim).collect();
    let message = paragraph.join(" ");
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    eprintln!("tinybox: {message} (see `tinybox --help`)");
    ExitCode::from(2)
}
