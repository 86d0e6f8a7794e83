//! The vocabulary core and drivers share: names, capabilities, resources,
//! sources, network policy and commands.

pub mod capabilities;
pub mod exec;
pub mod names;
pub mod resources;
pub mod source;

pub use capabilities::{Feature, IsolationLevel, SandboxCapabilities, SnapshotSupport};
pub use exec::{ExecRequest, ExecRequestError, ExitStatus, TtySize};
pub use names::{BoxId, HostName, NameError, SandboxName, SnapshotId, TemplateName};
pub use resources::{Limit, NonPositiveLimit, Resources};
pub use source::{NetworkInForce, NetworkPolicy, PortMapping, SourceKind, WorkspaceSource};
