//! What a create that asked for a pool got: a leaf beneath the pools and
//! the request that reports it.

use serde::Serialize;

/// What a create that asked for a pool got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum PoolOutcome {
    /// A ready box was handed out; `left` were still ready after it.
    Taken { pool: String, left: usize },
    /// None was ready: the box was created cold.
    Empty { pool: String },
    /// The request differs from the pool's: the box was created cold.
    Differs { pool: String, fields: Vec<String> },
}

impl PoolOutcome {
    pub fn pool(&self) -> &str {
        match self {
            PoolOutcome::Taken { pool, .. } | PoolOutcome::Empty { pool } | PoolOutcome::Differs { pool, .. } => pool,
        }
    }
}

/// What a create that named a pool got from it, said the same way to a
/// person and to a program: a box made cold is as visible in `--json` as
/// on a terminal, with why and what refills the pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolHandOut {
    #[serde(flatten)]
    pub outcome: PoolOutcome,
    /// A daemon holds the store's supervisor lock, and refills the pool.
    pub refilled: bool,
    /// One line for a person: what happened, and what to do about it.
    pub note: String,
}

impl PoolHandOut {
    pub fn new(outcome: PoolOutcome, refilled: bool) -> PoolHandOut {
        let pool = outcome.pool();
        let refill = if refilled {
            String::new()
        } else {
            format!("no daemon refills it (`tinybox daemon start`, or `tinybox pool fill {pool}` now)")
        };
        let note = match &outcome {
            PoolOutcome::Taken { left, .. } if refilled => format!("taken from pool {pool} ({left} left)"),
            PoolOutcome::Taken { left, .. } => format!("taken from pool {pool} ({left} left; {refill})"),
            PoolOutcome::Empty { .. } if refilled => format!(
                "pool {pool} had no box ready: created cold (the daemon is refilling it; --pool-only refuses instead)"
            ),
            PoolOutcome::Empty { .. } => {
                format!("pool {pool} had no box ready: created cold, and {refill} (--pool-only refuses instead)")
            }
            PoolOutcome::Differs { fields, .. } => format!(
                "the request differs from pool {pool}'s in {}: created cold (--pool-only refuses instead)",
                fields.join(", ")
            ),
        };
        PoolHandOut { outcome, refilled, note }
    }
}
