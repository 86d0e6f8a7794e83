//! The claims a sandbox keeps only for boxes made from an image (one that
//! declares `Feature::ImageRoot`: a namespace box's snapshots and forks,
//! ADR 0029), probed on such a box: the kit imports a minimal image built
//! from this machine's static busybox into the engine's image store, makes
//! its box from it, and removes both afterwards.

use std::time::Instant;

use tinybox_core::images::{ImportSource, minimal};
use tinybox_core::model::BoxSpec;
use tinybox_sdk::model::WorkspaceSource;

use super::{Claim, Kit, Status, probes};

/// The kit's probe image, under a registry name that resolves nowhere.
const KIT_IMAGE: &str = "tinybox.invalid/kit-probe:1";

impl Kit<'_> {
    /// Probes `claims` (declared snapshot and fork claims) on a box of the
    /// kit's image, recording each; skipped, with the reason, when no
    /// such box can be made here.
    pub(super) async fn image_claims(&mut self, spec: &BoxSpec, claims: &[Claim]) {
        let Some(images) = self.tb.images() else {
            return self.skip_claims(claims, "the engine has no store to import the kit's probe image into");
        };
        let applets = minimal::busybox_applets();
        let layer = minimal::busybox_layer(&applets.iter().map(String::as_str).collect::<Vec<_>>());
        let Some(layer) = layer else {
            return self.skip_claims(
                claims,
                "the kit builds its probe image from a static /bin/busybox, which this machine lacks (busybox-static)",
            );
        };
        let config = serde_json::json!({ "Env": ["PATH=/bin"], "Cmd": ["/bin/sh"] });
        let archive = minimal::save_archive(KIT_IMAGE, &[layer], config);
        let t = Instant::now();
        let imported =
            images.import(ImportSource::Reader(Box::new(std::io::Cursor::new(archive))), "the kit's probe image").await;
        self.op("image import", t.elapsed(), imported.is_ok());
        if let Err(e) = imported {
            return self.skip_claims(claims, &format!("cannot import the kit's probe image: {e}"));
        }
        let mut from = spec.clone();
        from.source = Some(WorkspaceSource::OciImage { reference: KIT_IMAGE.to_owned() });
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
        let _ = images.remove(KIT_IMAGE);
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
