//! `tinybox mcp`: serves the Model Context Protocol on stdio (rmcp), so an
//! agent can make boxes and use them: create, run a command or a piece of
//! code, write, read and list files (`files.rs`), list, remove, inspect. The operator's flags are a ceiling the agent can
//! ask under and never over (core's `ceiling`); the agent reaches only the
//! boxes this server made, and they are removed when it exits. A refusal
//! is the CLI's one line, as a tool error; a malformed call is an MCP error.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use clap::Args;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use tinybox_core::capture::{self, Capture};
use tinybox_core::ceiling::{AgentCreate, Ceiling};
use tinybox_core::model::BoxId;
use tinybox_core::request::{ExecOptions, NetworkChoice, Size, StdinGiven};
use tinybox_core::{Error, Tinybox};

use super::App;
use crate::args::{CeilingArgs, parse_duration, parse_size};

mod files;
mod schemas;

#[derive(Debug, Args)]
pub struct McpCmd {
    #[command(flatten)]
    pub ceiling: CeilingArgs,
    /// What a run keeps of each of stdout and stderr, and the largest file read_file returns.
    #[arg(long, value_parser = parse_size, default_value = "64K")]
    pub max_output: u64,
    /// The longest a command runs (and its default).
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    pub timeout: Duration,
}

impl McpCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        // An engine of the server's own: its verifier prints nothing, since
        // stdout is the protocol.
        let mut engine = Tinybox::open(&app.store_dir)?;
        engine.set_verifier(Arc::new(crate::verifier::Kit { json: true }));
        let ceiling = self.ceiling.ceiling();
        let server = Server::new(Arc::new(engine), ceiling, self.max_output, self.timeout);
        let boxes = server.boxes.clone();
        let engine = server.engine.clone();
        let served = async {
            let running = server.serve(rmcp::transport::stdio()).await.map_err(|e| mcp_io("cannot start", e))?;
            running.waiting().await.map_err(|e| mcp_io("stopped", e))
        };
        let result = served.await;
        // What the agent made goes with the server.
        let made: Vec<BoxId> = boxes.lock().expect("boxes").iter().cloned().collect();
        for id in made {
            if let Err(e) = engine.remove(&id).await {
                eprintln!("tinybox: {e}");
            }
        }
        engine.close().await;
        result.map(|_| 0)
    }
}

fn mcp_io(what: &str, e: impl std::fmt::Display) -> Error {
    Error::io(format!("the MCP server {what}"), std::io::Error::other(e.to_string()))
}

#[derive(Clone)]
struct Server {
    engine: Arc<Tinybox>,
    ceiling: Ceiling,
    max_output: u64,
    timeout: Duration,
    /// The boxes this server made: the only ones the agent can reach.
    boxes: Arc<Mutex<BTreeSet<BoxId>>>,
    tool_router: ToolRouter<Server>,
}

#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Network {
    Deny,
    Egress,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct CreateArgs {
    /// Seconds the box lives before it is removed (at most the server's ceiling; default the ceiling).
    ttl_secs: Option<u64>,
    /// Memory limit, like "512M" (at most the ceiling; default the ceiling).
    memory: Option<String>,
    /// Process limit (at most the ceiling; default the ceiling).
    pids: Option<u64>,
    /// Cores (at most the ceiling; default the ceiling).
    cpus: Option<f64>,
    /// "deny" (the default) or "egress" (only if the server allows it).
    network: Option<Network>,
    /// A container image, for a docker box.
    image: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct BoxArg {
    /// The box's id, as create_box returned it.
    #[serde(rename = "box")]
    id: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunArgs {
    /// The box's id.
    #[serde(rename = "box")]
    id: String,
    /// The program and its arguments, run as they are (no shell; use ["sh", "-c", "..."] for one).
    argv: Vec<String>,
    /// Text given to the command on stdin (default: none).
    stdin: Option<String>,
    /// Bytes given to the command on stdin, base64-encoded (instead of stdin).
    stdin_base64: Option<String>,
    /// Seconds before the command is stopped (at most the server's ceiling).
    timeout_secs: Option<u64>,
    /// The working directory in the box.
    cwd: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct CodeArgs {
    /// The box's id.
    #[serde(rename = "box")]
    id: String,
    /// "python", "sh", "bash" or "node": the interpreter in the box that reads the code.
    language: String,
    /// The program's text.
    code: String,
    /// Seconds before it is stopped (at most the server's ceiling).
    timeout_secs: Option<u64>,
    /// The working directory in the box.
    cwd: Option<String>,
}

/// The interpreter for `language`, reading its program from stdin.
fn interpreter(language: &str) -> Result<Vec<String>, String> {
    let argv: &[&str] = match language {
        "python" | "python3" => &["python3", "-"],
        "sh" => &["sh", "-s"],
        "bash" => &["bash", "-s"],
        "node" | "javascript" => &["node", "-"],
        other => {
            return Err(format!(
                "language {other:?} is not one run_code knows (python, sh, bash, node); use run with an argv for others"
            ));
        }
    };
    Ok(argv.iter().map(|a| (*a).to_owned()).collect())
}

/// A tool's answer: its `structuredContent` (the tool's `outputSchema`
/// says its shape) and the same JSON as text for clients that read only
/// text, or the CLI's one-line refusal as a tool error.
pub(super) fn answer(result: Result<serde_json::Value, Error>) -> CallToolResult {
    match result {
        Ok(v) => {
            let text = serde_json::to_string_pretty(&v).unwrap_or_else(|_| v.to_string());
            let mut done = CallToolResult::success(vec![ContentBlock::text(text)]);
            done.structured_content = Some(v);
            done
        }
        Err(e) => CallToolResult::error(vec![ContentBlock::text(format!("tinybox: {e}"))]),
    }
}

/// A call whose arguments break one of this server's own rules, as a tool error.
pub(super) fn refusal(why: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!("tinybox: {why}"))])
}

fn json<T: serde::Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

#[tool_router]
impl Server {
    fn new(engine: Arc<Tinybox>, ceiling: Ceiling, max_output: u64, timeout: Duration) -> Server {
        let mut tool_router = Self::tool_router() + Self::files_router();
        if let Some(route) = tool_router.map.get_mut("create_box") {
            let old = route.attr.description.clone().unwrap_or_default();
            route.attr.description = Some(format!("{old} {}", describe(&ceiling)).into());
        }
        Server { engine, ceiling, max_output, timeout, boxes: Arc::default(), tool_router }
    }

    /// A box this server made, or the refusal naming what the agent can use.
    pub(super) fn mine(&self, id: &str) -> Result<BoxId, Error> {
        let id = BoxId::new(id)?;
        if self.boxes.lock().expect("boxes").contains(&id) {
            return Ok(id);
        }
        Err(Error::BoxNotReady {
            id,
            state: "not one this MCP server made".into(),
            hint: "list_boxes shows the boxes you can use; create_box makes one".into(),
        })
    }

    #[tool(
        output_schema = schemas::created(),
        description = "Create an isolated box to run untrusted code in. Returns its id and what confines it: isolation level, network, limits in force, when it expires.",
        annotations(
            title = "Create a box",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn create_box(&self, Parameters(args): Parameters<CreateArgs>) -> CallToolResult {
        answer(self.create(args).await)
    }

    async fn create(&self, args: CreateArgs) -> Result<serde_json::Value, Error> {
        let ask = AgentCreate {
            ttl_secs: args.ttl_secs,
            memory: args.memory.map(Size::Text),
            pids: args.pids,
            cpus: args.cpus,
            network: args.network.map(|n| match n {
                Network::Deny => NetworkChoice::Deny,
                Network::Egress => NetworkChoice::Egress,
            }),
            image: args.image,
        };
        let request = self.ceiling.request(&ask)?;
        let created = self.engine.create_requested(&request).await?;
        self.boxes.lock().expect("boxes").insert(created.info.id.clone());
        let mut v = summary(&created.info);
        v["warnings"] = json(&created.warnings);
        Ok(v)
    }

    #[tool(
        output_schema = schemas::ran(),
        description = "Run a command in a box: argv as given (no shell), optional stdin (text, or stdin_base64 for bytes) and timeout. Returns the exit code and stdout/stderr (with stdout_base64/stderr_base64 beside them when the bytes are not UTF-8), each cut at a bound and marked truncated when cut, with how many bytes were dropped.",
        annotations(
            title = "Run a command in a box",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn run(&self, Parameters(args): Parameters<RunArgs>, context: RequestContext<RoleServer>) -> CallToolResult {
        // The request's token is cancelled by the client's
        // `notifications/cancelled` (its own timeout sends one) and when the
        // server stops: either way the command in the box is stopped, not
        // left to run out its timeout.
        answer(self.run_in(args, context.ct.cancelled_owned()).await)
    }

    async fn run_in(
        &self,
        args: RunArgs,
        cancel: impl std::future::Future<Output = ()>,
    ) -> Result<serde_json::Value, Error> {
        let id = self.mine(&args.id)?;
        let plan = ExecOptions {
            argv: args.argv,
            cwd: args.cwd,
            stdin: args.stdin,
            stdin_base64: args.stdin_base64,
            timeout_secs: Some(args.timeout_secs.map(|s| s as f64).unwrap_or(self.timeout.as_secs_f64())),
            ..ExecOptions::default()
        }
        .plan()?;
        let timeout = plan.timeout.unwrap_or(self.timeout);
        if timeout > self.timeout {
            return Err(tinybox_core::ceiling::CeilingError::Over {
                what: "timeout_secs",
                asked: timeout.as_secs().to_string(),
                ceiling: self.timeout.as_secs().to_string(),
            }
            .into());
        }
        let mut how = Capture::new(usize::try_from(self.max_output).unwrap_or(usize::MAX));
        how.stdin = match plan.stdin {
            Some(StdinGiven::Text(text)) => Some(text.into_bytes()),
            Some(StdinGiven::Base64(b64)) => Some(BASE64.decode(b64.trim()).map_err(|e| {
                Error::from(tinybox_core::request::RequestError::NotBase64 {
                    field: "stdin_base64",
                    detail: e.to_string(),
                })
            })?),
            None => None,
        };
        how.timeout = Some(timeout);
        let got = capture::run(&self.engine, &id, plan.request, plan.target, &how, cancel).await?;
        let mut ran = serde_json::json!({
            "exit_code": got.status.code,
            "signal": got.status.signal,
            "timed_out": got.timed_out,
            "stdout": String::from_utf8_lossy(&got.stdout.bytes),
            "stdout_truncated": got.stdout.truncated,
            "stdout_dropped_bytes": got.stdout.dropped_bytes,
            "stderr": String::from_utf8_lossy(&got.stderr.bytes),
            "stderr_truncated": got.stderr.truncated,
            "stderr_dropped_bytes": got.stderr.dropped_bytes,
        });
        // The text above is for reading; bytes that are not UTF-8 come
        // whole beside it, as read_file gives them.
        for (name, bytes) in [("stdout_base64", &got.stdout.bytes), ("stderr_base64", &got.stderr.bytes)] {
            if std::str::from_utf8(bytes).is_err() {
                ran[name] = serde_json::json!(BASE64.encode(bytes));
            }
        }
        Ok(ran)
    }

    #[tool(
        output_schema = schemas::ran(),
        description = "Run a piece of code in a box: language \"python\" (python3), \"sh\", \"bash\" or \"node\", the code given to the interpreter on its stdin (no file, no quoting). Returns what run returns.",
        annotations(
            title = "Run code in a box",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn run_code(
        &self,
        Parameters(args): Parameters<CodeArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let argv = match interpreter(&args.language) {
            Ok(argv) => argv,
            Err(why) => return refusal(&why),
        };
        let run = RunArgs {
            id: args.id,
            argv,
            stdin: Some(args.code),
            stdin_base64: None,
            timeout_secs: args.timeout_secs,
            cwd: args.cwd,
        };
        answer(self.run_in(run, context.ct.cancelled_owned()).await)
    }

    #[tool(
        output_schema = schemas::listed_boxes(),
        description = "List the boxes this server made, with what confines each.",
        annotations(title = "List boxes", read_only_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_boxes(&self) -> CallToolResult {
        let ids: Vec<BoxId> = self.boxes.lock().expect("boxes").iter().cloned().collect();
        let mut out = Vec::new();
        for id in ids {
            if let Ok(info) = self.engine.get(&id) {
                out.push(summary(&info));
            }
        }
        answer(Ok(serde_json::json!({ "boxes": out })))
    }

    #[tool(
        output_schema = schemas::removed(),
        description = "Remove a box and everything in it.",
        annotations(
            title = "Remove a box",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn remove_box(&self, Parameters(args): Parameters<BoxArg>) -> CallToolResult {
        answer(self.remove(args).await)
    }

    async fn remove(&self, args: BoxArg) -> Result<serde_json::Value, Error> {
        let id = self.mine(&args.id)?;
        self.engine.remove(&id).await?;
        self.boxes.lock().expect("boxes").remove(&id);
        Ok(serde_json::json!({ "removed": id }))
    }

    #[tool(
        output_schema = schemas::inspected(),
        description = "Inspect what confines a box: sandbox, isolation level (and whether it is suitable for untrusted code), network and limits in force, state, expiry.",
        annotations(title = "Inspect a box", read_only_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn inspect_box(&self, Parameters(args): Parameters<BoxArg>) -> CallToolResult {
        answer(self.inspect(args).await)
    }

    async fn inspect(&self, args: BoxArg) -> Result<serde_json::Value, Error> {
        let id = self.mine(&args.id)?;
        let view = self.engine.inspect(&id).await?;
        let mut v = summary(&view.info);
        v["state"] = json(&view.state);
        v["state_detail"] = json(&view.state_detail);
        Ok(v)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("tinybox", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "tinybox boxes: isolated places to run code. {} Boxes you make are removed when this server stops.",
                describe(&self.ceiling)
            ))
    }
}

/// The ceiling in words, for the model.
fn describe(c: &Ceiling) -> String {
    let sandbox = c.sandbox.as_ref().map_or("the strongest healthy sandbox".to_owned(), |s| format!("sandbox {s}"));
    let floor = if c.untrusted {
        "with at least the isolation required for untrusted code (kernel: its own namespaces, no view of the host)"
    } else {
        "WITHOUT an isolation floor (the operator allowed boxes that may not be fit for untrusted code; check inspect_box)"
    };
    let network = match c.network {
        NetworkChoice::Deny => "no network",
        NetworkChoice::Egress => "no network unless asked (egress allowed)",
        NetworkChoice::Allowlist => "no network but an allowlist of hosts",
    };
    format!(
        "Boxes run in {sandbox} {floor}, {network}, and live at most {}s with at most {} bytes of memory, {} processes and {} cores.",
        c.ttl_secs, c.memory_bytes, c.pids, c.cpus
    )
}

/// A box in the terms a model needs.
fn summary(info: &tinybox_core::model::BoxInfo) -> serde_json::Value {
    let mut v = serde_json::json!({ "id": info.id, "lifecycle": json(&info.spec.lifecycle) });
    if let Some(ws) = &info.workspace {
        v["sandbox"] = json(&ws.placement.sandbox);
        v["host"] = json(&ws.placement.host);
        v["isolation"] = json(&ws.isolation);
        v["suitable_for_untrusted_code"] =
            (ws.isolation >= tinybox_core::model::IsolationLevel::UNTRUSTED_FLOOR && ws.verified).into();
        v["network"] = json(&ws.network);
        v["limits"] = json(&ws.limits);
        v["workdir"] = json(&ws.workdir);
    }
    v
}
