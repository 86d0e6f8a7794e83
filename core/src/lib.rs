//! tinybox's engine. Holds the model, the store, the capability gate, the
//! reaper and the client side of the driver protocol; `Tinybox` is the API
//! the CLI and the module front ends call.
//!
//! It does not touch a sandbox's mechanism itself: every host and sandbox
//! except passthrough is an out-of-process driver, and core's job is to
//! decide — from what a driver declared — whether an operation is allowed
//! before asking for it.

pub mod capture;
pub mod ceiling;
pub mod clock;
pub mod driver;
pub mod egress;
pub mod engine;
pub mod error;
pub mod gate;
pub mod hosts;
pub mod images;
pub mod model;
pub mod paths;
pub mod request;
pub mod store;
pub mod supervisor;
pub mod sync;
pub mod trust;

pub use engine::{
    BoxView, CopyError, CopyOutcome, CopyRequest, CopyRoute, Direction, DriverListing, DriverReport, ExecOutcome,
    HostAdded, Local, ReapOutcome, Target, Tinybox, TrustWord,
};
pub use error::{Error, ErrorKind, Result};
pub use request::{CreatePlan, CreateRequest, Created, SandboxChoice};
