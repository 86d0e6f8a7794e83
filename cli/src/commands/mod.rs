//! One file per verb. `dispatch` opens the engine, runs the verb, closes
//! the drivers, and turns an error into one line and an exit status.

pub mod autosnapshot;
pub mod completions;
pub mod create;
pub mod drivers;
pub mod exec;
pub mod fork;
pub mod host;
pub mod inspect;
pub mod ls;
pub mod reap;
pub mod resume;
pub mod rm;
pub mod run;
pub mod snapshot;
pub mod stop;
pub mod sync;
pub mod template;
pub mod verify;

use std::path::PathBuf;

use tinybox_core::{Error, Tinybox};

use crate::Command;

/// Exit status for tinybox's own failure in `exec`/`run`, where 1-124 and
/// 126+ belong to the command (as with `docker run`).
pub const EXEC_FAILURE: u8 = 125;

/// What every verb gets.
pub struct App {
    pub engine: Tinybox,
    pub json: bool,
    /// Where the store (and its config.json) lives.
    pub store_dir: PathBuf,
}

pub async fn dispatch(store: Option<PathBuf>, json: bool, command: Command) -> u8 {
    let failure_code = match command {
        Command::Exec(_) | Command::Run(_) => EXEC_FAILURE,
        _ => 1,
    };
    let store = store.unwrap_or_else(tinybox_core::paths::default_store_dir);
    // `--host ssh:DEST` names a host the table must hold before the engine loads it.
    let ad_hoc = match &command {
        Command::Create(c) => host::save_ad_hoc(&store, &c.box_args.placement.hosts()),
        Command::Run(c) => host::save_ad_hoc(&store, &c.box_args.placement.hosts()),
        _ => Ok(()),
    };
    if let Err(e) = ad_hoc {
        return report(&e, json, failure_code);
    }
    let engine = match Tinybox::open(&store) {
        Ok(e) => e,
        Err(e) => return report(&e, json, failure_code),
    };
    let app = App { engine, json, store_dir: store };
    let result = match command {
        Command::Create(c) => c.run(&app).await,
        Command::Exec(c) => c.run(&app).await,
        Command::Run(c) => c.run(&app).await,
        Command::Ls => ls::run(&app).await,
        Command::Inspect(c) => c.run(&app).await,
        Command::Rm(c) => c.run(&app).await,
        Command::Reap => reap::run(&app).await,
        Command::Snapshot(c) => c.run(&app).await,
        Command::Fork(c) => c.run(&app).await,
        Command::Stop(c) => c.run(&app).await,
        Command::Resume(c) => c.run(&app).await,
        Command::Autosnapshot => autosnapshot::run(&app).await,
        Command::Template(c) => c.run(&app).await,
        Command::Host(c) => c.run(&app).await,
        Command::Sync(c) => c.run(&app).await,
        Command::Drivers(c) => c.run(&app).await,
        Command::Completions(_) => Ok(0),
    };
    app.engine.close().await;
    match result {
        Ok(code) => code,
        Err(e) => report(&e, json, failure_code),
    }
}

/// One line on stderr (and a JSON object on stdout with --json).
fn report(e: &Error, json: bool, code: u8) -> u8 {
    if json {
        crate::output::json(&serde_json::json!({ "error": { "kind": kind(e), "message": e.to_string() } }));
    }
    eprintln!("tinybox: {e}");
    code
}

fn kind(e: &Error) -> &'static str {
    match e {
        Error::Unsupported { .. } => "unsupported",
        Error::Spec(_) | Error::Exec(_) | Error::Name(_) | Error::Refused(_) => "invalid",
        Error::Store(_) => "store",
        Error::DriverNotFound { .. } | Error::DriverUnavailable { .. } | Error::NoSandbox(_) => "unavailable",
        Error::Driver { .. } => "driver",
        Error::Protocol { .. } | Error::DriverDied { .. } | Error::DriverTimeout { .. } => "driver_failure",
        Error::UnknownHost { .. } => "unknown_host",
        Error::BoxNotReady { .. } => "not_ready",
        Error::Io { .. } => "io",
    }
}

/// The sandbox named, or the strongest healthy one, said out loud.
pub async fn pick_sandbox(app: &App, args: &crate::args::BoxArgs) -> Result<tinybox_core::model::SandboxName, Error> {
    if let Some(s) = &args.placement.sandbox {
        return Ok(s.clone());
    }
    let floor = args.placement.untrusted.then_some(tinybox_core::model::IsolationLevel::UNTRUSTED_FLOOR);
    let (name, isolation) = app.engine.choose_sandbox(floor).await?;
    if !app.json {
        eprintln!("tinybox: using sandbox {name} (isolation {isolation}), the strongest healthy one installed");
    }
    Ok(name)
}

/// The spec the flags describe, with the sandbox chosen and any template resolved.
pub async fn spec_from(
    app: &App,
    args: &crate::args::BoxArgs,
    env: &[(String, String)],
) -> Result<tinybox_core::model::BoxSpec, Error> {
    let sandbox = pick_sandbox(app, args).await?;
    let mut spec = args.spec(sandbox, env).map_err(Error::Refused)?;
    if args.placement.namespace.is_none()
        && let Some(ns) = crate::config::Config::load(&app.store_dir)?.namespace
    {
        spec.namespace = ns;
    }
    if let Some(t) = &args.from_template {
        spec.source = Some(app.engine.template_source(t, &spec.workspace)?);
    }
    Ok(spec)
}
