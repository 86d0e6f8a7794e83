//! `tinybox-egress`: one box's egress proxy (`serve`), and the relay that
//! runs inside the box (`relay`). Core starts `serve`, detached, for each
//! allowlisted box; a sandbox driver wraps the box's command in `relay`.
//!
//! Exit statuses: `serve` 1 when it cannot start; `relay` the command's own
//! (dying of the command's signal too), 125 when it cannot start it; 2 for
//! a usage error.

mod args;

use std::io::Write;
use std::process::ExitCode;

use args::Invocation;

fn main() -> ExitCode {
    let invocation = match args::parse(std::env::args_os().skip(1).collect()) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("tinybox-egress: {e}\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tinybox-egress: cannot start its runtime: {e}");
            return ExitCode::from(125);
        }
    };
    match invocation {
        Invocation::Version => {
            println!("tinybox-egress {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Invocation::Serve { dir, resolver } => {
            let ready = || {
                let mut out = std::io::stdout();
                let _ = writeln!(out, "{}", tinybox_egress::layout::READY).and_then(|()| out.flush());
            };
            match runtime.block_on(tinybox_egress::serve_dir::serve_dir(&dir, &resolver, ready)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tinybox-egress: serving {}: {e}", dir.display());
                    ExitCode::from(1)
                }
            }
        }
        Invocation::Relay(relay) => match runtime.block_on(relay.run()) {
            Ok(status) => exit_as(status),
            Err(e) => {
                eprintln!("tinybox-egress relay: {e}");
                ExitCode::from(125)
            }
        },
    }
}

/// Ends as the command did: its exit code, or its signal (raised on
/// ourselves, so whoever waits for the relay sees the same death), else
/// 128 + the signal.
fn exit_as(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let signal = status.signal().unwrap_or(0);
    if let Some(sig) = rustix::process::Signal::from_named_raw(signal) {
        let _ = rustix::process::kill_process(rustix::process::getpid(), sig);
    }
    ExitCode::from(u8::try_from(128 + signal).unwrap_or(255))
}
