//! Flag groups shared by several verbs, and their conversion into the
//! core's types. Every parse error names the value and the rule.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use tinybox_core::Error;
use tinybox_core::hosts::HostRef;
use tinybox_core::model::{SandboxName, SnapshotId, TemplateName};
use tinybox_core::request::{self, CreateRequest, ExecOptions, NetworkChoice, Port, Size};

/// A `KEY=VALUE` pair.
pub fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("{s:?} is not KEY=VALUE with a non-empty KEY")),
    }
}

/// A sandbox-specific create option, `KEY=VALUE` (the value may be empty).
pub fn parse_option(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("{s:?} is not an option KEY=VALUE with a non-empty KEY")),
    }
}

/// `--secret`, `--secret-host`, `--secret-header`: `KEY=VALUE` with a
/// non-empty key; what the key and value must be is core's rule.
fn parse_secret_pair(what: &'static str) -> impl Fn(&str) -> Result<(String, String), String> + Clone {
    move |s: &str| match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("{s:?} is not {what}")),
    }
}

/// A span of time such as `500ms`, `90s`, `10m`: syntax only; how long a
/// command may be given is core's rule.
pub fn parse_span(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 90s, 10m, 1h ({e})"))
}

/// A duration such as `90s`, `10m`, `1h`, `2d`, of a second or more.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = parse_span(s)?;
    if d.as_secs() == 0 {
        return Err(format!("{s:?} is not positive; use at least 1s"));
    }
    Ok(d)
}

/// `HOST:GUEST`, or one port for both (core's rule).
pub fn parse_port(s: &str) -> Result<Port, String> {
    request::parse_port(s).map(|p| Port::Pair { host: p.host.into(), guest: p.guest.into() }).map_err(|e| e.to_string())
}

pub fn parse_size(s: &str) -> Result<u64, String> {
    tinybox_core::model::resources::parse_size(s)
}

/// A number of cores; whether it is a number a box can have is core's rule.
pub fn parse_cpus(s: &str) -> Result<f64, String> {
    s.parse::<f64>().map_err(|_| format!("{s:?} is not a number of cores like 1 or 0.5"))
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum NetworkArg {
    Deny,
    /// Public addresses only: never the host itself, private or local ranges (list exceptions with --allow-host ADDR).
    Egress,
    /// Only the --allow-host entries, through an egress proxy (implied by --allow-host).
    Allowlist,
}

impl From<NetworkArg> for NetworkChoice {
    fn from(n: NetworkArg) -> Self {
        match n {
            NetworkArg::Deny => NetworkChoice::Deny,
            NetworkArg::Egress => NetworkChoice::Egress,
            NetworkArg::Allowlist => NetworkChoice::Allowlist,
        }
    }
}

/// Where a box runs and what confines it.
#[derive(Debug, Clone, Args)]
pub struct PlacementArgs {
    /// Host the workspace runs on: a configured name, or ssh:DEST (default: local).
    #[arg(long, value_name = "HOST")]
    pub host: Option<HostRef>,
    /// Sandbox that confines the workspace (default: the strongest healthy one installed).
    #[arg(long, value_name = "SANDBOX")]
    pub sandbox: Option<SandboxName>,
    /// Host of a separate runner (the agent's side): a configured name, or ssh:DEST; default local.
    #[arg(long, value_name = "HOST")]
    pub runner_host: Option<HostRef>,
    /// Sandbox of a separate runner; default passthrough.
    #[arg(long, value_name = "SANDBOX")]
    pub runner_sandbox: Option<SandboxName>,
    /// Refuse any sandbox weaker than kernel isolation (the floor for untrusted code).
    #[arg(long)]
    pub untrusted: bool,
    /// Separates this store's boxes from another's on a shared daemon
    /// (default: "namespace" in the store's config.json, else "default").
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
}

/// What a box starts from, how long it lives, and what it may use.
#[derive(Debug, Clone, Args)]
pub struct BoxArgs {
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// Start from an OCI image.
    #[arg(long, value_name = "REF", group = "source")]
    pub image: Option<String>,
    /// Share a directory as the workspace (on a remote host: this machine's directory, synced there first).
    #[arg(long, value_name = "DIR", group = "source")]
    pub workspace: Option<PathBuf>,
    /// Start from a snapshot.
    #[arg(long, value_name = "ID", group = "source")]
    pub from_snapshot: Option<SnapshotId>,
    /// Start from a template (a named snapshot).
    #[arg(long, value_name = "NAME", group = "source")]
    pub from_template: Option<TemplateName>,
    /// Start from a git repository.
    #[arg(long, value_name = "URL", group = "source")]
    pub git: Option<String>,
    /// Destroy the box this long after creation (ephemeral; default 1h).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", conflicts_with = "persistent")]
    pub ttl: Option<Duration>,
    // Its help is `persistent_help`: the default cadence is core's.
    #[arg(long, value_parser = parse_duration, value_name = "INTERVAL", num_args = 0..=1, help = persistent_help())]
    pub persistent: Option<Option<Duration>>,
    /// Network policy (default: deny, where the sandbox can enforce it).
    #[arg(long, value_enum)]
    pub network: Option<NetworkArg>,
    /// Let the box reach this host through its egress proxy, and nothing else (repeatable): NAME, *.NAME (names below it), an address or a CIDR, each with an optional :PORT (default 80 and 443). With --network egress: an address or CIDR[:PORT] to let through the egress fence, which otherwise keeps the box from the host and private ranges.
    #[arg(long = "allow-host", value_name = "HOST[:PORT]")]
    pub allow_hosts: Vec<String>,
    /// A secret the box can use but never read: NAME=env:VAR, NAME=file:PATH or NAME=cmd:COMMAND (run with /bin/sh -c each time the value is needed; repeatable). The box's $NAME holds a placeholder; the egress proxy puts the real value in request headers to the hosts bound with --secret-host (needs --allow-host).
    #[arg(long = "secret", value_parser = parse_secret_pair("a secret NAME=SOURCE (env:VAR, file:PATH or cmd:COMMAND)"), value_name = "NAME=SOURCE")]
    pub secrets: Vec<(String, String)>,
    /// Put secret NAME's value in place of its placeholder on requests to HOST, a name on the allowlist (repeatable).
    #[arg(long = "secret-host", value_parser = parse_secret_pair("a binding NAME=HOST"), value_name = "NAME=HOST")]
    pub secret_hosts: Vec<(String, String)>,
    /// Set a whole header on requests to HOST, from a template naming secrets: HOST='Authorization: Bearer {NAME}' (repeatable).
    #[arg(long = "secret-header", value_parser = parse_secret_pair("a header HOST='Header: text {NAME}'"), value_name = "HOST=HEADER")]
    pub secret_headers: Vec<(String, String)>,
    /// CPU cores (may be fractional).
    #[arg(long, value_parser = parse_cpus, value_name = "N")]
    pub cpus: Option<f64>,
    /// Memory limit, e.g. 512M, 2G.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub memory: Option<u64>,
    /// Maximum number of processes.
    #[arg(long, value_name = "N")]
    pub pids: Option<u64>,
    /// Disk limit, e.g. 8G.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub disk: Option<u64>,
    /// Publish a port: HOST:GUEST (repeatable).
    #[arg(long = "port", value_parser = parse_port, value_name = "HOST:GUEST")]
    pub ports: Vec<Port>,
    /// microvm: hardware virtualization (kvm) or emulation (tcg, no hardware isolation); default: kvm when it works.
    #[arg(long, value_parser = ["kvm", "tcg"], value_name = "ACCEL")]
    pub accel: Option<String>,
    /// A sandbox-specific create option: KEY=VALUE (repeatable); a sandbox that does not take KEY refuses it.
    #[arg(long = "option", value_parser = parse_option, value_name = "KEY=VALUE")]
    pub options: Vec<(String, String)>,
    /// Take a ready box from this warm pool (`tinybox pool create`); flags left out are the pool's, and a request that differs from it is created cold.
    #[arg(long, value_name = "NAME")]
    pub pool: Option<String>,
    /// With --pool: refuse rather than create cold when no matching box is ready.
    #[arg(long, requires = "pool")]
    pub pool_only: bool,
}

/// `--persistent`'s help, naming core's default cadence.
fn persistent_help() -> String {
    let default = tinybox_core::model::Lifecycle::DEFAULT_AUTOSNAPSHOT.as_secs();
    format!("Keep the box until removed, snapshotting it on this cadence (default {default}s)")
}

/// Environment every command in a box starts with.
#[derive(Debug, Clone, Args)]
pub struct BoxEnvArgs {
    /// Environment for every command in the box: KEY=VALUE (repeatable).
    #[arg(long = "env", short = 'e', value_parser = parse_env, value_name = "KEY=VALUE")]
    pub env: Vec<(String, String)>,
}

impl BoxArgs {
    /// The request these flags make, field by field; every rule is core's.
    pub fn request(&self, env: &[(String, String)]) -> Result<CreateRequest, Error> {
        let p = &self.placement;
        Ok(CreateRequest {
            host: p.host.clone(),
            sandbox: p.sandbox.clone(),
            runner_host: p.runner_host.clone(),
            runner_sandbox: p.runner_sandbox.clone(),
            untrusted: p.untrusted,
            namespace: p.namespace.clone(),
            image: self.image.clone(),
            workspace: self.workspace.clone(),
            from_snapshot: self.from_snapshot.clone(),
            from_template: self.from_template.clone(),
            git: self.git.clone(),
            ttl_secs: self.ttl.map(|d| d.as_secs()),
            persistent: self.persistent.map(|_| true),
            // A bare --persistent leaves the cadence to core.
            autosnapshot_secs: self.persistent.flatten().map(|d| d.as_secs()),
            network: self.network.map(NetworkChoice::from),
            allow_hosts: self.allow_hosts.clone(),
            secrets: self.secrets.iter().cloned().collect(),
            secret_hosts: grouped(&self.secret_hosts),
            secret_headers: grouped(&self.secret_headers),
            cpus: self.cpus,
            memory: self.memory.map(Size::Bytes),
            pids: self.pids,
            disk: self.disk.map(Size::Bytes),
            ports: self.ports.clone(),
            env: env.iter().cloned().collect::<BTreeMap<_, _>>(),
            accel: self.accel.clone(),
            options: request::merge_options(self.options.iter().cloned(), None)?,
            pool: self.pool.clone(),
            pool_only: self.pool_only,
        })
    }
}

/// `KEY=VALUE` pairs as a map of each key's values, in order.
fn grouped(pairs: &[(String, String)]) -> BTreeMap<String, Vec<String>> {
    let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in pairs {
        map.entry(k.clone()).or_default().push(v.clone());
    }
    map
}

/// How a command runs.
#[derive(Debug, Clone, Args)]
pub struct CommandArgs {
    /// Environment for this command: KEY=VALUE (repeatable).
    #[arg(long = "env", short = 'e', value_parser = parse_env, value_name = "KEY=VALUE")]
    pub env: Vec<(String, String)>,
    /// Working directory inside the box.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Stop the command after this long, at least 1ms (exit status 124).
    #[arg(long, value_parser = parse_span, value_name = "DURATION")]
    pub timeout: Option<Duration>,
    /// Forward a terminal's input to the command (piped input is always forwarded).
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// Run the command on a terminal made for it in the box (needs one here; `-it` for a shell).
    #[arg(short = 't', long)]
    pub tty: bool,
    /// The program and its arguments, passed as a vector, never through a shell.
    #[arg(last = true, required = true, value_name = "ARGV")]
    pub argv: Vec<String>,
}

impl CommandArgs {
    /// The command these flags ask for, field by field; every rule is
    /// core's. Its input is this process's stdin and its terminal's size is
    /// known only once it runs, so neither is a field here.
    pub fn options(&self, runner: bool) -> ExecOptions {
        ExecOptions {
            argv: self.argv.clone(),
            env: self.env.iter().cloned().collect(),
            cwd: self.cwd.clone(),
            timeout_secs: self.timeout.map(|d| d.as_secs_f64()),
            runner,
            ..ExecOptions::default()
        }
    }
}

/// An operator's ceiling over what an agent may ask for (`tinybox mcp`,
/// `tinybox serve`): core's `Ceiling`, as flags.
#[derive(Debug, clap::Args)]
pub struct CeilingArgs {
    /// The sandbox every box gets (default: the strongest healthy one that passes the floor).
    #[arg(long)]
    pub sandbox: Option<tinybox_core::model::SandboxName>,
    /// Allow boxes below the isolation floor for untrusted code (the default refuses them).
    #[arg(long)]
    pub trusted: bool,
    /// The most network a box may have; an agent asks for egress only when this is egress.
    #[arg(long, value_enum, default_value = "deny")]
    pub network: NetworkArg,
    /// The longest a box may live (and its default).
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    pub ttl: std::time::Duration,
    /// The most memory a box may have (and its default).
    #[arg(long, value_parser = parse_size, default_value = "1G")]
    pub memory: u64,
    /// The most processes a box may have (and its default).
    #[arg(long, default_value_t = 256)]
    pub pids: u64,
    /// The most cores a box may have (and its default).
    #[arg(long, value_parser = parse_cpus, default_value = "1")]
    pub cpus: f64,
}

impl CeilingArgs {
    pub fn ceiling(&self) -> tinybox_core::ceiling::Ceiling {
        tinybox_core::ceiling::Ceiling {
            sandbox: self.sandbox.clone(),
            untrusted: !self.trusted,
            network: self.network.into(),
            ttl_secs: self.ttl.as_secs(),
            memory_bytes: self.memory,
            pids: self.pids,
            cpus: self.cpus,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;
    use crate::{Cli, Command};

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("tinybox").chain(args.iter().copied()))
    }

    /// The spec `tinybox create ARGS` describes, in sandbox `microvm`.
    fn create_spec(args: &[&str]) -> Result<tinybox_core::model::BoxSpec, String> {
        let mut all = vec!["create"];
        all.extend_from_slice(args);
        match parse(&all).map_err(|e| e.to_string())?.command {
            Command::Create(c) => c
                .box_args
                .request(&[])
                .and_then(|r| r.spec(SandboxName::new("microvm").unwrap(), None))
                .map_err(|e| e.to_string()),
            other => panic!("parsed as {other:?}"),
        }
    }

    fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn accel_is_the_accel_option() {
        assert_eq!(create_spec(&["--accel", "tcg"]).unwrap().options, options(&[("accel", "tcg")]));
        assert_eq!(create_spec(&["--accel", "kvm"]).unwrap().options, options(&[("accel", "kvm")]));
        assert!(create_spec(&[]).unwrap().options.is_empty(), "no option unless asked");
    }

    #[test]
    fn accel_takes_only_kvm_or_tcg() {
        let err = parse(&["create", "--accel", "hvf"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue);
        let text = err.to_string();
        assert!(text.contains("hvf") && text.contains("kvm") && text.contains("tcg"), "{text}");
    }

    #[test]
    fn options_are_repeatable_key_value_pairs() {
        let spec = create_spec(&["--option", "accel=tcg", "--option", "cpu=max", "--option", "note="]).unwrap();
        assert_eq!(spec.options, options(&[("accel", "tcg"), ("cpu", "max"), ("note", "")]));
        assert_eq!(
            create_spec(&["--option", "k=a=b"]).unwrap().options,
            options(&[("k", "a=b")]),
            "the first '=' splits"
        );
    }

    #[test]
    fn a_malformed_option_is_refused_naming_the_value_and_the_rule() {
        assert_eq!(parse_option("accel"), Err(r#""accel" is not an option KEY=VALUE with a non-empty KEY"#.into()));
        assert_eq!(parse_option("=tcg"), Err(r#""=tcg" is not an option KEY=VALUE with a non-empty KEY"#.into()));
        for bad in ["accel", "=tcg", ""] {
            let err = parse(&["create", "--option", bad]).unwrap_err();
            assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{bad:?}");
            assert!(err.to_string().contains("is not an option KEY=VALUE with a non-empty KEY"), "{err}");
        }
    }

    #[test]
    fn one_option_given_two_values_is_refused() {
        let err = create_spec(&["--accel", "kvm", "--option", "accel=tcg"]).unwrap_err();
        assert_eq!(err, r#"option accel is given twice, as "tcg" and "kvm"; give it once (accel sets it too)"#);
        let err = create_spec(&["--option", "k=1", "--option", "k=2"]).unwrap_err();
        assert_eq!(err, r#"option k is given twice, as "1" and "2"; give it once"#);
        // Saying the same thing twice is not a conflict.
        let spec = create_spec(&["--accel", "tcg", "--option", "accel=tcg"]).unwrap();
        assert_eq!(spec.options, options(&[("accel", "tcg")]));
    }

    #[test]
    fn a_bare_persistent_leaves_the_cadence_to_core() {
        use tinybox_core::model::Lifecycle;
        let bare = create_spec(&["--persistent"]).unwrap();
        assert_eq!(bare.lifecycle, Lifecycle::persistent(Lifecycle::DEFAULT_AUTOSNAPSHOT));
        let given = create_spec(&["--persistent", "5m"]).unwrap();
        assert_eq!(given.lifecycle, Lifecycle::persistent(Duration::from_secs(300)));
        assert_eq!(create_spec(&[]).unwrap().lifecycle, Lifecycle::default());
        let help = crate::Cli::command().find_subcommand("create").unwrap().clone().render_help().to_string();
        assert!(help.contains(&format!("(default {}s)", Lifecycle::DEFAULT_AUTOSNAPSHOT.as_secs())), "{help}");
    }

    /// The plan `tinybox exec box-0 ARGS -- true` makes, by core's rules.
    fn exec_plan(args: &[&str]) -> Result<tinybox_core::request::ExecPlan, Error> {
        let mut all = vec!["exec", "box-0"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--", "true"]);
        let Command::Exec(c) = parse(&all).unwrap().command else { panic!("parsed as another verb") };
        c.command.options(c.runner).plan()
    }

    #[test]
    fn exec_timeouts_follow_core_s_rule() {
        assert_eq!(exec_plan(&["--timeout", "500ms"]).unwrap().timeout, Some(Duration::from_millis(500)));
        assert_eq!(exec_plan(&["--timeout", "2m"]).unwrap().timeout, Some(Duration::from_secs(120)));
        assert_eq!(exec_plan(&[]).unwrap().timeout, None);
        let err = exec_plan(&["--timeout", "0s"]).unwrap_err();
        assert!(matches!(err, Error::Request(request::RequestError::TimeoutTooShort { .. })), "{err}");
        assert_eq!(exec_plan(&["--runner"]).unwrap().target, tinybox_core::Target::Runner);
        let err = parse(&["exec", "box-0", "--timeout", "soon", "--", "true"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
    }

    #[test]
    fn allow_host_is_repeatable_and_makes_an_allowlist_on_create_and_run() {
        use tinybox_core::model::NetworkPolicy;
        let spec = create_spec(&["--allow-host", "Allowed.test:8080", "--allow-host", "*.example.com"]).unwrap();
        assert_eq!(spec.network, Some(NetworkPolicy::Allowlist));
        assert_eq!(spec.allow_hosts, ["allowed.test:8080", "*.example.com"]);
        let cli = parse(&["run", "--allow-host", "10.0.0.2:80", "--", "true"]).unwrap();
        let Command::Run(c) = cli.command else { panic!("parsed as another verb") };
        let spec = c.box_args.request(&[]).unwrap().spec(SandboxName::new("namespace").unwrap(), None).unwrap();
        assert_eq!(spec.allow_hosts, ["10.0.0.2:80"]);
        let err = create_spec(&["--allow-host", "*.com"]).unwrap_err();
        assert!(err.starts_with(r#"allow entry "*.com": "#), "{err}");
        let err = create_spec(&["--network", "egress", "--allow-host", "a.test"]).unwrap_err();
        assert!(err.contains(r#"allow entry "a.test" with network egress"#), "{err}");
        let spec = create_spec(&["--network", "egress", "--allow-host", "10.0.0.2:80"]).unwrap();
        assert_eq!((spec.network, spec.allow_hosts), (Some(NetworkPolicy::Egress), vec!["10.0.0.2:80".to_owned()]));
        let err = create_spec(&["--network", "allowlist"]).unwrap_err();
        assert!(err.contains("needs at least one allow_hosts entry"), "{err}");
    }

    #[test]
    fn run_takes_the_same_options() {
        let cli = parse(&["run", "--accel", "tcg", "--option", "cpu=max", "--", "true"]).unwrap();
        let Command::Run(c) = cli.command else { panic!("parsed as another verb") };
        let spec = c.box_args.request(&[]).unwrap().spec(SandboxName::new("microvm").unwrap(), None).unwrap();
        assert_eq!(spec.options, options(&[("accel", "tcg"), ("cpu", "max")]));
    }
}
