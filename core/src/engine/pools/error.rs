//! Why a pool could not be used as asked, and the size bound its message
//! quotes: a leaf beneath the pools, gathered by `crate::Error`.

/// The most boxes one pool keeps ready.
pub const MAX_POOL_SIZE: u32 = 64;

/// Why a pool could not be used as asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PoolError {
    #[error("no pool named {0}; `tinybox pool ls` lists the pools")]
    NotFound(String),
    #[error("pool {0} exists; `tinybox pool rm {0}` removes it first")]
    Exists(String),
    #[error("a pool's size is 1 to {MAX_POOL_SIZE}, not {0}")]
    Size(u32),
    #[error("pools serve ephemeral boxes; a persistent box is created on its own, without --pool")]
    Persistent,
    #[error("a pool's boxes take their env when handed out; give --env to `tinybox create --pool`, not to the pool")]
    Env,
    #[error("pools live in a store directory; this engine has none")]
    NoStore,
    #[error("pool {pool}'s recorded request cannot be read ({detail}); `tinybox pool rm {pool}` and create it again")]
    Unreadable { pool: String, detail: String },
    #[error("pool {pool} has no box ready (--pool-only refuses a cold create); {}", refill(*.filling))]
    Empty {
        pool: String,
        /// How many of its boxes are being made, when a daemon (the
        /// supervisor lock's holder) refills it; `None` when nothing does.
        filling: Option<usize>,
    },
    #[error(
        "the request differs from pool {pool}'s in {} (--pool-only refuses a cold create); `tinybox pool ls` shows what the pool makes",
        .fields.join(", ")
    )]
    Differs { pool: String, fields: Vec<String> },
}

/// Who refills an empty pool, said as it is: the daemon when one holds
/// the store's supervisor lock, else nobody until it is started.
fn refill(filling: Option<usize>) -> String {
    match filling {
        Some(0) => "the daemon refills it at its next round (`tinybox daemon status` says why when it cannot)".into(),
        Some(n) => format!("the daemon is refilling it: {n} filling"),
        None => "`tinybox daemon start` refills pools".into(),
    }
}
