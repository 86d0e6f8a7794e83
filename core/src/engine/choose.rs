//! Picking a sandbox when a request names none: the strongest healthy one
//! installed whose declaration the engine may rely on (crate::trust), and
//! never passthrough — a box that did not ask to be unconfined is not
//! silently left unconfined.

use std::collections::BTreeMap;

use tinybox_sdk::model::{Feature, IsolationLevel, Limit, SandboxCapabilities, SandboxName};
use tinybox_sdk::protocol::Role;

use super::{DriverReport, Tinybox};
use crate::error::{Error, Result};
use crate::model::PASSTHROUGH;
use crate::request::SandboxChoice;
use crate::trust::{Trust, trust_of};

impl Tinybox {
    /// The sandbox to use for a request that named none, at or above
    /// `floor`, for boxes made with `options`. Candidates are ranked by
    /// isolation; for untrusted code (a floor) next by the pids and memory
    /// limits they put in force by default, so code that may misbehave is
    /// placed where it cannot exhaust the machine; then daemonless first.
    /// The best candidate without a verdict is verified on first use when
    /// a verifier is installed; one that failed, or cannot be verified
    /// here, is passed over and the refusal says why.
    pub async fn choose_sandbox(
        &self,
        floor: Option<IsolationLevel>,
        options: &BTreeMap<String, String>,
    ) -> Result<SandboxChoice> {
        let reports = self.driver_reports().await;
        let mut candidates: Vec<(&DriverReport, &SandboxCapabilities)> = reports
            .iter()
            .filter(|r| r.usable_sandbox() && r.name != PASSTHROUGH)
            .filter_map(|r| Some((r, r.capabilities.as_ref()?)))
            .filter(|(_, c)| c.isolation > IsolationLevel::None && floor.is_none_or(|f| c.isolation >= f))
            .collect();
        rank(&mut candidates, floor);
        // An unhealthy sandbox that would qualify is passed over, and the
        // choice says so: its health says what to fix.
        let mut passed_over: Vec<String> = reports
            .iter()
            .filter(|r| r.error.is_none() && r.role == Some(Role::Sandbox) && r.name != PASSTHROUGH)
            .filter(|r| r.health.as_ref().is_some_and(|h| !h.ok))
            .filter(|r| r.capabilities.as_ref().is_some_and(|c| floor.is_none_or(|f| c.isolation >= f)))
            .filter(|r| r.capabilities.as_ref().is_some_and(|c| c.isolation > IsolationLevel::None))
            .map(|r| format!("{} ({})", r.name, r.summary()))
            .collect();
        for (report, caps) in candidates {
            let sandbox = SandboxName::new(report.name.clone())?;
            let path = report.path.as_deref().map(std::path::Path::new);
            let trusted = match trust_of(self.store_dir.as_deref(), path, caps, options) {
                Trust::Verified(_) | Trust::NothingClaimed => Ok(()),
                Trust::Failed(v) => Err(format!("{} {}", report.name, crate::trust::unproven(&v))),
                Trust::Unverified if self.verifier.is_some() => {
                    self.require_verified(&sandbox, options).await.map_err(|e| match e {
                        Error::Unverified { detail, .. } => format!("{} {detail}", report.name),
                        other => format!("{} could not be verified: {other}", report.name),
                    })
                }
                Trust::Unverified => Err(format!("{} is not verified", report.name)),
            };
            match trusted {
                Ok(()) => {
                    let mut reason = "the strongest healthy verified one installed".to_owned();
                    if floor.is_some() {
                        reason.push_str(&format!(", with {} pids/memory limits by default", default_limits(caps)));
                    }
                    if !passed_over.is_empty() {
                        reason.push_str(&format!("; passed over: {}", passed_over.join(", ")));
                    }
                    return Ok(SandboxChoice { sandbox, isolation: caps.isolation, reason });
                }
                Err(why) => passed_over.push(why),
            }
        }
        let seen: Vec<String> = reports
            .iter()
            .filter(|r| r.name != PASSTHROUGH && r.role != Some(Role::Host))
            .map(|r| format!("{} ({})", r.name, r.summary()))
            .collect();
        // The advice names what is actually missing: a sandbox that is
        // installed but was passed over needs what its report says, not
        // another install.
        let (passed_over, advice) = if passed_over.is_empty() {
            (String::new(), "install one (bubblewrap, docker)")
        } else {
            (
                format!("; passed over: {} (`tinybox drivers verify NAME` shows why)", passed_over.join(", ")),
                "fix what that names",
            )
        };
        Err(Error::NoSandbox(format!(
            "no sandbox that confines anything{} is available here (found: {}){passed_over}; {advice} or pass --sandbox passthrough to run unconfined",
            floor.map(|f| format!(" at isolation {f} or above")).unwrap_or_default(),
            if seen.is_empty() { "none".into() } else { seen.join(", ") }
        )))
    }
}

/// Orders `candidates` best first: by isolation; for untrusted code (a
/// `floor`) next by the pids and memory limits in force by default; then
/// by [`preference`].
fn rank(candidates: &mut [(&DriverReport, &SandboxCapabilities)], floor: Option<IsolationLevel>) {
    candidates
        .sort_by_key(|(r, c)| std::cmp::Reverse((c.isolation, floor.map(|_| default_limits(c)), preference(&r.name))));
}

/// How many of the pids and memory limits a sandbox puts in force by default.
fn default_limits(caps: &SandboxCapabilities) -> usize {
    if !caps.has(&Feature::ResourceLimits) {
        return 0;
    }
    [Limit::Pids, Limit::Memory].iter().filter(|l| caps.limits.contains(l)).count()
}

/// Among sandboxes otherwise equal, the one to pick by default: a
/// daemonless one first (nothing shared to name-clash on, milliseconds per
/// command), then the rest by name. Only breaks ties; never outranks isolation.
fn preference(name: &str) -> (u8, std::cmp::Reverse<String>) {
    let rank = match name {
        "namespace" => 2,
        "docker" => 1,
        _ => 0,
    };
    (rank, std::cmp::Reverse(name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_in_force_by_default_are_counted_only_when_enforced() {
        let none = SandboxCapabilities { isolation: IsolationLevel::Kernel, ..SandboxCapabilities::nothing() };
        assert_eq!(default_limits(&none), 0);
        let mut caps = none.clone();
        caps.limits = [Limit::Pids, Limit::Memory, Limit::Cpu].into();
        assert_eq!(default_limits(&caps), 0, "limits without the feature are not enforced");
        caps.features.insert(Feature::ResourceLimits);
        assert_eq!(default_limits(&caps), 2);
        caps.limits.remove(&Limit::Memory);
        assert_eq!(default_limits(&caps), 1);
    }

    fn report(name: &str) -> DriverReport {
        DriverReport {
            name: name.into(),
            path: None,
            role: Some(Role::Sandbox),
            version: None,
            protocol: None,
            health: None,
            capabilities: None,
            error: None,
        }
    }

    fn caps(isolation: IsolationLevel, limits: &[Limit]) -> SandboxCapabilities {
        let mut caps = SandboxCapabilities { isolation, ..SandboxCapabilities::nothing() };
        if !limits.is_empty() {
            caps.features.insert(Feature::ResourceLimits);
            caps.limits = limits.iter().cloned().collect();
        }
        caps
    }

    fn ranked(candidates: &[(DriverReport, SandboxCapabilities)], floor: Option<IsolationLevel>) -> Vec<String> {
        let mut refs: Vec<(&DriverReport, &SandboxCapabilities)> = candidates.iter().map(|(r, c)| (r, c)).collect();
        rank(&mut refs, floor);
        refs.iter().map(|(r, _)| r.name.clone()).collect()
    }

    #[test]
    fn for_untrusted_code_limits_in_force_rank_after_isolation() {
        let kernel = IsolationLevel::Kernel;
        // namespace would win the tie-break; docker enforces pids and memory.
        let equal = [
            (report("namespace"), caps(kernel, &[])),
            (report("docker"), caps(kernel, &[Limit::Pids, Limit::Memory])),
            (report("aaa"), caps(kernel, &[Limit::Pids])),
        ];
        assert_eq!(ranked(&equal, Some(kernel)), ["docker", "aaa", "namespace"], "limits first, then fewer");
        assert_eq!(ranked(&equal, None), ["namespace", "docker", "aaa"], "no floor: limits do not count");

        // Higher isolation still wins, even enforcing no limits at all.
        let mixed = [
            (report("docker"), caps(kernel, &[Limit::Pids, Limit::Memory])),
            (report("microvm"), caps(IsolationLevel::Hardware, &[])),
        ];
        assert_eq!(ranked(&mixed, Some(kernel)), ["microvm", "docker"]);
    }

    #[test]
    fn ties_go_to_the_daemonless_sandbox() {
        assert!(preference("namespace") > preference("docker"));
        assert!(preference("docker") > preference("microvm"));
        assert!(preference("aaa") > preference("zzz"), "then by name");
    }
}
