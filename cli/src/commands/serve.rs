//! `tinybox serve`: the HTTP API and the E2B protocol (tinybox-api) on a
//! loopback port, and `tinybox serve env`, the `export` lines that point
//! a client (tinybox's own, or any E2B SDK) at the running server. The
//! operator's flags are the ceiling every API caller asks under, as with
//! `tinybox mcp`; the boxes the server made go when it stops.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use tinybox_api::{Api, Config, Token};
use tinybox_core::{Error, Tinybox};

use super::App;
use crate::args::{CeilingArgs, parse_duration, parse_size};

/// Where a running server says where it listens (read by `serve env`).
const ADDRESS_FILE: &str = "api.json";

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ServeCmd {
    #[command(subcommand)]
    pub what: Option<ServeWhat>,
    /// The address to listen on: a loopback one (nothing beyond loopback is served without TLS).
    #[arg(long, default_value = "127.0.0.1:49982")]
    pub listen: String,
    /// The image an E2B `base` template means (default: the sandbox's own default).
    #[arg(long)]
    pub base_image: Option<String>,
    #[command(flatten)]
    pub ceiling: CeilingArgs,
    /// What a buffered exec keeps of each stream, and the largest file a read returns.
    #[arg(long, value_parser = parse_size, default_value = "16M")]
    pub max_output: u64,
    /// The longest a command runs (and its default).
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    pub timeout: Duration,
}

#[derive(Debug, Subcommand)]
pub enum ServeWhat {
    /// Print the `export` lines that point clients at the running server (`eval "$(tinybox serve env)"`).
    Env,
}

fn refuse(line: String) -> Result<u8, Error> {
    eprintln!("tinybox: {line}");
    Ok(2)
}

impl ServeCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        if let Some(ServeWhat::Env) = self.what {
            return env(&app.store_dir);
        }
        let addr: SocketAddr = match self.listen.parse() {
            Ok(a) => a,
            Err(_) => return refuse(format!("--listen {} is not ADDRESS:PORT (like 127.0.0.1:49982)", self.listen)),
        };
        if !addr.ip().is_loopback() {
            return refuse(format!(
                "--listen {addr} is beyond loopback, which is served only with TLS and this server has none: listen on 127.0.0.1 (put a TLS proxy in front to reach it from elsewhere)"
            ));
        }
        let token = match Token::load_or_create(&app.store_dir) {
            Ok(t) => t,
            Err(e) => return refuse(e.to_string()),
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Error::io(format!("cannot listen on {addr} (--listen)"), e))?;
        let bound = listener.local_addr().map_err(|e| Error::io("cannot read the listening address", e))?;
        let mut engine = Tinybox::open(&app.store_dir)?;
        engine.set_verifier(Arc::new(crate::verifier::Kit { json: true }));
        let config = Config {
            ceiling: self.ceiling.ceiling(),
            max_output: self.max_output,
            timeout: self.timeout,
            base_image: self.base_image,
        };
        let api = Api::new(Arc::new(engine), config, token);
        let url = format!("http://{bound}");
        let record = serde_json::json!({ "url": url, "pid": std::process::id() });
        let address_file = app.store_dir.join(ADDRESS_FILE);
        std::fs::write(&address_file, record.to_string())
            .map_err(|e| Error::io(format!("cannot write {}", address_file.display()), e))?;
        // The first line of stdout is the address, for whoever started us.
        println!("{url}");
        eprintln!(
            "tinybox: serving the HTTP API and the E2B protocol on {url}; `tinybox serve env` prints the settings"
        );
        // The boxes go before the connections are waited for: a stream of a
        // command still running in one ends when its box does.
        let leaving = api.clone();
        let shutdown = async move {
            super::daemon::shutdown().await;
            leaving.remove_all().await;
        };
        let served = axum::serve(listener, api.router()).with_graceful_shutdown(shutdown).await;
        let _ = std::fs::remove_file(&address_file);
        api.remove_all().await;
        api.engine.close().await;
        served.map_err(|e| Error::io("the API server stopped", e))?;
        Ok(0)
    }
}

/// The running server's settings as `export` lines.
fn env(store_dir: &Path) -> Result<u8, Error> {
    let path = store_dir.join(ADDRESS_FILE);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return refuse(format!(
            "no API server runs for the store {}: start one with `tinybox serve`",
            store_dir.display()
        ));
    };
    let record: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let (Some(url), Some(pid)) = (record["url"].as_str(), record["pid"].as_u64()) else {
        return refuse(format!(
            "{} is not a server's address record: remove it and start `tinybox serve`",
            path.display()
        ));
    };
    if !Path::new(&format!("/proc/{pid}")).exists() {
        return refuse(format!(
            "the API server that wrote {} (pid {pid}) is gone: start one with `tinybox serve`",
            path.display()
        ));
    }
    let token = match Token::load_or_create(store_dir) {
        Ok(t) => t,
        Err(e) => return refuse(e.to_string()),
    };
    let key = token.e2b_key();
    for (name, value) in [
        ("TINYBOX_API_URL", url),
        ("TINYBOX_API_TOKEN", token.as_str()),
        ("E2B_API_URL", url),
        ("E2B_SANDBOX_URL", url),
        ("E2B_API_KEY", key.as_str()),
    ] {
        println!("export {name}={value}");
    }
    Ok(0)
}
