//! One JSON call: the method's name and parameters in, `{"ok": result}` or
//! `{"error": {...}}` out. Results are the documents `tinybox <verb> --json`
//! prints (docs/specs/json-shapes.md).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use serde_json::{Value, json};
use tinybox_core::Tinybox;
use tinybox_core::request::StdinGiven;

use crate::errors::{CallError, CallResult, Code};
use crate::exec::{Launch, Running};
use crate::manifest::METHODS;
use crate::params::{self, Common};
use crate::state::{State, state};

/// `prune`'s parameters: `dry_run` only lists, as `tinybox prune --dry-run`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PruneParams {
    #[serde(default)]
    dry_run: bool,
}

fn ok<T: Serialize>(value: &T) -> CallResult<Value> {
    serde_json::to_value(value).map_err(|e| CallError::internal(format!("cannot encode the result: {e}")))
}

/// Runs `method` with `params` (a JSON text) and returns its result.
pub fn call(method: &str, params: &str) -> CallResult<Value> {
    if !METHODS.contains(&method) {
        return Err(CallError::new(
            Code::UnknownMethod,
            format!(
                "no method {method:?} in TinyBus ABI {}; the methods are: {}",
                crate::ABI_VERSION,
                METHODS.join(", ")
            ),
        ));
    }
    let (common, rest) = params::split(params)?;
    let st = state()?;
    match method {
        "manifest" => {
            params::parse::<params::NoParams>(method, rest)?;
            Ok(crate::manifest::manifest())
        }
        "create" => create(st, &common, params::parse(method, rest)?),
        "exec" => {
            let p: params::ExecParams = params::parse(method, rest)?;
            if p.buffer_bytes.is_some() {
                return Err(CallError::invalid("exec: buffer_bytes applies to exec.start only"));
            }
            let max = p.max_output()?;
            crate::exec::captured(st, engine(st, &common)?, launch(&p)?, max)
        }
        "exec.start" => {
            let p: params::ExecParams = params::parse(method, rest)?;
            p.max_output()?;
            start(st, engine(st, &common)?, launch(&p)?, p.buffer()?)
        }
        "fs.read" => {
            let p: crate::fs::ReadParams = params::parse(method, rest)?;
            if p.stream {
                let launch = crate::fs::stream_launch(&p);
                return start(st, engine(st, &common)?, launch, crate::exec::DEFAULT_STREAM_BUFFER);
            }
            crate::fs::read(st, engine(st, &common)?, p)
        }
        "fs.write" => crate::fs::write(st, engine(st, &common)?, params::parse(method, rest)?),
        "fs.list" => crate::fs::list(st, engine(st, &common)?, params::parse(method, rest)?),
        "exec.read" => {
            let p: params::ReadParams = params::parse(method, rest)?;
            let run = running(st, &p.exec)?;
            Ok(run.read(p.wait_ms.map(std::time::Duration::from_millis), p.max()?))
        }
        "exec.wait" => {
            let p: params::HandleParams = params::parse(method, rest)?;
            let max = p.max_output()?;
            let run = running(st, &p.exec)?;
            let result = run.wait(max);
            st.execs.lock().unwrap_or_else(|p| p.into_inner()).remove(&p.exec);
            result
        }
        "exec.cancel" => {
            let p: params::HandleParams = params::parse(method, rest)?;
            running(st, &p.exec)?.cancel();
            Ok(json!({ "exec": p.exec, "cancelling": true }))
        }
        "exec.resize" => {
            let p: params::ResizeParams = params::parse(method, rest)?;
            let size = p.size()?;
            running(st, &p.exec)?.resize(&p.exec, size)?;
            Ok(json!({ "exec": p.exec, "rows": size.rows, "cols": size.cols }))
        }
        "inspect" => {
            let p: params::BoxParams = params::parse(method, rest)?;
            let engine = engine(st, &common)?;
            ok(&st.block_on(engine.inspect(&p.id))?)
        }
        "ls" => {
            params::parse::<params::NoParams>(method, rest)?;
            ok(&engine(st, &common)?.listed(false)?)
        }
        "rm" => {
            let ids = params::parse::<params::RmParams>(method, rest)?.all()?;
            let engine = engine(st, &common)?;
            ok(&st.block_on(engine.remove_each(&ids)))
        }
        "snapshot" => {
            let p: params::BoxParams = params::parse(method, rest)?;
            let engine = engine(st, &common)?;
            ok(&st.block_on(engine.snapshot(&p.id))?)
        }
        "snapshot.ls" => {
            params::parse::<params::NoParams>(method, rest)?;
            ok(&engine(st, &common)?.snapshot_list()?)
        }
        "prune" => {
            let p: PruneParams = params::parse(method, rest)?;
            let engine = engine(st, &common)?;
            ok(&st.block_on(engine.prune(p.dry_run))?)
        }
        "fork" => {
            let p: params::BoxParams = params::parse(method, rest)?;
            let engine = engine(st, &common)?;
            ok(&st.block_on(engine.fork(&p.id))?)
        }
        "stop" => {
            let p: params::BoxParams = params::parse(method, rest)?;
            let engine = engine(st, &common)?;
            ok(&st.block_on(engine.stop(&p.id))?)
        }
        "resume" => {
            let p: params::BoxParams = params::parse(method, rest)?;
            let engine = engine(st, &common)?;
            ok(&st.block_on(engine.resume(&p.id))?)
        }
        "autosnapshot" => {
            params::parse::<params::NoParams>(method, rest)?;
            let engine = engine(st, &common)?;
            ok(&st.block_on(engine.autosnapshot())?)
        }
        "template.save" => {
            let p: params::TemplateSaveParams = params::parse(method, rest)?;
            let engine = engine(st, &common)?;
            ok(&st.block_on(engine.template_save(p.name, &p.id))?)
        }
        "template.ls" => {
            params::parse::<params::NoParams>(method, rest)?;
            ok(&engine(st, &common)?.template_list()?)
        }
        "template.rm" => {
            let p: params::TemplateNameParams = params::parse(method, rest)?;
            ok(&engine(st, &common)?.template_remove(&p.name)?)
        }
        "reap" => {
            params::parse::<params::NoParams>(method, rest)?;
            let engine = engine(st, &common)?;
            ok(&st.block_on(engine.reap())?)
        }
        "drivers" => {
            params::parse::<params::NoParams>(method, rest)?;
            let engine = engine(st, &common)?;
            ok(&st.block_on(engine.driver_listing()))
        }
        "host.add" => {
            let request: tinybox_core::hosts::SshHostRequest = params::parse(method, rest)?;
            ok(&engine(st, &common)?.host_add(&request)?)
        }
        "host.ls" => {
            params::parse::<params::NoParams>(method, rest)?;
            ok(&engine(st, &common)?.host_table()?)
        }
        "host.rm" => {
            let p: params::HostNameParams = params::parse(method, rest)?;
            engine(st, &common)?.host_remove(&p.name)?;
            Ok(json!({ "removed": p.name }))
        }
        "close" => {
            params::parse::<params::NoParams>(method, rest)?;
            Ok(json!({ "closed_engines": st.close() }))
        }
        _ => Err(CallError::internal(format!("method {method} is listed but has no handler"))),
    }
}

fn store_dir(common: &Common) -> std::path::PathBuf {
    common.store.clone().unwrap_or_else(tinybox_core::paths::default_store_dir)
}

fn engine(st: &State, common: &Common) -> CallResult<Arc<Tinybox>> {
    st.engine(&store_dir(common))
}

/// Starts a streaming exec and keeps it under a new handle.
fn start(st: &State, engine: Arc<Tinybox>, launch: Launch, buffer: usize) -> CallResult<Value> {
    let run = Running::start(st, engine, launch, buffer)?;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let handle = format!("exec-{}", NEXT.fetch_add(1, Ordering::SeqCst));
    st.execs.lock().unwrap_or_else(|p| p.into_inner()).insert(handle.clone(), run.clone());
    Ok(json!({ "exec": handle, "id": run.box_id }))
}

fn running(st: &State, handle: &str) -> CallResult<Arc<Running>> {
    st.execs.lock().unwrap_or_else(|p| p.into_inner()).get(handle).cloned().ok_or_else(|| {
        CallError::new(
            Code::NotFound,
            format!("no exec {handle:?} in flight; exec.start returns one, exec.wait ends it"),
        )
    })
}

/// `create`: core makes every decision (`Tinybox::create_requested`) and
/// shapes the answer (the box, and its warnings when there are any).
fn create(st: &State, common: &Common, request: tinybox_core::CreateRequest) -> CallResult<Value> {
    let engine = engine(st, common)?;
    let created = st.block_on(engine.create_requested(&request))?;
    ok(&created.document())
}

/// What `exec` or `exec.start` asks to run, checked by core's rules; the
/// bus only decodes the base64 spelling of binary input.
fn launch(p: &params::ExecParams) -> CallResult<Launch> {
    let plan = p.options().plan()?;
    let stdin = match plan.stdin {
        None => None,
        Some(StdinGiven::Text(text)) => Some(text.into_bytes()),
        Some(StdinGiven::Base64(b64)) => {
            Some(crate::base64::decode(&b64).map_err(|e| CallError::invalid(format!("stdin_base64 is {e}")))?)
        }
    };
    Ok(Launch { box_id: p.id.clone(), request: plan.request, target: plan.target, stdin, timeout: plan.timeout })
}
