//! The conformance kit (crate `tinybox-verify`): for one installed sandbox,
//! read what its handshake declares, make real boxes through the engine, and
//! run one live probe per declared property. A claim that the box does not bear
//! out FAILS with the probe that caught it; a property the sandbox does not
//! declare is reported as not claimed; a probe that cannot run here says
//! why it was SKIPPED. `tinybox drivers verify NAME` is the front end, and
//! what a third-party driver author runs in CI (docs/specs/conformance.md).
//!
//! It is built on core's public API only, like any front end: the engine
//! never depends on it. Core keeps the trust rule and the verdict type
//! (`trust::Verifier`, `store::verdicts::Verdict`); a front end that can run
//! the kit implements the former with [`verify`] and [`Report::verdict`].

mod allowlist;
mod claim;
mod client_hello;
mod egress_target;
mod fence;
mod image_claims;
mod kit_image;
mod levels;
mod limits;
mod privilege;
mod probe_tools;
mod probes;
mod protocol;
mod run;
mod terminal;
mod terminal_feature;

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;
use tinybox_sdk::model::{
    BoxId, Feature, HostName, IsolationLevel, Limit, NetworkPolicy, PortMapping, Resources, SandboxCapabilities,
    SandboxName, SourceKind, WorkspaceSource,
};

pub use claim::{Claim, Requirement};
pub use egress_target::{EgressTarget, TargetError};
pub use run::{GUARD, Output, run};
use tinybox_core::Tinybox;
use tinybox_core::model::{BoxSpec, Placement};
use tinybox_core::store::verdicts::{self, Verdict};

/// The image an image-only sandbox's boxes start from unless told otherwise.
pub const DEFAULT_IMAGE: &str = "busybox:latest";

/// The limits the kit asks for, so each probe knows the cap it pushes against.
/// They are what every sandbox can grant: a whole CPU (a microVM gets whole
/// vCPUs) and 128 MiB (the least a microVM guest boots in).
pub const CAP_MEMORY: u64 = 128 * 1024 * 1024;
pub const CAP_PIDS: u64 = 64;
pub const CAP_CPUS: f64 = 1.0;

/// What a run of the kit may be told.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The image for a sandbox that takes `oci_image` sources.
    pub image: Option<String>,
    /// Sandbox-specific create options (`spec.options`) for every box the
    /// kit makes, e.g. `accel=tcg` for a microVM on a machine without KVM.
    pub create_options: BTreeMap<String, String>,
    /// The caller's test services the allowlist claims probe against
    /// (`--egress-target FILE`); without it they are SKIPPED.
    pub egress_target: Option<EgressTarget>,
}

/// One claim's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pass,
    Fail,
    Skipped,
    /// The sandbox does not declare this property: nothing to check.
    NotClaimed,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Skipped => "SKIPPED",
            Status::NotClaimed => "not claimed",
        })
    }
}

/// One claim and what its probe found.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Reported by its stable name, e.g. `isolation.kernel.host_processes`.
    #[serde(rename = "name")]
    pub claim: Claim,
    pub status: Status,
    /// What the probe saw; for SKIPPED, why it could not run.
    pub detail: String,
    /// The probe's wall-clock time, commands and engine calls included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    /// SKIPPED for a reason that proves nothing is left to rely on (no box
    /// of that kind can be made here, or it needs the caller's own test
    /// services): reported, but not held against the verdict.
    #[serde(skip)]
    pub excused: bool,
}

/// One engine operation the kit performed and how long it took.
#[derive(Debug, Clone, Serialize)]
pub struct Operation {
    pub op: String,
    pub latency_ms: u64,
    pub ok: bool,
}

/// The whole verification of one sandbox.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub sandbox: String,
    /// The driver's executable; `None` for passthrough, which lives in core.
    pub driver_path: Option<String>,
    pub declared: SandboxCapabilities,
    /// The workspace source the boxes were made from.
    pub source: String,
    /// The create options every box was made with (absent when none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub create_options: BTreeMap<String, String>,
    pub claims: Vec<Finding>,
    pub operations: Vec<Operation>,
    /// The test services the allowlist claims were probed against (absent
    /// when none were given, and the allowlist claims were skipped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress_target: Option<EgressTarget>,
}

impl Report {
    /// No claim failed.
    pub fn passed(&self) -> bool {
        !self.claims.iter().any(|c| c.status == Status::Fail)
    }

    /// The verdict to keep for this report's driver binary; `None` for
    /// passthrough (no binary) or a binary that cannot be read. It passes —
    /// the engine may rely on the declaration (core's `trust`) — only when
    /// no claim failed AND none was skipped: a claim whose probe could not
    /// run is unproven, and a driver that cannot even run `true` would
    /// otherwise skip every claim and look verified. The one exception is
    /// the allowlist claims of a run given no egress target: they need the
    /// caller's own test services, which the engine's first-use run never
    /// has, and the allowlist is held to its declaration by the gate, not
    /// by trust. They are reported (and counted) SKIPPED all the same.
    pub fn verdict(&self, now: u64) -> Option<Verdict> {
        let digest = self.driver_path.as_deref().and_then(|p| verdicts::digest(std::path::Path::new(p)))?;
        let count = |s: Status| self.claims.iter().filter(|c| c.status == s).count();
        let untargeted =
            |c: &&Finding| self.egress_target.is_none() && c.claim.requirement() == Requirement::NetworkAllowlist;
        let unproven =
            self.claims.iter().filter(|c| c.status == Status::Skipped).filter(|c| !untargeted(c) && !c.excused).count();
        Some(Verdict {
            sandbox: self.sandbox.clone(),
            digest,
            declared: Some(self.declared.clone()),
            passed: self.passed() && unproven == 0,
            passes: count(Status::Pass),
            fails: count(Status::Fail),
            skipped: count(Status::Skipped),
            failed: self
                .claims
                .iter()
                .filter(|c| c.status == Status::Fail)
                .map(|c| c.claim.name().to_owned())
                .collect(),
            verified_at: now,
            kit_version: env!("CARGO_PKG_VERSION").into(),
            create_options: self.create_options.clone(),
        })
    }
}

/// Why the kit could not start at all (the sandbox is not there or not usable).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct NotVerifiable(pub String);

/// Core's one spelling of it, so every caller of the kit reports it alike.
impl From<NotVerifiable> for tinybox_core::Error {
    fn from(e: NotVerifiable) -> Self {
        tinybox_core::Error::NotVerifiable(e.0)
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The box a sandbox can be verified with, from what it declares it accepts.
enum Source {
    Made(Option<WorkspaceSource>, String, Option<tempfile::TempDir>),
    Impossible(String),
}

/// A fresh directory for a box to be made over, removed on drop.
fn kit_workspace() -> std::io::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix("tinybox-verify-").tempdir()?;
    // A process-isolation sandbox runs as another user, who must be able
    // to enter and write the workspace.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))?;
    Ok(dir)
}

fn pick_source(caps: &SandboxCapabilities, opts: &Options, kit_image: Option<String>) -> Source {
    // A sandbox whose images come from core's store (image_root) has no
    // image the kit can count on there: one that boots image disks gets
    // the kit's own (`kit_image`); another has its box made over a
    // directory, unless an image was named, and image_claims.rs probes
    // what only image boxes keep on a box of the kit's image.
    let from_store = caps.has(&Feature::ImageRoot) && opts.image.is_none() && kit_image.is_none();
    if caps.sources.contains(&SourceKind::OciImage) && !from_store {
        let reference = kit_image.or_else(|| opts.image.clone()).unwrap_or_else(|| DEFAULT_IMAGE.to_owned());
        let shown = format!("image {reference}");
        return Source::Made(Some(WorkspaceSource::OciImage { reference }), shown, None);
    }
    if caps.sources.contains(&SourceKind::LocalDir) {
        let dir = match kit_workspace() {
            Ok(d) => d,
            Err(e) => return Source::Impossible(format!("cannot make a temporary workspace: {e}")),
        };
        let path = dir.path().to_path_buf();
        let shown = format!("directory {}", path.display());
        return Source::Made(Some(WorkspaceSource::LocalDir { path }), shown, Some(dir));
    }
    if caps.sources.is_empty() {
        return Source::Made(None, "none (the sandbox declares no source kinds)".into(), None);
    }
    let kinds: Vec<String> = caps.sources.iter().map(|s| s.to_string()).collect();
    Source::Impossible(format!(
        "the kit makes boxes from oci_image or local_dir sources; the sandbox accepts only {}",
        kinds.join(", ")
    ))
}

/// Verifies sandbox `name` on the local host: every declared claim probed
/// live, every other one reported as not claimed.
pub async fn verify(tb: &Tinybox, name: &str, opts: &Options) -> Result<Report, NotVerifiable> {
    let reports = tb.driver_reports().await;
    let Some(r) = reports.iter().find(|r| r.name == name) else {
        let names: Vec<&str> = reports.iter().map(|r| r.name.as_str()).collect();
        return Err(NotVerifiable(format!(
            "no driver named {name} is installed (found: {}); put an executable tinybox-driver-{name} on PATH or TINYBOX_DRIVER_PATH",
            names.join(", ")
        )));
    };
    if r.role == Some(tinybox_sdk::protocol::Role::Host) {
        return Err(NotVerifiable(format!("{name} is a host driver; the kit verifies sandbox declarations")));
    }
    if !r.usable_sandbox() {
        return Err(NotVerifiable(format!("sandbox {name} cannot be used here: {}", r.summary())));
    }
    let caps = r.capabilities.clone().ok_or_else(|| NotVerifiable(format!("sandbox {name} declared nothing")))?;
    let sandbox = SandboxName::new(name).map_err(|e| NotVerifiable(e.to_string()))?;
    let mut kit = Kit {
        tb,
        sandbox,
        caps: caps.clone(),
        create_options: opts.create_options.clone(),
        egress_target: opts.egress_target.clone(),
        box_isolation: None,
        namespace: format!("tinybox-verify-{}", &levels::nonce()[..12]),
        claims: Vec::new(),
        operations: Vec::new(),
    };
    match &r.path {
        Some(path) => {
            for (claim, (status, detail), took) in protocol::wire(std::path::Path::new(path)).await {
                kit.record(claim, status, detail, Some(took));
            }
        }
        None => {
            for claim in Claim::protocol() {
                kit.record(claim, Status::NotClaimed, "built into core: no driver protocol to check", None);
            }
        }
    }
    // A sandbox booting images from the store gets the kit's own, unless asked for another.
    let kit_image = match caps.has(&tinybox_sdk::model::Feature::ImageDisk) && opts.image.is_none() {
        false => None,
        true => match kit_image::ensure(tb).await {
            Ok(reference) => Some(reference),
            Err(why) => {
                kit.skip_all(&format!("no box could be made: {why}"));
                return Ok(kit.report(r.path.clone(), "none".into()));
            }
        },
    };
    let (source, shown, _keep) = match pick_source(&caps, opts, kit_image) {
        Source::Made(s, shown, keep) => (s, shown, keep),
        Source::Impossible(why) => {
            kit.skip_all(&format!("no box could be made: {why}"));
            return Ok(kit.report(r.path.clone(), "none".into()));
        }
    };
    kit.run_all(source).await;
    Ok(kit.report(r.path.clone(), shown))
}

struct Kit<'a> {
    pub tb: &'a Tinybox,
    pub sandbox: SandboxName,
    pub caps: SandboxCapabilities,
    /// Put into every box's spec.
    create_options: BTreeMap<String, String>,
    egress_target: Option<EgressTarget>,
    /// The isolation the engine recorded for the kit's first box, which a
    /// driver may put below its declaration for the options it was given.
    box_isolation: Option<IsolationLevel>,
    /// This run's own: two stores' kits on one docker daemon (two agents
    /// verifying at once) would otherwise make, and remove, each other's
    /// `box-0` under one name.
    namespace: String,
    claims: Vec<Finding>,
    operations: Vec<Operation>,
}

impl Kit<'_> {
    fn report(self, driver_path: Option<String>, source: String) -> Report {
        let mut claims = self.claims;
        claims.sort_by_key(|c| c.claim.position());
        Report {
            sandbox: self.sandbox.to_string(),
            driver_path,
            declared: self.caps,
            source,
            create_options: self.create_options,
            claims,
            operations: self.operations,
            egress_target: self.egress_target,
        }
    }

    fn record(&mut self, claim: Claim, status: Status, detail: impl Into<String>, took: Option<Duration>) {
        self.claims.push(Finding { claim, status, detail: detail.into(), latency_ms: took.map(ms), excused: false });
    }

    /// A SKIPPED claim that is not held against the verdict (`Finding::excused`).
    fn record_excused(&mut self, claim: Claim, detail: impl Into<String>) {
        self.claims.push(Finding {
            claim,
            status: Status::Skipped,
            detail: detail.into(),
            latency_ms: None,
            excused: true,
        });
    }

    fn op(&mut self, op: &str, took: Duration, ok: bool) {
        self.operations.push(Operation { op: op.into(), latency_ms: ms(took), ok });
    }

    /// Every claim still unreported: not claimed when undeclared, else skipped for `why`.
    fn skip_all(&mut self, why: &str) {
        for claim in Claim::ALL {
            if self.claims.iter().any(|c| c.claim == claim) {
                continue;
            }
            if claim.declared_by(&self.caps) {
                self.record(claim, Status::Skipped, why, None);
            } else {
                self.record(claim, Status::NotClaimed, "not declared", None);
            }
        }
    }

    fn spec(&self, source: Option<WorkspaceSource>) -> BoxSpec {
        let placement = Placement::new(HostName::local(), self.sandbox.clone());
        let mut spec = BoxSpec::new(placement);
        spec.source = source;
        spec.namespace = self.namespace.clone();
        let enforced = |l: Limit| self.caps.has(&Feature::ResourceLimits) && self.caps.limits.contains(&l);
        spec.resources = Resources {
            cpus: enforced(Limit::Cpu).then_some(CAP_CPUS),
            memory_bytes: enforced(Limit::Memory).then_some(CAP_MEMORY),
            pids: enforced(Limit::Pids).then_some(CAP_PIDS),
            disk_bytes: None,
        };
        if self.caps.network_deny {
            spec.network = Some(NetworkPolicy::Denied);
        }
        spec.options = self.create_options.clone();
        spec
    }

    /// Creates a box, timing it as operation `op`.
    async fn create(&mut self, op: &str, spec: BoxSpec) -> tinybox_core::Result<BoxId> {
        let t = Instant::now();
        let made = self.tb.create(spec).await;
        self.op(op, t.elapsed(), made.is_ok());
        if let Err(tinybox_core::Error::CreateUnsettled { id, .. }) = &made {
            // The driver failed without saying what it made: its record is
            // kept so that removing it removes whatever that was.
            let _ = self.tb.remove(id).await;
        }
        let made = made?;
        if self.box_isolation.is_none() {
            self.box_isolation = made.workspace.as_ref().map(|w| w.isolation);
        }
        Ok(made.id)
    }

    /// Why an isolation claim cannot be judged with the kit's box: the box
    /// is below the level the claim is about (a driver lowers a box's
    /// isolation for some create options, e.g. a microVM under emulation).
    fn below_claim(&self, claim: Claim) -> Option<String> {
        let needs = claim.level()?;
        let has = self.box_isolation?;
        (has < needs).then(|| {
            let with = if self.create_options.is_empty() {
                String::new()
            } else {
                let o: Vec<String> = self.create_options.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!(" with create options {}", o.join(", "))
            };
            format!(
                "the driver made the kit's box{with} at {has} isolation, below the declared {}, so a {needs} probe in it would not test the declaration",
                self.caps.isolation
            )
        })
    }

    async fn remove(&mut self, op: &str, id: &BoxId) {
        let t = Instant::now();
        let gone = self.tb.remove(id).await;
        self.op(op, t.elapsed(), gone.is_ok());
    }

    /// Removes a snapshot a probe took, through core (as `prune` would), so
    /// the kit leaves no image behind.
    async fn remove_snapshot(&mut self, id: &tinybox_core::model::SnapshotId) {
        let t = Instant::now();
        let gone = self.tb.snapshot_remove(id).await;
        self.op("rm (snapshot)", t.elapsed(), gone.is_ok());
    }

    async fn run_all(&mut self, source: Option<WorkspaceSource>) {
        let spec = self.spec(source.clone());
        let id = match self.create("create", spec.clone()).await {
            Ok(id) => id,
            Err(e) => {
                self.skip_all(&format!("no box could be made: {e}"));
                return;
            }
        };
        let t = Instant::now();
        let first = run(self.tb, &id, &["true"], &[], std::future::pending()).await;
        self.op("exec", t.elapsed(), first.as_ref().is_ok_and(|o| o.status.success()));
        match first {
            Ok(o) if o.status.success() => self.probe_all(&id, &spec).await,
            Ok(o) => self.skip_all(&format!("`true` did not succeed in the box ({}): {}", o.status, o.stderr_line())),
            Err(e) => self.skip_all(&format!("could not run a command in the box: {e}")),
        }
        self.remove("rm", &id).await;
        let env = Claim::ProcessEnvRoundTrip;
        if env.declared_by(&self.caps) && !self.claims.iter().any(|c| c.claim == env) {
            self.env_round_trip(source.clone()).await;
        }
        if Claim::FeaturePortForward.declared_by(&self.caps) {
            self.port_forward(source.clone()).await;
        }
        if Claim::EgressFenceHostUnreachable.declared_by(&self.caps) {
            let target = self.egress_target.clone();
            self.egress_fence(source.clone(), target.as_ref()).await;
        }
        if Claim::AllowlistListedNameReached.declared_by(&self.caps) {
            let target = self.egress_target.clone();
            self.allowlist(source, target.as_ref()).await;
        }
        self.skip_all("no probe ran");
    }

    async fn probe_all(&mut self, id: &BoxId, spec: &BoxSpec) {
        // Passthrough has no driver protocol: its claims are already reported.
        let wire = !self.claims.iter().any(|c| c.claim == Claim::ProtocolConcurrentCalls);
        if wire {
            let t = Instant::now();
            let (status, detail) = protocol::concurrent_calls(self.tb, id).await;
            self.record(Claim::ProtocolConcurrentCalls, status, detail, Some(t.elapsed()));
            let t = Instant::now();
            let (status, detail) = protocol::cancellation(self.tb, id).await;
            self.record(Claim::ProtocolCancellation, status, detail, Some(t.elapsed()));
        }
        // A sandbox that keeps snapshots only of boxes made from an image
        // has them probed on such a box (image_claims.rs).
        // (Not when the kit's box is one already.)
        let image_root =
            self.caps.has(&Feature::ImageRoot) && !matches!(spec.source, Some(WorkspaceSource::OciImage { .. }));
        for claim in Claim::properties() {
            let own_box = matches!(claim, Claim::FeaturePortForward | Claim::FeatureFork | Claim::ProcessEnvRoundTrip)
                || matches!(claim.requirement(), Requirement::NetworkAllowlist | Requirement::EgressFence)
                || (image_root && claim == Claim::SnapshotFilesystem);
            if !claim.declared_by(&self.caps) || own_box {
                continue;
            }
            if let Some(why) = self.below_claim(claim) {
                self.record(claim, Status::Skipped, why, None);
                continue;
            }
            let t = Instant::now();
            let (status, detail) = match probes::probe(self, claim, id, spec).await {
                Ok(v) => v,
                Err(e) => (Status::Fail, format!("the probe could not run: {e}")),
            };
            self.record(claim, status, detail, Some(t.elapsed()));
        }
        // Fork comes after snapshot: both leave the probe's files behind.
        if image_root {
            let claims: Vec<Claim> = [Claim::SnapshotFilesystem, Claim::FeatureFork]
                .into_iter()
                .filter(|c| c.declared_by(&self.caps))
                .collect();
            if !claims.is_empty() {
                self.image_claims(spec, &claims).await;
            }
        } else if Claim::FeatureFork.declared_by(&self.caps) {
            let t = Instant::now();
            let (status, detail) = match probes::fork(self, id).await {
                Ok(v) => v,
                Err(e) => (Status::Fail, format!("the probe could not run: {e}")),
            };
            self.record(Claim::FeatureFork, status, detail, Some(t.elapsed()));
        }
        // The heaviest push comes last, so a box it breaks (a guest whose
        // agent is killed for memory, say) fails that claim alone and
        // takes no property claim down with it.
        if wire {
            let t = Instant::now();
            let (status, detail) = protocol::large_binary_stream(self.tb, id).await;
            self.record(Claim::ProtocolLargeBinaryStream, status, detail, Some(t.elapsed()));
        }
    }

    /// The env round trip runs in a box of its own, made with a variable in
    /// its environment, so a sandbox that breaks on one fails this claim
    /// alone instead of leaving no box to probe the others in.
    async fn env_round_trip(&mut self, source: Option<WorkspaceSource>) {
        const CLAIM: Claim = Claim::ProcessEnvRoundTrip;
        if let Some(why) = self.below_claim(CLAIM) {
            self.record(CLAIM, Status::Skipped, why, None);
            return;
        }
        let mut spec = self.spec(source);
        spec.env.insert(probes::BOX_ENV.0.into(), probes::BOX_ENV.1.into());
        let t = Instant::now();
        let id = match self.create("create (env)", spec).await {
            Ok(id) => id,
            Err(e) => {
                let why =
                    format!("a box like the kit's first, with a variable in its environment, could not be made: {e}");
                self.record(CLAIM, Status::Fail, why, Some(t.elapsed()));
                return;
            }
        };
        let (status, detail) = match probes::env_round_trip(self, &id).await {
            Ok(v) => v,
            Err(e) => (Status::Fail, format!("the probe could not run: {e}")),
        };
        self.record(CLAIM, status, detail, Some(t.elapsed()));
        self.remove("rm (env)", &id).await;
    }

    async fn port_forward(&mut self, source: Option<WorkspaceSource>) {
        const NAME: Claim = Claim::FeaturePortForward;
        let Some(host_port) = free_port() else {
            self.record(NAME, Status::Skipped, "no free port on 127.0.0.1 to publish", None);
            return;
        };
        let mut spec = self.spec(source);
        spec.ports = vec![PortMapping { host: host_port, guest: probes::GUEST_PORT }];
        // A published port needs somewhere to go: ask for egress where the
        // network is confined at all.
        if self.caps.network_deny {
            spec.network = Some(NetworkPolicy::Egress);
        }
        let t = Instant::now();
        let id = match self.create("create (ports)", spec).await {
            Ok(id) => id,
            Err(e) => {
                self.record(NAME, Status::Skipped, format!("could not create a box with a port: {e}"), None);
                return;
            }
        };
        let (status, detail) = match probes::port_forward(self, &id, host_port).await {
            Ok(v) => v,
            Err(e) => (Status::Fail, format!("the probe could not run: {e}")),
        };
        self.record(NAME, status, detail, Some(t.elapsed()));
        self.remove("rm (ports)", &id).await;
    }
}

fn free_port() -> Option<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
    Some(l.local_addr().ok()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(driver: &std::path::Path, statuses: &[Status]) -> Report {
        Report {
            sandbox: "x".into(),
            driver_path: Some(driver.display().to_string()),
            declared: SandboxCapabilities::nothing(),
            source: "none".into(),
            create_options: BTreeMap::new(),
            claims: statuses
                .iter()
                .zip(Claim::ALL)
                .map(|(s, c)| Finding { claim: c, status: *s, detail: String::new(), latency_ms: None, excused: false })
                .collect(),
            operations: Vec::new(),
            egress_target: None,
        }
    }

    #[test]
    fn only_a_report_with_every_claim_proven_earns_a_passing_verdict() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("tinybox-driver-x");
        std::fs::write(&bin, b"a driver").unwrap();
        let v = report(&bin, &[Status::Pass, Status::NotClaimed]).verdict(1).unwrap();
        assert!(v.passed);
        let r = report(&bin, &[Status::Pass, Status::Skipped]);
        assert!(r.passed(), "nothing failed");
        let v = r.verdict(1).unwrap();
        assert!(!v.passed, "a skipped claim is unproven: the declaration is not relied on");
        assert_eq!((v.passes, v.skipped, v.fails), (1, 1, 0));
        assert!(!report(&bin, &[Status::Fail]).verdict(1).unwrap().passed);
    }
}
