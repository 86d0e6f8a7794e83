//! A request over the operator's ceiling: a leaf beneath the ceiling,
//! gathered by `crate::Error`.

/// A request over the operator's ceiling.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CeilingError {
    #[error(
        "{what} {asked} is over this server's ceiling of {ceiling}; ask for {ceiling} or less (the operator sets it when starting `tinybox mcp` or `tinybox serve`)"
    )]
    Over { what: &'static str, asked: String, ceiling: String },
    #[error(
        "network egress is not allowed by this server (the operator started it with --network deny); boxes have no network"
    )]
    Network,
}
