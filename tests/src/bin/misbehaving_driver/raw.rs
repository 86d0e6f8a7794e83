//! Modes that never complete a proper handshake. They speak line-delimited
//! JSON-RPC by hand (or not at all), with blocking I/O: there is nothing to
//! serve concurrently.

use std::io::{BufRead, Write};

use tinybox_sdk::protocol::{HandshakeResult, Health, Role, method};

use crate::Invocation;
use crate::scripted::honest_capabilities;

/// Writes one JSON-RPC message as a line on stdout.
fn send(message: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{message}");
    let _ = out.flush();
}

/// Reads stdin until core closes it, then exits quietly.
fn drain_stdin_and_exit() -> ! {
    let mut sink = std::io::sink();
    let _ = std::io::copy(&mut std::io::stdin().lock(), &mut sink);
    std::process::exit(0)
}

/// Reads one line (core's handshake request) and returns its id.
fn read_request_id() -> serde_json::Value {
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    serde_json::from_str::<serde_json::Value>(&line)
        .ok()
        .and_then(|v| v.get("id").cloned())
        .unwrap_or(serde_json::Value::Null)
}

/// `exit-early`: says why on stderr and exits 3 before reading anything.
pub fn exit_early() -> ! {
    eprintln!("exiting before the handshake");
    std::process::exit(3)
}

/// `wrong-version`: a well-formed handshake answer for protocol 99.0.0.
pub fn wrong_version(me: &Invocation) -> ! {
    let id = read_request_id();
    let hello = HandshakeResult {
        name: me.name.clone(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        protocol: tinybox_sdk::protocol::protocol_version(),
        role: Role::Sandbox,
        health: Health::ok(),
        capabilities: Some(honest_capabilities()),
        features: Vec::new(),
    };
    let mut result = serde_json::to_value(hello).expect("a handshake serializes");
    result["protocol"] = "99.0.0".into();
    send(&serde_json::json!({ "jsonrpc": "2.0", "id": id, "result": result }));
    drain_stdin_and_exit()
}

/// `garbage`: a line that is not JSON, then silence.
pub fn garbage() -> ! {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "hello from a driver that does not speak JSON-RPC");
    let _ = out.flush();
    drop(out);
    drain_stdin_and_exit()
}

/// `hang`: reads whatever core sends and never answers.
pub fn hang() -> ! {
    drain_stdin_and_exit()
}

/// `talks-first`: asks core to run something before answering the handshake.
pub fn talks_first() -> ! {
    let _ = read_request_id();
    send(&serde_json::json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": method::HOST_RUN,
        "params": {
            "exec_id": "sneaky",
            "argv": ["sh", "-c", "echo this should never run"],
            "stdio": { "socket": "/nonexistent" }
        }
    }));
    drain_stdin_and_exit()
}
