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
