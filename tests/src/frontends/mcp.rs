//! MCP as a front end: a `tinybox mcp` server over the store, spoken to
//! on its stdio as an MCP client does (JSON-RPC, one message a line); a
//! run is cancelled with `notifications/cancelled`, the server ended by
//! closing its stdin.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Answer, Ask, Entry, FrontEnd, Ran, Refused, b64, json_bytes, unb64};
use crate::{Cli, KillOnDrop};

/// How long an answer may take before the test fails (it only stops a hung test).
pub const GUARD: Duration = Duration::from_secs(120);

/// One server and the client end of its stdio.
pub struct Session {
    pub child: KillOnDrop,
    pub stdin: Option<ChildStdin>,
    pub lines: mpsc::Receiver<String>,
    pub next_id: u64,
}

impl Session {
    /// `tinybox --store <cli's> mcp FLAGS`.
    pub fn start(cli: &Cli, flags: &[&str]) -> Session {
        let mut args = vec!["mcp"];
        args.extend_from_slice(flags);
        let mut child =
            cli.cmd(&args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Session { child: KillOnDrop(child), stdin, lines, next_id: 1 }
    }

    /// `initialize` and `notifications/initialized`; the initialize answer.
    pub fn initialize(&mut self) -> Value {
        let init = self.call(
            "initialize",
            json!({ "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "test", "version": "1" } }),
        );
        self.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        init
    }

    pub fn send(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request without waiting for its answer; its id.
    pub fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        id
    }

    /// Sends a request and returns its response (skipping notifications
    /// and the answers of requests no one waits for).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        loop {
            let line =
                self.lines.recv_timeout(GUARD).unwrap_or_else(|_| panic!("no answer to {method} within {GUARD:?}"));
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON on stdout: {line}: {e}"));
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    /// Calls a tool; returns (is_error, text).
    pub fn tool(&mut self, name: &str, arguments: Value) -> (bool, String) {
        let v = self.call("tools/call", json!({ "name": name, "arguments": arguments }));
        let result = &v["result"];
        assert!(result.is_object(), "{name}: not a tool result: {v}");
        let text = result["content"][0]["text"].as_str().unwrap_or_default().to_owned();
        (result["isError"] == json!(true), text)
    }

    pub fn tool_ok(&mut self, name: &str, arguments: Value) -> Value {
        let (err, text) = self.tool(name, arguments);
        assert!(!err, "{name}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: not JSON: {text}: {e}"))
    }

    /// A tool's JSON answer, or its error text as the refusal.
    pub fn tool_answer(&mut self, name: &str, arguments: Value) -> Answer<Value> {
        match self.tool(name, arguments) {
            (true, text) => Err(Refused::Line(text)),
            (false, text) => {
                Ok(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: not JSON: {text}: {e}")))
            }
        }
    }

    /// Closes stdin and waits for the server to end by itself.
    pub fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + GUARD;
        loop {
            if let Some(status) = self.child.0.try_wait().unwrap() {
                return status;
            }
            assert!(std::time::Instant::now() < deadline, "the server did not end after stdin closed");
            // Bounded poll for the child's end; nothing to wait on but it.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

pub struct McpFront {
    pub cli: Cli,
    session: Option<Session>,
}

impl McpFront {
    pub fn start(sandbox: &str) -> McpFront {
        let cli = Cli::new();
        let mut session = Session::start(&cli, &["--sandbox", sandbox]);
        session.initialize();
        McpFront { cli, session: Some(session) }
    }

    fn session(&mut self) -> &mut Session {
        self.session.as_mut().expect("the MCP server was ended")
    }
}

/// A `run` request still in flight: its JSON-RPC id.
pub struct McpRunning(u64);

impl FrontEnd for McpFront {
    type Running = McpRunning;

    fn name(&self) -> &'static str {
        "mcp"
    }

    fn store(&self) -> &Path {
        self.cli.home.path()
    }

    fn create(&mut self, ask: &Ask) -> Answer<String> {
        let mut args = json!({});
        if let Some(image) = &ask.image {
            args["image"] = json!(image);
        }
        if let Some(pids) = ask.pids {
            args["pids"] = json!(pids);
        }
        let made = self.session().tool_answer("create_box", args)?;
        Ok(made["id"].as_str().expect("an id").to_owned())
    }

    fn exec(&mut self, id: &str, argv: &[&str], stdin: &[u8]) -> Answer<Ran> {
        let mut args = json!({ "box": id, "argv": argv });
        match std::str::from_utf8(stdin) {
            Ok("") => {}
            Ok(text) => args["stdin"] = json!(text),
            Err(_) => args["stdin_base64"] = json!(b64(stdin)),
        }
        let ran = self.session().tool_answer("run", args)?;
        Ok(Ran {
            stdout: json_bytes("run", &ran, "stdout"),
            stderr: json_bytes("run", &ran, "stderr"),
            exit_code: ran["exit_code"].as_i64().expect("an exit code") as i32,
        })
    }

    fn start(&mut self, id: &str, argv: &[&str]) -> Answer<McpRunning> {
        let call = json!({ "name": "run", "arguments": { "box": id, "argv": argv } });
        Ok(McpRunning(self.session().request("tools/call", call)))
    }

    fn cancel(&mut self, running: McpRunning) -> Answer<()> {
        let params = json!({ "requestId": running.0, "reason": "the client gave up" });
        self.session().send(&json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": params }));
        Ok(())
    }

    fn write_file(&mut self, id: &str, path: &str, bytes: &[u8]) -> Answer<()> {
        self.session().tool_answer("write_file", json!({ "box": id, "path": path, "content_base64": b64(bytes) }))?;
        Ok(())
    }

    fn read_file(&mut self, id: &str, path: &str) -> Answer<Vec<u8>> {
        let got = self.session().tool_answer("read_file", json!({ "box": id, "path": path, "encoding": "base64" }))?;
        Ok(unb64("read_file", got["content"].as_str().expect("content")))
    }

    fn list_dir(&mut self, id: &str, path: &str) -> Answer<Vec<Entry>> {
        let got = self.session().tool_answer("list_files", json!({ "box": id, "path": path }))?;
        Ok(super::http::entries(&got["entries"]))
    }

    fn snapshot(&mut self, _id: &str) -> Answer<String> {
        Err(Refused::Unoffered("the MCP server has no snapshot tool (its tools make, run in, read and remove boxes)"))
    }

    fn remove(&mut self, id: &str) -> Answer<()> {
        self.session().tool_answer("remove_box", json!({ "box": id }))?;
        Ok(())
    }

    fn end_with_in_flight(&mut self, _running: &McpRunning) -> Answer<()> {
        let status = self.session.take().expect("the MCP server was ended").finish();
        match status.success() {
            true => Ok(()),
            false => Err(Refused::Line(format!("tinybox mcp ended with {status} when its stdin closed"))),
        }
    }
}
