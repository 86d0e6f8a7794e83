//! `tinybox serve`: the HTTP API and the E2B protocol (tinybox-api) on a
//! loopback port, and `tinybox serve env`, the `export` lines that point
//! a client (tinybox's own, or any E2B SDK) at the running server. The
//! operator's flags are the ceiling every API caller asks under, as with
//! `tinybox mcp`; the boxes the server made go when it stops.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use tinybox_api::listen::Peer;
use tinybox_api::{Api, Config, Token};
use tinybox_core::{Error, Tinybox};

use super::App;
use crate::args::{CeilingArgs, parse_duration, parse_size};

/// Where a running server says where it listens (read by `serve env`).
const ADDRESS_FILE: &str = "api.json";

/// The socket `--socket` with no path makes, in the store.
const SOCKET_FILE: &str = "api.sock";

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ServeCmd {
    #[command(subcommand)]
    pub what: Option<ServeWhat>,
    /// The address to listen on: a loopback one, or any with --tls-cert and --tls-key (nothing beyond loopback is served without TLS).
    #[arg(long, default_value = "127.0.0.1:49982")]
    pub listen: String,
    /// Serve TLS on --listen with this PEM certificate chain (leaf first); needs --tls-key.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve on a UNIX socket too, beside --listen (default path: the store's api.sock): 0600, and only this user's uid is let in, with no token.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "")]
    pub socket: Option<PathBuf>,
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
        // Everything is checked before anything is bound or made in the store.
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => match tinybox_api::listen::tls_config(cert, key) {
                Ok(c) => Some(c),
                Err(e) => return refuse(e.to_string()),
            },
            _ => None,
        };
        if !addr.ip().is_loopback() && tls.is_none() {
            return refuse(format!(
                "--listen {addr} is beyond loopback, which is served only with TLS: give --tls-cert and --tls-key, or listen on 127.0.0.1"
            ));
        }
        let socket_path = self.socket.as_ref().map(|p| match p.as_os_str().is_empty() {
            true => app.store_dir.join(SOCKET_FILE),
            false => std::path::absolute(p).unwrap_or_else(|_| p.clone()),
        });
        let tcp = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Error::io(format!("cannot listen on {addr} (--listen)"), e))?;
        let bound = tcp.local_addr().map_err(|e| Error::io("cannot read the listening address", e))?;
        let socket = match socket_path.as_deref().map(tinybox_api::listen::bind_socket).transpose() {
            Ok(s) => s,
            Err(e) => return refuse(e.to_string()),
        };
        let forget_socket = || {
            if let Some(p) = &socket_path {
                let _ = std::fs::remove_file(p);
            }
        };
        let token = match Token::load_or_create(&app.store_dir) {
            Ok(t) => t,
            Err(e) => {
                forget_socket();
                return refuse(e.to_string());
            }
        };
        let mut engine = Tinybox::open(&app.store_dir)?;
        engine.set_verifier(Arc::new(crate::verifier::Kit { json: true }));
        let config = Config {
            ceiling: self.ceiling.ceiling(),
            max_output: self.max_output,
            timeout: self.timeout,
            base_image: self.base_image,
        };
        let api = Api::new(Arc::new(engine), config, token);
        let url = format!("{}://{bound}", if tls.is_some() { "https" } else { "http" });
        let record = serde_json::json!({ "url": url, "pid": std::process::id(), "socket": socket_path });
        let address_file = app.store_dir.join(ADDRESS_FILE);
        std::fs::write(&address_file, record.to_string())
            .map_err(|e| Error::io(format!("cannot write {}", address_file.display()), e))?;
        // The first line of stdout is the address, for whoever started us.
        println!("{url}");
        let on_socket = socket_path.as_ref().map(|p| format!(" and the socket {}", p.display())).unwrap_or_default();
        eprintln!(
            "tinybox: serving the HTTP API and the E2B protocol on {url}{on_socket}; `tinybox serve env` prints the settings"
        );
        // The boxes go before the connections are waited for: a stream of a
        // command still running in one ends when its box does.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let leaving = api.clone();
        tokio::spawn(async move {
            super::daemon::shutdown().await;
            leaving.remove_all().await;
            let _ = stop_tx.send(true);
        });
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let service = || api.router().into_make_service_with_connect_info::<Peer>();
        let on_port = async {
            match tls {
                Some(config) => {
                    let listener = tinybox_api::listen::TlsListener::new(tcp, config)?;
                    axum::serve(listener, service()).with_graceful_shutdown(stopped(stop_rx.clone())).await
                }
                None => axum::serve(tcp, service()).with_graceful_shutdown(stopped(stop_rx.clone())).await,
            }
        };
        let on_socket = async {
            match socket {
                Some(s) => axum::serve(s, service()).with_graceful_shutdown(stopped(stop_rx.clone())).await,
                None => Ok(()),
            }
        };
        let (port_served, socket_served) = tokio::join!(on_port, on_socket);
        let _ = std::fs::remove_file(&address_file);
        forget_socket();
        api.remove_all().await;
        api.engine.close().await;
        port_served.and(socket_served).map_err(|e| Error::io("the API server stopped", e))?;
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
    // A socket caller needs no token: the socket and curl's way to it.
    if let Some(socket) = record["socket"].as_str() {
        println!("export TINYBOX_API_SOCKET={}", shell_quote(socket));
    }
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

/// `s` as one word for a POSIX shell.
fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+:@%".contains(&b)) {
        return s.to_owned();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}
