//! `tinybox pool create|ls|rm|fill`: warm pools of boxes made ahead from
//! one request and handed out by `tinybox create --pool NAME`. The rules
//! are core's (`Tinybox::pool_*`); the daemon keeps pools full.

use clap::{Args, Subcommand};
use tinybox_core::Error;
use tinybox_core::engine::FillReport;
use tinybox_core::supervisor;

use super::App;
use crate::args::BoxArgs;
use crate::output;

#[derive(Debug, Subcommand)]
pub enum PoolCmd {
    /// Make a pool of SIZE boxes from the create flags; filled now, or by the daemon when one runs.
    Create(Box<CreateArgs>),
    /// List the pools, with how many boxes each has ready.
    Ls,
    /// Forget a pool and remove the boxes waiting in it (boxes already handed out stay).
    Rm { name: String },
    /// Bring pools up to size now (the daemon does this in the background).
    Fill { name: Option<String> },
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    pub name: String,
    /// How many boxes to keep ready.
    #[arg(long, value_name = "N")]
    pub size: u32,
    /// Record the pool without making its boxes (the daemon, or `pool fill`, makes them).
    #[arg(long)]
    pub no_fill: bool,
    #[command(flatten)]
    pub box_args: BoxArgs,
}

impl PoolCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        match self {
            PoolCmd::Create(a) => {
                let pool = app.engine.pool_create(&a.name, a.box_args.request(&[])?, a.size).await?;
                let sandbox = pool.request.sandbox.as_ref().map(ToString::to_string).unwrap_or_default();
                if !app.json {
                    eprintln!("tinybox: pool {} makes {} boxes on {sandbox}", pool.name, pool.size);
                }
                let reports = if a.no_fill { Vec::new() } else { fill(app, Some(pool.name.clone())).await? };
                if app.json {
                    output::json(&serde_json::json!({ "pool": pool, "filled": reports }));
                }
                Ok(if reports.iter().any(|r| r.error.is_some()) { 1 } else { 0 })
            }
            PoolCmd::Ls => {
                let pools = app.engine.pools()?;
                if app.json {
                    output::json(&pools);
                    return Ok(0);
                }
                if pools.is_empty() {
                    eprintln!("tinybox: no pools; `tinybox pool create NAME --size N` makes one");
                    return Ok(0);
                }
                let mut t = output::table(&["NAME", "HOST", "SANDBOX", "SIZE", "READY", "FILLING", "TTL"]);
                for p in &pools {
                    let r = &p.request;
                    t.add_row(vec![
                        p.name.clone(),
                        r.host.as_ref().map(|h| h.name().to_string()).unwrap_or_else(|| "local".into()),
                        r.sandbox.as_ref().map(ToString::to_string).unwrap_or_default(),
                        p.size.to_string(),
                        p.ready.to_string(),
                        p.filling.to_string(),
                        r.ttl_secs.map(output::span).unwrap_or_else(|| "1h".into()),
                    ]);
                }
                output::print_table(&t);
                Ok(0)
            }
            PoolCmd::Rm { name } => {
                let removed = app.engine.pool_remove(&name).await?;
                if app.json {
                    output::json(&serde_json::json!({ "pool": name, "removed": removed }));
                } else {
                    eprintln!("tinybox: pool {name} removed, with {} waiting boxes", removed.len());
                }
                Ok(0)
            }
            PoolCmd::Fill { name } => {
                let reports = fill(app, name).await?;
                if app.json {
                    output::json(&reports);
                }
                Ok(if reports.iter().any(|r| r.error.is_some()) { 1 } else { 0 })
            }
        }
    }
}

/// Fills `name` (or every pool) now, holding the supervisor's lock; when a
/// daemon holds it, the daemon fills them and this says so.
async fn fill(app: &App, name: Option<String>) -> Result<Vec<FillReport>, Error> {
    let Some(_lock) = supervisor::try_supervise(&app.store_dir)? else {
        if !app.json {
            eprintln!("tinybox: the daemon running on this store fills its pools in the background");
        }
        return Ok(Vec::new());
    };
    let names = match name {
        Some(n) => vec![n],
        None => app.engine.pools()?.into_iter().map(|p| p.name).collect(),
    };
    let mut reports = Vec::new();
    for n in names {
        let report = crate::progress::spin(app.json, format!("filling pool {n}"), app.engine.pool_fill(&n)).await?;
        if !app.json {
            match &report.error {
                None => eprintln!("tinybox: pool {n}: made {}", report.made.len()),
                Some(e) => eprintln!("tinybox: pool {n}: made {}, then failed: {e}", report.made.len()),
            }
        }
        reports.push(report);
    }
    Ok(reports)
}
