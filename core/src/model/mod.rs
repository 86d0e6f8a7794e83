//! The model core owns: specs, placements, lifecycles and box records. The
//! vocabulary shared with drivers lives in `tinybox_sdk::model` and is
//! re-exported here.

pub mod info;
pub mod spec;

pub use info::{BoxInfo, Instance, PendingSnapshot, Phase, SnapshotRecord};
pub use spec::{BoxSpec, Lifecycle, PASSTHROUGH, Placement, SpecError};
pub use tinybox_sdk::model::*;

#[cfg(test)]
mod tests;
