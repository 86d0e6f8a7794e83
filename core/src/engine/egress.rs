//! The engine's side of egress by allowlist (ADR 0020): each allowlist
//! box has its own proxy, started when the box is made, checked (and
//! started again if it died) before each command, stopped by `rm`, and its
//! decision log read by `tinybox logs --network`.

use std::collections::BTreeMap;

use tinybox_sdk::model::{BoxId, NetworkInForce};
use tinybox_sdk::protocol::EgressEndpoint;
use tinybox_sdk::protocol::egress::DEFAULT_RELAY_PORT;

use super::Tinybox;
use tinybox_egress::{InjectRules, SecretsSpec};

use crate::egress::{self, Decision, EgressError, ProxyDir};
use crate::error::Result;
use crate::model::{BoxInfo, Instance};

impl Tinybox {
    /// Where box `id`'s proxy lives; only a file store has such a place.
    fn proxy_dir(&self, namespace: &str, id: &BoxId) -> Result<ProxyDir, EgressError> {
        let store = self.store_dir.as_deref().ok_or(EgressError::NeedsFileStore)?;
        let store = std::path::absolute(store).unwrap_or_else(|_| store.to_owned());
        Ok(ProxyDir::of(&store, namespace, id))
    }

    /// Makes sure box `id`'s proxy runs over `entries` (and `secrets`,
    /// ADR 0032), and says where it listens and where the relay is, and
    /// the secrets' rules when there are any.
    pub(crate) async fn egress_ensure(
        &self,
        namespace: &str,
        id: &BoxId,
        entries: &[String],
        secrets: &SecretsSpec,
    ) -> Result<(EgressEndpoint, Option<InjectRules>)> {
        let dir = self.proxy_dir(namespace, id)?;
        let searched = self.drivers.config().search_dirs.clone();
        let program = crate::driver::discover::find_program(&searched, egress::PROGRAM)
            .ok_or(EgressError::NotFound { searched })?;
        let resolver = crate::paths::egress_resolver()?;
        let (entries, dir_, program_) = (entries.to_vec(), dir.clone(), program.clone());
        let (secrets, box_id) = (secrets.clone(), id.to_string());
        let rules = tokio::task::spawn_blocking(move || {
            let injection = (!secrets.is_empty()).then_some(egress::Injection { box_id: &box_id, spec: &secrets });
            egress::ensure_running(&dir_, &entries, &program_, resolver, injection)
        })
        .await
        .map_err(|e| EgressError::Start { dir: dir.path().to_owned(), detail: e.to_string() })??;
        Ok((EgressEndpoint { socket: dir.socket(), relay: program, port: DEFAULT_RELAY_PORT }, rules))
    }

    /// For a command in `instance` of box `info`: the endpoint to send (its
    /// proxy made sure of) and the proxy variables beneath the box's own
    /// environment; nothing for a box without an allowlist.
    pub(crate) async fn egress_for_exec(
        &self,
        info: &BoxInfo,
        instance: &Instance,
    ) -> Result<(Option<EgressEndpoint>, BTreeMap<String, String>)> {
        if instance.network != NetworkInForce::Allowlist {
            return Ok((None, info.spec.env.clone()));
        }
        let (endpoint, rules) =
            self.egress_ensure(&info.spec.namespace, &info.id, &instance.allow_hosts, &info.spec.secrets).await?;
        let mut env: BTreeMap<String, String> = endpoint.proxy_env().into_iter().collect();
        if rules.is_some() {
            env.extend(EgressEndpoint::ca_env());
        }
        env.extend(info.spec.env.clone());
        // Last: each secret's name holds its placeholder, never its value
        // (a request naming a secret in its env too is refused).
        env.extend(rules.iter().flat_map(InjectRules::env));
        Ok((Some(endpoint), env))
    }

    /// Stops box `id`'s proxy, if it has one, and removes its directory.
    pub(crate) async fn egress_discard(&self, namespace: &str, id: &BoxId) -> Result<()> {
        let Ok(dir) = self.proxy_dir(namespace, id) else { return Ok(()) };
        let path = dir.path().to_owned();
        tokio::task::spawn_blocking(move || egress::stop(&dir))
            .await
            .map_err(|e| EgressError::Start { dir: path, detail: e.to_string() })??;
        Ok(())
    }

    /// For a box with secrets that stops: its proxy and its secrets' rules
    /// go, so it resumes with a new CA and new placeholders (ADR 0032).
    pub(crate) async fn egress_end_secrets(&self, namespace: &str, id: &BoxId) -> Result<()> {
        let Ok(dir) = self.proxy_dir(namespace, id) else { return Ok(()) };
        let path = dir.path().to_owned();
        tokio::task::spawn_blocking(move || egress::end_secrets(&dir))
            .await
            .map_err(|e| EgressError::Start { dir: path, detail: e.to_string() })??;
        Ok(())
    }

    /// Every decision box `id`'s proxy logged, oldest first.
    pub fn network_log(&self, id: &BoxId) -> Result<Vec<Decision>> {
        let info = self.get(id)?;
        let network = info.workspace.as_ref().map(|w| w.network);
        if network != Some(NetworkInForce::Allowlist) {
            let network = network.map_or_else(|| "not made yet".to_owned(), |n| n.to_string());
            return Err(EgressError::NoProxy { id: id.clone(), network }.into());
        }
        let dir = self.proxy_dir(&info.spec.namespace, id)?;
        Ok(tinybox_egress::read_decisions_file(&dir.decisions()).map_err(EgressError::from)?)
    }
}
