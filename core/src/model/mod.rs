//! The model core owns: specs, placements, lifecycles and box records. The
//! vocabulary shared with drivers lives in `tinybox_sdk::model` and is
//! re-exported here.

mod creator;
mod error;
pub mod info;
mod network;
pub mod spec;

pub use creator::Creator;
pub use error::SpecError;
pub use info::{BoxInfo, Instance, PendingSnapshot, Phase, SnapshotRecord};
pub use network::NetworkChoice;
pub use spec::{BoxSpec, Lifecycle, PASSTHROUGH, Placement};
pub use tinybox_sdk::model::*;

#[cfg(test)]
mod tests;
