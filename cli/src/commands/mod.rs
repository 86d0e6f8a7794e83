//! One file per verb. `dispatch` opens the engine, runs the verb, closes
//! the drivers, and turns an error into one line and an exit status.

pub mod autosnapshot;
pub mod completions;
pub mod cp;
pub mod create;
pub mod daemon;
pub mod drivers;
pub mod exec;
pub mod fork;
pub mod forward;
pub mod host;
pub mod image;
pub mod inspect;
pub mod logs;
pub mod ls;
pub mod mcp;
pub mod pool;
pub mod prune;
pub mod reap;
pub mod resume;
pub mod rm;
pub mod run;
pub mod serve;
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
    /// Where the store lives.
    pub store_dir: PathBuf,
}

pub async fn dispatch(store: Option<PathBuf>, json: bool, command: Command) -> u8 {
    let failure_code = match command {
        Command::Exec(_) | Command::Run(_) => EXEC_FAILURE,
        _ => 1,
    };
    let store = store.unwrap_or_else(tinybox_core::paths::default_store_dir);
    let mut engine = match Tinybox::open(&store) {
        Ok(e) => e,
        Err(e) => return report(&e, json, failure_code),
    };
    engine.set_verifier(std::sync::Arc::new(crate::verifier::Kit { json }));
    let app = App { engine, json, store_dir: store };
    let result = match command {
        Command::Create(c) => c.run(&app).await,
        Command::Exec(c) => c.run(&app).await,
        Command::Cp(c) => c.run(&app).await,
        Command::Mcp(c) => c.run(&app).await,
        Command::Serve(c) => c.run(&app).await,
        Command::Run(c) => c.run(&app).await,
        Command::Ls(c) => ls::run(&app, c).await,
        Command::Inspect(c) => c.run(&app).await,
        Command::Logs(c) => c.run(&app).await,
        Command::Rm(c) => c.run(&app).await,
        Command::Reap => reap::run(&app).await,
        Command::Prune(c) => c.run(&app).await,
        Command::Snapshot(c) => c.run(&app).await,
        Command::Fork(c) => c.run(&app).await,
        Command::Stop(c) => c.run(&app).await,
        Command::Resume(c) => c.run(&app).await,
        Command::Autosnapshot => autosnapshot::run(&app).await,
        Command::Template(c) => c.run(&app).await,
        Command::Host(c) => c.run(&app).await,
        Command::Sync(c) => c.run(&app).await,
        Command::Drivers(c) => c.run(&app).await,
        Command::Pool(c) => c.run(&app).await,
        Command::Image(c) => c.run(&app).await,
        Command::PortForward(c) => c.run(&app).await,
        Command::Ports(c) => c.run(&app).await,
        Command::Daemon(c) => c.run(&app).await,
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
        crate::output::json(&serde_json::json!({ "error": { "kind": e.kind().as_str(), "message": e.to_string() } }));
    }
    eprintln!("tinybox: {e}");
    code
}

/// Plans the create the flags ask for, saying which sandbox core picked
/// when none was named.
pub async fn plan(
    app: &App,
    args: &crate::args::BoxArgs,
    env: &[(String, String)],
) -> Result<tinybox_core::CreatePlan, Error> {
    let plan = app.engine.plan_create(&args.request(env)?).await?;
    if let Some(choice) = &plan.choice
        && !app.json
    {
        eprintln!("tinybox: using sandbox {} (isolation {}), {}", choice.sandbox, choice.isolation, choice.reason);
    }
    Ok(plan)
}
