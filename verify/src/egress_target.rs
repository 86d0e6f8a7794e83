//! The egress target: the caller's own test services the allowlist claims
//! (`allowlist.rs`) are probed against, read from the JSON file
//! `--egress-target FILE` names (docs/specs/conformance.md).

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

/// The test services an allowlist box is probed against, all the caller's:
/// a JSON object in the file `--egress-target` names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressTarget {
    /// The DNS server the proxy resolves with (`TINYBOX_EGRESS_RESOLVER`
    /// must name it); the box must not reach it.
    pub dns: SocketAddr,
    /// The test host's address: `allowed_name` resolves to it, and it
    /// serves HTTP on `http_port` and TLS on `https_port`.
    pub test_host: IpAddr,
    pub allowed_name: String,
    pub http_port: u16,
    /// A TLS server (any certificate, a self-signed one will do).
    pub https_port: u16,
    /// A name the DNS server resolves (to the test host) that the kit never lists.
    pub refused_name: String,
    /// A name the DNS server resolves to a private or loopback address; the
    /// kit lists it by name.
    pub rebind_name: String,
    /// An address the kit never lists, for the address-literal probe.
    pub unlisted_address: IpAddr,
    /// A path on `allowed_name:http_port` answering a redirect to
    /// `http://refused_name:http_port/`.
    pub redirect_path: String,
}

/// Why a target file cannot be used, in one line.
#[derive(Debug, Clone, thiserror::Error)]
#[error("egress target {path}: {why}")]
pub struct TargetError {
    pub path: String,
    pub why: String,
}

fn plain_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
}

impl EgressTarget {
    /// Reads and checks the target file at `path`.
    pub fn from_file(path: &std::path::Path) -> Result<EgressTarget, TargetError> {
        let fail = |why: String| TargetError { path: path.display().to_string(), why };
        let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
        let target: EgressTarget = serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?;
        target.check().map_err(fail)?;
        Ok(target)
    }

    fn check(&self) -> Result<(), String> {
        for (field, name) in [
            ("allowed_name", &self.allowed_name),
            ("refused_name", &self.refused_name),
            ("rebind_name", &self.rebind_name),
        ] {
            if !plain_name(name) {
                return Err(format!("{field} {name:?} must be a host name of letters, digits, dots and dashes"));
            }
        }
        let path_ok = self.redirect_path.starts_with('/')
            && self.redirect_path.bytes().all(|b| b.is_ascii_alphanumeric() || b"/-._".contains(&b));
        if !path_ok {
            return Err(format!(
                "redirect_path {:?} must start with / and hold only letters, digits and /-._",
                self.redirect_path
            ));
        }
        Ok(())
    }

    /// The allowlist of the kit's box: the allowed and rebinding names on
    /// their ports, and the test host's address (a private test host is
    /// reached through a name only when its address is listed too, ADR 0020;
    /// the rebinding name's address is not).
    pub fn entries(&self) -> Vec<String> {
        let host = match self.test_host {
            IpAddr::V4(a) => a.to_string(),
            IpAddr::V6(a) => format!("[{a}]"),
        };
        vec![
            format!("{}:{}", self.allowed_name, self.http_port),
            format!("{}:{}", self.allowed_name, self.https_port),
            format!("{}:{}", self.rebind_name, self.http_port),
            format!("{host}:{}", self.http_port),
            format!("{host}:{}", self.https_port),
        ]
    }

    pub(super) fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.http_port)
    }
}
