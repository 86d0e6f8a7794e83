//! How an allowlisted box reaches its egress proxy (ADR 0020): core runs
//! one proxy per box on the box's host, listening on a UNIX socket, and
//! tells the sandbox where that socket and the relay program are. The
//! sandbox gives the box no network but loopback, makes both visible
//! inside, and runs each command under the relay, which listens on the
//! box's `127.0.0.1:port` and forwards every connection to the socket.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The port the relay listens on in a box, unless core says otherwise.
pub const DEFAULT_RELAY_PORT: u16 = 3128;

/// The CA bundle's file name in the proxy's directory, beside its socket:
/// the system's roots and the box's own CA, written by a proxy that
/// injects secrets (ADR 0032). Absent for a box without secrets.
pub const CA_BUNDLE: &str = "ca-bundle.pem";

/// Where a box with secrets sees [`CA_BUNDLE`], read-only, on every
/// sandbox declaring `secret_injection`: docker binds the proxy's whole
/// directory at `/run/tinybox/egress`, namespace binds this one file there.
pub const CA_BUNDLE_IN_BOX: &str = "/run/tinybox/egress/ca-bundle.pem";

/// The variables real clients read for their trusted roots, each set to
/// [`CA_BUNDLE_IN_BOX`] in a box with secrets.
pub const CA_VARIABLES: [&str; 7] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "DENO_CERT",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
];

/// Sent with `sandbox.create` and every `sandbox.exec` of a box whose
/// network is `allowlist`, and only to a sandbox declaring `network_allowlist`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressEndpoint {
    /// The proxy's UNIX socket on the box's host.
    pub socket: PathBuf,
    /// The relay program on the box's host (`tinybox-egress`).
    pub relay: PathBuf,
    /// The port the relay listens on, on the box's loopback.
    pub port: u16,
}

impl EgressEndpoint {
    /// The argv that runs `command` under the relay, with the relay and the
    /// socket at the paths the box sees them at:
    /// `RELAY relay --listen 127.0.0.1:PORT --to SOCKET -- COMMAND...`.
    /// The relay binds before it starts the command and ends with its status.
    pub fn relay_argv(&self, relay_in_box: &str, socket_in_box: &str, command: &[String]) -> Vec<String> {
        let mut argv = vec![
            relay_in_box.to_owned(),
            "relay".to_owned(),
            "--listen".to_owned(),
            format!("127.0.0.1:{}", self.port),
            "--to".to_owned(),
            socket_in_box.to_owned(),
            "--".to_owned(),
        ];
        argv.extend(command.iter().cloned());
        argv
    }

    /// The CA bundle on the box's host: [`CA_BUNDLE`] beside the socket.
    pub fn ca_bundle(&self) -> PathBuf {
        self.socket.with_file_name(CA_BUNDLE)
    }

    /// The variables pointing clients at the box's CA bundle.
    pub fn ca_env() -> Vec<(String, String)> {
        CA_VARIABLES.iter().map(|name| ((*name).to_owned(), CA_BUNDLE_IN_BOX.to_owned())).collect()
    }

    /// The proxy variables a command in the box gets: the upper- and
    /// lowercase spellings clients read, and loopback kept off the proxy.
    pub fn proxy_env(&self) -> Vec<(String, String)> {
        let url = format!("http://127.0.0.1:{}", self.port);
        let mut env = Vec::new();
        for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
            env.push((name.to_owned(), url.clone()));
        }
        for name in ["NO_PROXY", "no_proxy"] {
            env.push((name.to_owned(), "localhost,127.0.0.1,::1".to_owned()));
        }
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint() -> EgressEndpoint {
        EgressEndpoint {
            socket: "/s/egress/default-box-1/proxy.sock".into(),
            relay: "/bin/tinybox-egress".into(),
            port: 3128,
        }
    }

    #[test]
    fn the_relay_argv_binds_the_port_and_ends_with_the_command_verbatim() {
        let argv = endpoint().relay_argv(
            "/run/tinybox/relay",
            "/run/tinybox/egress.sock",
            &["sh".into(), "-c".into(), "a; b".into()],
        );
        assert_eq!(
            argv,
            [
                "/run/tinybox/relay",
                "relay",
                "--listen",
                "127.0.0.1:3128",
                "--to",
                "/run/tinybox/egress.sock",
                "--",
                "sh",
                "-c",
                "a; b"
            ]
        );
    }

    #[test]
    fn the_proxy_env_names_the_relay_and_keeps_loopback_direct() {
        let env: BTreeMap<String, String> = endpoint().proxy_env().into_iter().collect();
        assert_eq!(env["https_proxy"], "http://127.0.0.1:3128");
        assert_eq!(env["HTTP_PROXY"], "http://127.0.0.1:3128");
        assert_eq!(env["no_proxy"], "localhost,127.0.0.1,::1");
        assert_eq!(env.len(), 6);
    }

    use std::collections::BTreeMap;

    #[test]
    fn it_travels_as_three_fields() {
        let json = serde_json::to_value(endpoint()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"socket": "/s/egress/default-box-1/proxy.sock", "relay": "/bin/tinybox-egress", "port": 3128})
        );
    }
}
