//! The claims a sandbox keeps only for boxes made from an image (one that
//! declares `Feature::ImageRoot`: a namespace box's snapshots and forks,
//! ADR 0029), probed on such a box: made from the kit's own image
//! (kit_image.rs), and removed afterwards.

use std::time::Instant;

use tinybox_core::model::BoxSpec;
use tinybox_sdk::model::WorkspaceSource;

use super::{Claim, Kit, Status, probes};

impl Kit<'_> {
    /// Probes `claims` (declared snapshot and fork claims) on a box of the
    /// kit's image, recording each; skipped, with the reason, when no
    /// such box can be made here.
    pub(super) async fn image_claims(&mut self, spec: &BoxSpec, claims: &[Claim]) {
        let t = Instant::now();
        let image = super::kit_image::ensure(self.tb).await;
        self.op("image import", t.elapsed(), image.is_ok());
        let image = match image {
            Ok(image) => image,
            Err(why) => return self.skip_claims(claims, &why),
        };
        let mut from = spec.clone();
        from.source = Some(WorkspaceSource::OciImage { reference: image });
        match self.create("create (from an image)", from.clone()).await {
            Err(e) => self.fail_claims(claims, &format!("cannot make a box from the kit's image: {e}")),
            Ok(id) => {
                self.recheck_levels(&id).await;
                for claim in claims {
                    let t = Instant::now();
                    let verdict = match claim {
                        Claim::FeatureFork => probes::fork(self, &id).await,
                        other => probes::probe(self, *other, &id, &from).await,
                    };
                    let (status, detail) =
                        verdict.unwrap_or_else(|e| (Status::Fail, format!("the probe could not run: {e}")));
                    self.record(*claim, status, format!("on a box made from an image: {detail}"), Some(t.elapsed()));
                }
                self.remove("rm (image box)", &id).await;
            }
        }
    }

    /// The isolation claims that passed on the kit's first box, probed
    /// again on the image box, which its sandbox confines another way (one
    /// process holds it, and each command joins it): a claim that does not
    /// hold there fails, with what the image box showed.
    async fn recheck_levels(&mut self, id: &tinybox_sdk::model::BoxId) {
        let passed: Vec<Claim> = self
            .claims
            .iter()
            .filter(|f| f.status == Status::Pass && f.claim.level().is_some())
            .map(|f| f.claim)
            .filter(|c| !matches!(c, Claim::ProcessEnvRoundTrip))
            .collect();
        let spec = self.spec(None);
        for claim in passed {
            let verdict = probes::probe(self, claim, id, &spec).await;
            let (status, detail) = verdict.unwrap_or_else(|e| (Status::Fail, format!("the probe could not run: {e}")));
            if status != Status::Pass
                && let Some(f) = self.claims.iter_mut().find(|f| f.claim == claim)
            {
                f.status = Status::Fail;
                f.detail = format!("holds on a box made over a directory, not on one made from an image: {detail}");
            }
        }
    }

    fn skip_claims(&mut self, claims: &[Claim], why: &str) {
        for claim in claims {
            self.record(*claim, Status::Skipped, why, None);
        }
    }

    fn fail_claims(&mut self, claims: &[Claim], why: &str) {
        for claim in claims {
            self.record(*claim, Status::Fail, why, None);
        }
    }
}
