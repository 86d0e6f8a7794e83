//! What `tinybox_manifest` returns: who this module is, which ABI it
//! speaks, and — stated honestly, since a host enforces none of it — what
//! it does inside the host process that loads it.

use serde_json::{Value, json};

/// Every method of ABI v1, in the order the release contract lists them.
pub const METHODS: &[&str] = &[
    "manifest",
    "create",
    "exec",
    "exec.start",
    "exec.read",
    "exec.wait",
    "exec.cancel",
    "exec.resize",
    "fs.read",
    "fs.write",
    "fs.list",
    "inspect",
    "ls",
    "rm",
    "snapshot",
    "snapshot.ls",
    "prune",
    "fork",
    "stop",
    "resume",
    "autosnapshot",
    "template.save",
    "template.ls",
    "template.rm",
    "reap",
    "drivers",
    "host.add",
    "host.ls",
    "host.rm",
    "close",
];

pub fn manifest() -> Value {
    json!({
        "name": "tinybox",
        "version": env!("CARGO_PKG_VERSION"),
        "abi_version": crate::ABI_VERSION,
        "description": "Creates and drives boxes: isolated places where untrusted code runs. The code never runs in \
                        the host process; it runs out of process, in a box, confined by the sandbox the box was \
                        created with (passthrough confines nothing and says so).",
        "capabilities": [
            {
                "name": "box.manage",
                "detail": "creates, inspects, snapshots, forks, stops, resumes and removes boxes, and runs commands \
                           in them (the methods listed below)"
            },
            {
                "name": "process.spawn",
                "detail": "starts tinybox-driver-<name> executables found next to this library, next to the host \
                           executable, in TINYBOX_DRIVER_PATH, then in PATH; they run as children of the host \
                           process with its privileges and environment, and a sandbox driver starts the boxed \
                           commands"
            },
            {
                "name": "fs.read_write",
                "detail": "reads and writes the store directory (default $TINYBOX_HOME, else \
                           $XDG_STATE_HOME/tinybox, else ~/.local/state/tinybox) and a private runtime directory \
                           for stdio sockets and stdin files; reads /proc/self/maps to find its own directory"
            },
            {
                "name": "ipc.unix_socket",
                "detail": "listens on private Unix sockets in the runtime directory to hand a command's stdin, \
                           stdout and stderr to the driver that runs it"
            },
            {
                "name": "threads",
                "detail": "runs a multi-threaded tokio runtime and one reader thread per captured stream inside \
                           the host process"
            },
            {
                "name": "signals",
                "detail": "installs process-wide handlers for SIGCHLD (reaping its driver processes) and SIGPIPE \
                           (so a dead driver is an error, not the end of the host); it never sends a signal to \
                           the host"
            }
        ],
        "not_claimed": [
            "running untrusted code in the host process: no method does",
            "isolation beyond what the chosen sandbox declares: `inspect` shows what is in force",
            "network access of its own: drivers may use the network (a docker daemon, ssh)"
        ],
        "untrusted_code": "out_of_process",
        "methods": METHODS,
        "error_codes": crate::errors::Code::ALL.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
        "symbols": crate::ffi::SYMBOLS,
    })
}
