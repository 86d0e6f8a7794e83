//! The trust rule: the engine relies on a sandbox's declaration — to pick a
//! sandbox on its own, to meet an isolation floor, to call a box suitable
//! for untrusted code — only when a passing verdict of the conformance kit
//! exists for that exact driver binary, that exact declaration and the
//! create options the box is made with. This is the one place the rule
//! lives; every create passes through it.
//!
//! A verdict is earned earlier (`tinybox drivers verify NAME`) or on first
//! use: a front end that can run the kit installs a [`Verifier`], and the
//! engine runs it when it needs a verdict it does not have. A front end
//! without one (the TinyBus module) gets a clear refusal naming the
//! command that earns the verdict.
//!
//! What a verdict cannot cover: it is tied to the driver's executable, so a
//! driver written in an interpreted language, or one that loads other
//! files, can change behaviour without changing its digest.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tinybox_sdk::model::{IsolationLevel, SandboxCapabilities, SandboxName};

use crate::Tinybox;
use crate::driver::SandboxLink;
use crate::error::{Error, Result};
use crate::store::verdicts::{self, Verdict};

pub use crate::engine::Verifier;

/// What the engine knows of one driver binary's declaration.
#[derive(Debug, Clone, PartialEq)]
pub enum Trust {
    /// Nothing to verify: it claims no isolation (passthrough, built in).
    NothingClaimed,
    /// A passing verdict for this binary, declaration and options.
    Verified(Verdict),
    /// A verdict for them that failed.
    Failed(Verdict),
    /// No verdict for them (never verified, rebuilt, or verified otherwise).
    Unverified,
}

impl Trust {
    pub fn relied_on(&self) -> bool {
        matches!(self, Trust::Verified(_) | Trust::NothingClaimed)
    }
}

/// The trust the store's verdicts give the driver at `path` declaring `declared`
/// for boxes made with `options`.
pub fn trust_of(
    store_dir: Option<&Path>,
    path: Option<&Path>,
    declared: &SandboxCapabilities,
    options: &BTreeMap<String, String>,
) -> Trust {
    trust_remembering(store_dir, path, declared, options, false)
}

/// [`trust_of`]; with `remember`, the binary's digest is kept in the
/// store for the next lookup (a create does; a listing writes nothing).
fn trust_remembering(
    store_dir: Option<&Path>,
    path: Option<&Path>,
    declared: &SandboxCapabilities,
    options: &BTreeMap<String, String>,
    remember: bool,
) -> Trust {
    if declared.isolation == IsolationLevel::None {
        return Trust::NothingClaimed;
    }
    let (Some(store), Some(path)) = (store_dir, path) else { return Trust::Unverified };
    judge(verdicts::load(store, path, options, remember), declared, options)
}

/// The trust `verdict` (one recorded for the binary in question) gives a
/// driver declaring `declared`, for boxes made with `options`.
pub fn judge(verdict: Option<Verdict>, declared: &SandboxCapabilities, options: &BTreeMap<String, String>) -> Trust {
    match verdict {
        Some(v) if v.declared.as_ref() == Some(declared) && v.create_options == *options => {
            if v.passed {
                Trust::Verified(v)
            } else {
                Trust::Failed(v)
            }
        }
        _ => Trust::Unverified,
    }
}

/// Why a verdict that did not pass is not relied on, in a few words.
pub fn unproven(v: &Verdict) -> String {
    if v.fails > 0 && !v.failed.is_empty() {
        format!("failed verification ({} of its claims failed: {})", v.fails, v.failed.join(", "))
    } else if v.fails > 0 {
        format!("failed verification ({} of its claims failed)", v.fails)
    } else {
        format!("was not proven by verification ({} of its claims could not be checked)", v.skipped)
    }
}

/// Why a verdict earned on this machine does not cover a box's declaration.
pub const NOT_THIS_DECLARATION: &str = "is verified by the kit on this machine only, and declares otherwise for this box (on another host, whose facts the kit's probes do not read)";

impl Tinybox {
    /// Keeps `verdict` in the store, where the trust rule and `tinybox
    /// drivers` read it; an engine without a store keeps none.
    pub fn record_verdict(&self, verdict: &Verdict) -> Result<()> {
        if let Some(store) = &self.store_dir {
            verdicts::save(store, verdict).map_err(|e| Error::io("cannot record the verdict", e))?;
        }
        Ok(())
    }

    /// Installs what earns a verdict on first use.
    pub fn set_verifier(&mut self, verifier: Arc<dyn Verifier>) {
        self.verifier = Some(verifier);
    }

    /// The trust in sandbox `sandbox` as installed now, for boxes made with `options`.
    pub async fn trust(&self, sandbox: &SandboxName, options: &BTreeMap<String, String>) -> Result<Trust> {
        let link = self.drivers.sandbox(sandbox, &tinybox_sdk::model::HostName::local()).await?;
        Ok(self.trust_link(&link, options))
    }

    /// The trust in the driver behind `link`, for boxes made with `options`.
    pub(crate) fn trust_link(&self, link: &SandboxLink, options: &BTreeMap<String, String>) -> Trust {
        let path = link.connection().map(|c| c.path.clone());
        // Only a create asks: the digest it computes is kept.
        trust_remembering(self.store_dir.as_deref(), path.as_deref(), &link.capabilities(), options, true)
    }

    /// Requires a passing verdict for `sandbox` with `options`, earning one
    /// with the installed verifier when there is none yet.
    pub(crate) async fn require_verified(
        &self,
        sandbox: &SandboxName,
        options: &BTreeMap<String, String>,
    ) -> Result<()> {
        let link = self.drivers.sandbox(sandbox, &tinybox_sdk::model::HostName::local()).await?;
        self.require_verified_link(&link, options).await
    }

    /// [`Tinybox::require_verified`] for the driver behind `link`.
    pub(crate) async fn require_verified_link(
        &self,
        link: &SandboxLink,
        options: &BTreeMap<String, String>,
    ) -> Result<()> {
        let sandbox = &link.name();
        match self.trust_link(link, options) {
            Trust::Verified(_) | Trust::NothingClaimed => Ok(()),
            Trust::Failed(v) => Err(Error::Unverified { sandbox: sandbox.clone(), detail: unproven(&v) }),
            Trust::Unverified => {
                // The kit makes its boxes here: a link whose declaration is
                // not this machine's would get a verdict for another one.
                let here = self.drivers.sandbox(sandbox, &tinybox_sdk::model::HostName::local()).await?;
                if here.capabilities() != link.capabilities() {
                    return Err(Error::Unverified { sandbox: sandbox.clone(), detail: NOT_THIS_DECLARATION.into() });
                }
                let Some(verifier) = self.verifier.clone() else {
                    return Err(Error::Unverified {
                        sandbox: sandbox.clone(),
                        detail: "has no verdict for this binary and declaration".into(),
                    });
                };
                let verdict = verifier.verify(self, sandbox, options).await?;
                self.record_verdict(&verdict)?;
                if verdict.passed {
                    Ok(())
                } else {
                    Err(Error::Unverified { sandbox: sandbox.clone(), detail: unproven(&verdict) })
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel() -> SandboxCapabilities {
        SandboxCapabilities { isolation: IsolationLevel::Kernel, ..SandboxCapabilities::nothing() }
    }

    #[test]
    fn a_failed_verdict_names_the_claims_that_failed() {
        let caps = SandboxCapabilities::nothing();
        let bin = tempfile::NamedTempFile::new().unwrap();
        let v = Verdict { failed: vec!["limit.cpu".into()], ..verdict(bin.path(), &caps, false) };
        assert_eq!(unproven(&v), "failed verification (1 of its claims failed: limit.cpu)");
        let old = Verdict { failed: Vec::new(), ..v };
        assert_eq!(unproven(&old), "failed verification (1 of its claims failed)");
    }

    fn verdict(path: &Path, declared: &SandboxCapabilities, passed: bool) -> Verdict {
        Verdict {
            sandbox: "x".into(),
            digest: verdicts::digest(path).unwrap(),
            declared: Some(declared.clone()),
            passed,
            passes: 3,
            fails: usize::from(!passed),
            skipped: 0,
            failed: Vec::new(),
            verified_at: 1,
            kit_version: "0.1.0".into(),
            create_options: BTreeMap::new(),
        }
    }

    #[test]
    fn only_a_passing_verdict_for_this_binary_declaration_and_options_is_trusted() {
        let store = tempfile::tempdir().unwrap();
        let bin = store.path().join("tinybox-driver-x");
        std::fs::write(&bin, b"build 1").unwrap();
        let none = BTreeMap::new();
        let s = Some(store.path());
        assert_eq!(trust_of(s, Some(&bin), &kernel(), &none), Trust::Unverified);
        assert_eq!(
            trust_of(s, None, &SandboxCapabilities::nothing(), &none),
            Trust::NothingClaimed,
            "passthrough claims nothing to verify"
        );

        verdicts::save(store.path(), &verdict(&bin, &kernel(), true)).unwrap();
        assert!(matches!(trust_of(s, Some(&bin), &kernel(), &none), Trust::Verified(_)));

        // The same binary declaring more than it was verified for.
        let hardware = SandboxCapabilities { isolation: IsolationLevel::Hardware, ..kernel() };
        assert_eq!(trust_of(s, Some(&bin), &hardware, &none), Trust::Unverified);
        // Boxes made with other options were not what the kit checked.
        let tcg: BTreeMap<String, String> = [("accel".to_owned(), "tcg".to_owned())].into();
        assert_eq!(trust_of(s, Some(&bin), &kernel(), &tcg), Trust::Unverified);
        // A rebuilt binary has earned nothing.
        std::fs::write(&bin, b"build 2").unwrap();
        assert_eq!(trust_of(s, Some(&bin), &kernel(), &none), Trust::Unverified);

        verdicts::save(store.path(), &verdict(&bin, &kernel(), false)).unwrap();
        assert!(matches!(trust_of(s, Some(&bin), &kernel(), &none), Trust::Failed(_)));
        assert!(!trust_of(s, Some(&bin), &kernel(), &none).relied_on());
        assert_eq!(trust_of(None, Some(&bin), &kernel(), &none), Trust::Unverified, "no store, no verdicts");
    }

    #[test]
    fn verdicts_earned_with_other_options_stand_apart() {
        let store = tempfile::tempdir().unwrap();
        let bin = store.path().join("tinybox-driver-microvm");
        std::fs::write(&bin, b"build 1").unwrap();
        let s = Some(store.path());
        let none = BTreeMap::new();
        let tcg: BTreeMap<String, String> = [("accel".to_owned(), "tcg".to_owned())].into();
        verdicts::save(store.path(), &verdict(&bin, &kernel(), false)).unwrap();
        let under_tcg = Verdict { create_options: tcg.clone(), ..verdict(&bin, &kernel(), true) };
        verdicts::save(store.path(), &under_tcg).unwrap();
        // Verifying under tcg did not replace what the defaults earned, nor borrow it.
        assert!(matches!(trust_of(s, Some(&bin), &kernel(), &none), Trust::Failed(_)));
        assert_eq!(trust_of(s, Some(&bin), &kernel(), &tcg), Trust::Verified(under_tcg));
    }

    #[test]
    fn a_verdict_an_earlier_build_recorded_holds_only_with_its_declaration() {
        let store = tempfile::tempdir().unwrap();
        let bin = store.path().join("tinybox-driver-x");
        std::fs::write(&bin, b"build 1").unwrap();
        let s = Some(store.path());
        let none = BTreeMap::new();
        let old = verdict(&bin, &kernel(), true);
        let legacy = store.path().join("verified").join(format!("{}.json", old.digest));
        std::fs::create_dir_all(legacy.parent().unwrap()).unwrap();
        // One file per digest, with the declaration it checked: still relied on.
        std::fs::write(&legacy, serde_json::to_vec(&old).unwrap()).unwrap();
        assert_eq!(trust_of(s, Some(&bin), &kernel(), &none), Trust::Verified(old.clone()));
        let hardware = SandboxCapabilities { isolation: IsolationLevel::Hardware, ..kernel() };
        assert_eq!(trust_of(s, Some(&bin), &hardware, &none), Trust::Unverified, "a stale declaration");
        // Older still: no declaration kept, so it holds for none.
        std::fs::write(&legacy, serde_json::to_vec(&Verdict { declared: None, ..old }).unwrap()).unwrap();
        assert_eq!(trust_of(s, Some(&bin), &kernel(), &none), Trust::Unverified);
    }
}
