//! tinybox's engine. Holds the model, the store, the capability gate, the
//! reaper and the client side of the driver protocol.
//!
//! It does not touch a sandbox's mechanism itself: every host and sandbox
//! except passthrough is an out-of-process driver, and core's job is to
//! decide — from what a driver declared — whether an operation is allowed
//! before asking for it.

pub mod clock;
pub mod model;
pub mod store;
