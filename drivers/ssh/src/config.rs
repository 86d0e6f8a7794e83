//! An ssh host's configuration (a `HostEntry.config`, sent in the
//! handshake) and the `ssh` argument vector it makes. Nothing here starts
//! with `-` that did not come from this file: destinations, users and paths
//! that would read as options are refused, and no extra options are taken.

use serde::{Deserialize, Serialize};
use tinybox_sdk::protocol::DriverError;

/// How to reach one machine with the system `ssh`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshConfig {
    /// As ssh takes it: a host, `user@host`, or an alias from ~/.ssh/config.
    pub destination: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A private key file on the inner host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_file: Option<String>,
    /// Accept (and record) an unknown host key; a changed one is still refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accept_new_host_key: bool,
    /// A known_hosts file on the inner host, instead of the user's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_hosts_file: Option<String>,
    /// Share one connection between commands (ssh's ControlMaster), kept
    /// for [`PERSIST_SECS`] after the last one. Default on.
    #[serde(default = "yes", skip_serializing_if = "Clone::clone")]
    pub multiplex: bool,
}

fn yes() -> bool {
    true
}

/// How long a shared connection outlives its last command.
pub const PERSIST_SECS: u32 = 60;

/// Where shared-connection sockets live on the inner host (made 0700 by the driver).
pub const CONTROL_DIR: &str = ".ssh/tinybox";

impl SshConfig {
    /// Reads and checks the handshake's configuration.
    pub fn from_json(v: &serde_json::Value) -> Result<SshConfig, DriverError> {
        if v.is_null() {
            return Err(DriverError::invalid(
                "this ssh host has no configuration; add one with `tinybox host add NAME --ssh DEST` or use --host ssh:DEST",
            ));
        }
        let cfg: SshConfig = serde_json::from_value(v.clone())
            .map_err(|e| DriverError::invalid(format!("the ssh host's configuration is not valid: {e}")))?;
        cfg.check()?;
        Ok(cfg)
    }

    /// The rules: nothing that ssh could read as an option, no control
    /// characters, and paths that ssh's own `-o` parser keeps whole.
    pub fn check(&self) -> Result<(), DriverError> {
        word("destination", &self.destination)?;
        if let Some(user) = &self.user {
            word("user", user)?;
            if user.contains('@') {
                return Err(DriverError::invalid(format!("ssh user {user:?} contains '@'")));
            }
        }
        if self.port == Some(0) {
            return Err(DriverError::invalid("ssh port 0 is not a port; use 1-65535"));
        }
        if let Some(file) = &self.identity_file {
            word("identity file", file)?;
        }
        if let Some(file) = &self.known_hosts_file {
            word("known_hosts file", file)?;
            // It travels inside `-o UserKnownHostsFile=...`, which ssh splits on
            // whitespace and reads quotes in.
            if file.chars().any(|c| c.is_whitespace() || c == '"' || c == '\'') {
                return Err(DriverError::invalid(format!(
                    "known_hosts file {file:?} contains whitespace or a quote, which ssh's -o would split"
                )));
            }
        }
        Ok(())
    }

    /// `ssh OPTIONS -- DEST REMOTE`: the command line for the inner host,
    /// sharing a connection when `multiplex` (the caller's decision: the
    /// configuration asked for it and the socket directory exists).
    pub fn argv_with(&self, remote: &str, multiplex: bool, terminal: bool) -> Vec<String> {
        // -tt: a terminal on the remote side even though ssh's own stdin is
        // one only because its host made it for this run; ssh mirrors that
        // terminal's size and sends a window change on every SIGWINCH.
        let tty = if terminal { "-tt" } else { "-T" };
        let mut v: Vec<String> = ["ssh", tty, "-a", "-x", "-o", "BatchMode=yes", "-o"].map(String::from).to_vec();
        v.push(
            if self.accept_new_host_key { "StrictHostKeyChecking=accept-new" } else { "StrictHostKeyChecking=yes" }
                .into(),
        );
        if let Some(port) = self.port {
            v.extend(["-p".into(), port.to_string()]);
        }
        if let Some(user) = &self.user {
            v.extend(["-l".into(), user.clone()]);
        }
        if let Some(file) = &self.identity_file {
            v.extend(["-i".into(), file.clone()]);
        }
        if let Some(file) = &self.known_hosts_file {
            v.extend(["-o".into(), format!("UserKnownHostsFile={file}")]);
        }
        if multiplex {
            // One socket per configuration: a host entry with other keys or
            // another known_hosts never rides on this one's connection.
            v.extend(["-o".into(), "ControlMaster=auto".into(), "-o".into()]);
            v.push(format!("ControlPath=~/{CONTROL_DIR}/%C-{}", self.identity_hash()));
            v.extend(["-o".into(), format!("ControlPersist={PERSIST_SECS}")]);
        }
        v.extend(["--".into(), self.destination.clone(), remote.to_owned()]);
        v
    }

    /// Ten hex digits naming this configuration (everything that decides
    /// where, as whom and with which trust the connection is made).
    fn identity_hash(&self) -> String {
        let json = serde_json::to_string(self).expect("serializable");
        blake3::hash(json.as_bytes()).to_hex()[..10].to_owned()
    }

    /// How the destination is named in messages.
    pub fn label(&self) -> String {
        let user = self.user.as_ref().map(|u| format!("{u}@")).unwrap_or_default();
        let port = self.port.map(|p| format!(" port {p}")).unwrap_or_default();
        format!("{user}{}{port}", self.destination)
    }
}

fn word(what: &str, value: &str) -> Result<(), DriverError> {
    if value.is_empty() {
        return Err(DriverError::invalid(format!("ssh {what} is empty")));
    }
    if value.starts_with('-') {
        return Err(DriverError::invalid(format!(
            "ssh {what} {value:?} starts with '-', which ssh would read as an option; it is refused"
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(DriverError::invalid(format!("ssh {what} {value:?} contains a control character")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    impl SshConfig {
        fn argv(&self, remote: &str) -> Vec<String> {
            self.argv_with(remote, self.multiplex, false)
        }
    }

    fn cfg(dest: &str) -> SshConfig {
        SshConfig {
            destination: dest.into(),
            port: None,
            user: None,
            identity_file: None,
            accept_new_host_key: false,
            known_hosts_file: None,
            multiplex: false,
        }
    }

    #[test]
    fn the_argv_is_batch_mode_with_strict_host_keys_and_ends_the_options() {
        assert_eq!(
            cfg("builder").argv("exec true"),
            [
                "ssh",
                "-T",
                "-a",
                "-x",
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=yes",
                "--",
                "builder",
                "exec true"
            ]
        );
        let full = SshConfig {
            destination: "h.example".into(),
            port: Some(2222),
            user: Some("me".into()),
            identity_file: Some("/k/id".into()),
            accept_new_host_key: true,
            known_hosts_file: Some("/k/known".into()),
            multiplex: false,
        };
        assert_eq!(
            full.argv("x"),
            [
                "ssh",
                "-T",
                "-a",
                "-x",
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=accept-new",
                "-p",
                "2222",
                "-l",
                "me",
                "-i",
                "/k/id",
                "-o",
                "UserKnownHostsFile=/k/known",
                "--",
                "h.example",
                "x"
            ]
        );
        assert_eq!(full.label(), "me@h.example port 2222");
        // Never `no`, whatever is configured.
        assert!(!full.argv("x").iter().any(|a| a.ends_with("=no")));
    }

    #[test]
    fn anything_that_reads_as_an_option_is_refused() {
        for bad in ["-oProxyCommand=evil", "-p", "", "a\nb"] {
            assert!(cfg(bad).check().is_err(), "{bad:?}");
        }
        let mut c = cfg("ok");
        c.user = Some("-l".into());
        assert!(c.check().unwrap_err().message.contains("starts with '-'"));
        c.user = Some("a@b".into());
        assert!(c.check().is_err());
        let mut c = cfg("ok");
        c.identity_file = Some("-i".into());
        assert!(c.check().is_err());
        let mut c = cfg("ok");
        c.known_hosts_file = Some("/a b".into());
        assert!(c.check().unwrap_err().message.contains("whitespace"));
        let mut c = cfg("ok");
        c.port = Some(0);
        assert!(c.check().is_err());
    }

    #[test]
    fn configuration_is_strict_json() {
        assert!(SshConfig::from_json(&serde_json::Value::Null).unwrap_err().message.contains("no configuration"));
        let extra = serde_json::json!({"destination": "h", "options": ["-oProxyCommand=x"]});
        assert!(SshConfig::from_json(&extra).unwrap_err().message.contains("unknown field"));
        let ok = SshConfig::from_json(&serde_json::json!({"destination": "h", "port": 22})).unwrap();
        assert_eq!(ok.port, Some(22));
        assert!(!ok.accept_new_host_key);
        assert!(ok.multiplex, "connections are shared unless a host says otherwise");
    }

    #[test]
    fn a_shared_connection_is_per_configuration() {
        let mut a = cfg("h");
        a.multiplex = true;
        let argv = a.argv("x");
        let path = argv.iter().find(|s| s.starts_with("ControlPath=")).unwrap().clone();
        assert!(
            path.starts_with("ControlPath=~/.ssh/tinybox/%C-")
                && path.len() == "ControlPath=~/.ssh/tinybox/%C-".len() + 10
        );
        assert!(argv.contains(&"ControlMaster=auto".to_owned()) && argv.contains(&"ControlPersist=60".to_owned()));
        let mut b = a.clone();
        b.known_hosts_file = Some("/other".into());
        assert!(!b.argv("x").contains(&path), "another known_hosts, another connection");
        assert!(!a.argv_with("x", false, false).iter().any(|s| s.starts_with("Control")));
        // Options still end before the destination.
        assert_eq!(&argv[argv.len() - 3..], ["--", "h", "x"]);
    }
}
