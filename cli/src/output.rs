//! Presentation: tables for people, JSON for machines, one line per error.

use std::io::{ErrorKind, Write};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use comfy_table::{Table, presets};
use serde::Serialize;
use tinybox_core::model::resources::format_size;
use tinybox_core::model::{BoxInfo, Instance, Lifecycle, Resources, WorkspaceSource};
use tinybox_core::request::CreatedDocument;

/// What has become of stdout: still taking output, closed by its reader,
/// or failing otherwise.
static STDOUT: AtomicU8 = AtomicU8::new(OPEN);
const OPEN: u8 = 0;
const CLOSED: u8 = 1;
const FAILED: u8 = 2;

/// Writes to stdout; every line the CLI prints goes through here. A reader
/// that went away (`tinybox ls | head -1`) ends the output, not the command:
/// later writes are dropped and the exit status stays the command's own, as
/// it does for a command whose output nobody reads. Any other failure is
/// said once on stderr, and turns a success into exit status 1 (`exit_code`).
///
/// Not SIGPIPE's default action instead: the CLI also writes to its
/// drivers' pipes, and a driver that dies must be an error core reports,
/// never a signal that kills the CLI mid-operation.
pub fn write_out(bytes: &[u8]) {
    if STDOUT.load(Ordering::SeqCst) != OPEN {
        return;
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::BrokenPipe => STDOUT.store(CLOSED, Ordering::SeqCst),
        Err(e) => {
            STDOUT.store(FAILED, Ordering::SeqCst);
            eprintln!("tinybox: cannot write to stdout: {e}; the output is incomplete");
        }
    }
}

/// `println!` through [`write_out`].
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_out(format!("{}\n", format_args!($($arg)*)).as_bytes())
    };
}
pub(crate) use outln;

/// The exit status for a command that ended with `code`: 1 instead of 0 when
/// its output could not be written (other than to a reader that left).
pub fn exit_code(code: u8) -> u8 {
    if code == 0 && STDOUT.load(Ordering::SeqCst) == FAILED { 1 } else { code }
}

/// Prints `value` as pretty JSON on stdout.
pub fn json<T: Serialize>(value: &T) {
    outln!("{}", serde_json::to_string_pretty(value).expect("serializable"));
}

/// A borderless, left-aligned table with a header row.
pub fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING);
    t.set_header(header.iter().map(|h| h.to_string()));
    t
}

/// Prints a table, trimming each line's trailing padding.
pub fn print_table(t: &Table) {
    for line in t.to_string().lines() {
        outln!("{}", line.trim_end().strip_prefix(' ').unwrap_or(line.trim_end()));
    }
}

pub fn timestamp(secs: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs)).to_string()
}

/// `1h 2m`, coarse, for ages and remaining lifetimes.
pub fn span(secs: u64) -> String {
    let rounded = if secs >= 3600 { secs / 60 * 60 } else { secs };
    humantime::format_duration(Duration::from_secs(rounded)).to_string()
}

pub fn limits(r: &Resources) -> String {
    let mut parts = Vec::new();
    if let Some(c) = r.cpus {
        parts.push(format!("cpu {c}"));
    }
    if let Some(m) = r.memory_bytes {
        parts.push(format!("memory {}", format_size(m)));
    }
    if let Some(p) = r.pids {
        parts.push(format!("pids {p}"));
    }
    if let Some(d) = r.disk_bytes {
        parts.push(format!("disk {}", format_size(d)));
    }
    if parts.is_empty() { "none in force".into() } else { parts.join(", ") }
}

pub fn lifecycle(info: &BoxInfo, now: u64) -> String {
    match info.spec.lifecycle {
        Lifecycle::Ephemeral { ttl_secs } => match info.expires_at() {
            Some(at) if at <= now => format!("ephemeral, ttl {}, expired (reap removes it)", span(ttl_secs)),
            Some(at) => format!("ephemeral, ttl {}, expires in {}", span(ttl_secs), span(at - now)),
            None => format!("ephemeral, ttl {}, creation time unknown: never expires", span(ttl_secs)),
        },
        Lifecycle::Persistent { autosnapshot_secs } => {
            format!("persistent, autosnapshot every {}", span(autosnapshot_secs))
        }
    }
}

pub fn expires(info: &BoxInfo, now: u64) -> String {
    match info.expires_at() {
        Some(at) if at <= now => "expired".into(),
        Some(at) => format!("in {}", span(at - now)),
        None => "never".into(),
    }
}

pub fn source(s: &Option<WorkspaceSource>) -> String {
    match s {
        None => "none".into(),
        Some(WorkspaceSource::OciImage { reference }) => format!("image {reference}"),
        Some(WorkspaceSource::LocalDir { path }) => format!("directory {}", path.display()),
        Some(WorkspaceSource::Snapshot { id }) => format!("snapshot {id}"),
        Some(WorkspaceSource::GitRepo { url, .. }) => format!("git {url}"),
    }
}

/// What `create` and `fork` print: the record with --json; otherwise the
/// summary on stderr and the bare identifier on stdout, for scripts.
/// A new box: with `--json` core's create document (the box, and its
/// warnings when there are any), else its id with a summary on stderr.
pub fn print_created(json_output: bool, created: &CreatedDocument<'_>) {
    if json_output {
        json(created);
    } else {
        eprintln!("tinybox: {}", created_summary(created.info));
        outln!("{}", created.info.id);
    }
}

/// One line a person reads after `create`.
pub fn created_summary(info: &BoxInfo) -> String {
    let Some(ws) = &info.workspace else { return format!("created {}", info.id) };
    format!("created {} on {}: {}", info.id, ws.placement, confinement(ws))
}

/// Isolation, network and limits in one phrase.
pub fn confinement(i: &Instance) -> String {
    let warn = if i.isolation < tinybox_core::model::IsolationLevel::UNTRUSTED_FLOOR {
        " (not for untrusted code)"
    } else {
        ""
    };
    format!("isolation {}{warn}; network {}; limits {}", i.isolation, i.network, limits(&i.limits))
}
