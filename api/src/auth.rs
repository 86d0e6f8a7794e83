//! The server's token: made on first start (32 random bytes, hex) and kept
//! 0600 in the store, so every client of this store's server can read it
//! from there and nobody else can. Every route asks for it, in the header
//! its protocol uses: `Authorization: Bearer` (tinybox's own), `X-API-KEY`
//! (E2B's control plane), `X-Access-Token` (envd's data plane, given out
//! as the sandbox's `envdAccessToken`).

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::listen::Peer;
use crate::{Api, ApiError};

/// The token's file in the store.
pub const TOKEN_FILE: &str = "api-token";

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot {what} the API token {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the API token {path} is readable by others (mode {mode:o}): it must be 0600; chmod 600 it or remove it to have a new one made"
    )]
    Exposed { path: PathBuf, mode: u32 },
    #[error("the API token {path} is not 64 hex digits: remove it to have a new one made")]
    Malformed { path: PathBuf },
}

/// A server's bearer token.
#[derive(Clone)]
pub struct Token(Arc<str>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// The store's token, made (0600) when there is none yet.
    pub fn load_or_create(store_dir: &Path) -> Result<Token, TokenError> {
        let path = store_dir.join(TOKEN_FILE);
        let io = |what, source| TokenError::Io { what, path: path.clone(), source };
        match std::fs::File::open(&path) {
            Ok(mut file) => {
                let mode = file.metadata().map_err(|e| io("read", e))?.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    return Err(TokenError::Exposed { path, mode });
                }
                let mut text = String::new();
                file.read_to_string(&mut text).map_err(|e| io("read", e))?;
                let text = text.trim();
                if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(TokenError::Malformed { path });
                }
                Ok(Token(text.into()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut raw = [0u8; 32];
                std::fs::File::open("/dev/urandom")
                    .and_then(|mut r| r.read_exact(&mut raw))
                    .map_err(|e| io("make", e))?;
                let text: String = raw.iter().map(|b| format!("{b:02x}")).collect();
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                    .map_err(|e| io("write", e))?;
                file.write_all(text.as_bytes()).map_err(|e| io("write", e))?;
                Ok(Token(text.into()))
            }
            Err(e) => Err(io("read", e)),
        }
    }

    pub fn from_text(text: &str) -> Token {
        Token(text.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The token as an E2B API key (`E2B_API_KEY`).
    pub fn e2b_key(&self) -> String {
        format!("{E2B_KEY_PREFIX}{}", self.0)
    }

    /// Compares in time independent of where the two first differ.
    pub fn matches(&self, given: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), given.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

/// The token a request carries, in whichever header its protocol uses.
fn presented(req: &Request) -> Option<&str> {
    let h = req.headers();
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
    if let Some(auth) = text("authorization")
        && let Some(bearer) = auth.strip_prefix("Bearer ")
    {
        return Some(bearer.trim());
    }
    // E2B's key is the token behind `e2b_`: some SDK versions refuse a key
    // without that prefix before sending it.
    text("x-api-key").or_else(|| text("x-access-token")).map(|k| {
        let k = k.trim();
        k.strip_prefix(E2B_KEY_PREFIX).unwrap_or(k)
    })
}

/// What `E2B_API_KEY` puts before the token.
pub const E2B_KEY_PREFIX: &str = "e2b_";

pub async fn check(State(api): State<Arc<Api>>, req: Request, next: Next) -> Response {
    // On the socket the kernel's word on the peer's uid is the credential
    // (ADR 0045); a token sent there anyway must still be the right one.
    let socket_uid = match req.extensions().get::<ConnectInfo<Peer>>() {
        Some(ConnectInfo(Peer::Socket { uid })) => Some(*uid),
        _ => None,
    };
    let refusal = match (socket_uid, presented(&req)) {
        (Some(uid), given) => match socket_refusal(uid) {
            Some(why) => return refuse(&req, Refusal::Forbidden(why)),
            None if given.is_none_or(|t| api.token.matches(t)) => return next.run(req).await,
            None => WRONG_TOKEN,
        },
        (None, Some(t)) if api.token.matches(t) => return next.run(req).await,
        (None, Some(_)) => WRONG_TOKEN,
        (None, None) => "no API token: send `Authorization: Bearer TOKEN` (`tinybox serve env` prints it)",
    };
    refuse(&req, Refusal::Unauthorized(refusal))
}

const WRONG_TOKEN: &str = "the API token is wrong: `tinybox serve env` prints the one this server takes";

/// Why a socket caller of `uid` is not let in: only the server's own uid is.
pub fn socket_refusal(uid: Option<u32>) -> Option<String> {
    let me = rustix::process::geteuid().as_raw();
    match uid {
        Some(u) if u == me => None,
        Some(u) => Some(format!(
            "uid {u} is not let in: on the API socket only the uid the server runs as ({me}) is, and no token changes that"
        )),
        None => Some(format!(
            "the kernel told no uid for this connection: on the API socket only the uid the server runs as ({me}) is let in"
        )),
    }
}

enum Refusal {
    Unauthorized(&'static str),
    Forbidden(String),
}

/// The refusal in the shape of the route's protocol.
fn refuse(req: &Request, refusal: Refusal) -> Response {
    let (status, line) = match &refusal {
        Refusal::Unauthorized(why) => (401, (*why).to_owned()),
        Refusal::Forbidden(why) => (403, why.clone()),
    };
    let path = req.uri().path();
    if crate::e2b::is_control_path(path) {
        return crate::e2b::control::E2bError::new(status, line).into_response();
    }
    if crate::e2b::is_rpc_path(path) {
        return match refusal {
            Refusal::Unauthorized(why) => crate::e2b::connect::RpcError::unauthenticated(why).into_response(),
            Refusal::Forbidden(why) => {
                crate::e2b::connect::RpcError::new("permission_denied", format!("tinybox: {why}")).into_response()
            }
        };
    }
    match refusal {
        Refusal::Unauthorized(why) => ApiError::Unauthorized(why).into_response(),
        Refusal::Forbidden(why) => ApiError::Forbidden(why).into_response(),
    }
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
