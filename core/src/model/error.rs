//! A spec that breaks a rule: a leaf beneath the model, gathered by
//! `crate::Error`.

use tinybox_sdk::model::NonPositiveLimit;

use crate::egress::AllowlistError;

/// A spec that breaks a rule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error(transparent)]
    Limit(#[from] NonPositiveLimit),
    #[error("{0}")]
    Lifecycle(String),
    #[error("{0}")]
    Namespace(String),
    #[error(transparent)]
    Allowlist(#[from] AllowlistError),
    #[error("environment variable {0:?} is invalid; names are non-empty without '=' or NUL, values without NUL")]
    Env(String),
}
