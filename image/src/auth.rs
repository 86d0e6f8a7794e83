//! Registry credentials, read where every container tool reads them:
//! `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`. Only
//! `auths` entries with an `auth` (base64 `user:password`) are used; a
//! registry whose credentials a helper keeps is refused by name. What is
//! read here lives only in memory for one pull: never in the store, never
//! in a log (the type's Debug hides the password).

use std::collections::BTreeMap;
use std::path::PathBuf;

use base64::Engine as _;

use crate::error::{ImageError, Result};

/// Credentials for one registry.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    Anonymous,
    Basic { user: String, password: String },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Anonymous => f.write_str("Anonymous"),
            Credentials::Basic { user, .. } => write!(f, "Basic({user}, <hidden>)"),
        }
    }
}

#[derive(Debug, Default, serde::Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: BTreeMap<String, String>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
}

/// Where the docker config is looked for.
pub fn config_path() -> PathBuf {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir).join("config.json");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/"));
    home.join(".docker/config.json")
}

/// The credentials the docker config gives `registry` (`host[:port]`).
pub fn for_registry(registry: &str) -> Result<Credentials> {
    let path = config_path();
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Credentials::Anonymous),
        Err(e) => return Err(ImageError::DockerConfig { path, detail: e.to_string() }),
    };
    let config: DockerConfig = serde_json::from_slice(&bytes)
        .map_err(|e| ImageError::DockerConfig { path: path.clone(), detail: e.to_string() })?;
    let shown = path.display().to_string();
    if let Some(helper) = config.cred_helpers.iter().find(|(k, _)| key_names(k, registry)).map(|(_, v)| v) {
        return Err(ImageError::CredentialHelper { registry: registry.into(), helper: helper.clone(), config: shown });
    }
    let entry = config.auths.iter().find(|(k, _)| key_names(k, registry)).map(|(_, v)| v);
    match entry.and_then(|e| e.auth.as_deref()).filter(|a| !a.is_empty()) {
        Some(auth) => decode(auth).ok_or_else(|| ImageError::DockerConfig {
            path,
            detail: format!("the auth for {registry} is not base64 of user:password"),
        }),
        // Logged in through a store: the entry is there, empty, and the secret is in the helper.
        None if entry.is_some() && config.creds_store.is_some() => Err(ImageError::CredentialHelper {
            registry: registry.into(),
            helper: config.creds_store.unwrap_or_default(),
            config: shown,
        }),
        None => Ok(Credentials::Anonymous),
    }
}

fn decode(auth: &str) -> Option<Credentials> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(auth.trim()).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (user, password) = text.split_once(':')?;
    Some(Credentials::Basic { user: user.to_owned(), password: password.to_owned() })
}

/// Whether a config key (`host:port`, `https://host:port/v2/`, or docker
/// hub's historical `https://index.docker.io/v1/`) names `registry`.
fn key_names(key: &str, registry: &str) -> bool {
    let bare = key.trim_start_matches("https://").trim_start_matches("http://");
    let host = bare.split('/').next().unwrap_or(bare);
    let hub = |r: &str| matches!(r, "docker.io" | "index.docker.io" | "registry-1.docker.io");
    host == registry || (hub(host) && hub(registry))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_with_or_without_a_scheme() {
        assert!(key_names("127.0.0.1:5000", "127.0.0.1:5000"));
        assert!(key_names("https://127.0.0.1:5000/v2/", "127.0.0.1:5000"));
        assert!(key_names("https://index.docker.io/v1/", "docker.io"));
        assert!(!key_names("127.0.0.1:5001", "127.0.0.1:5000"));
    }

    #[test]
    fn an_auth_decodes_and_its_password_never_prints() {
        let c = decode("YWxpY2U6czNjcmV0").unwrap();
        assert_eq!(c, Credentials::Basic { user: "alice".into(), password: "s3cret".into() });
        assert!(!format!("{c:?}").contains("s3cret"));
        assert!(decode("not base64!").is_none());
    }
}
