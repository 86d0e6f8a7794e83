//! Turning a failed docker command into an error a person can act on.
//! docker reports everything on stderr with exit status 1 or 125, so the
//! cause is read from the text.

use tinybox_sdk::capture::Captured;
use tinybox_sdk::protocol::DriverError;

/// What went wrong, as far as the docker CLI's stderr says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The host has no docker CLI (the host driver answers 127).
    NoCli,
    /// The CLI ran but could not reach a daemon.
    NoDaemon,
    /// The daemon went away while it handled the request (it crashed or
    /// restarted): what the request had done by then is unknown.
    Lost,
    NoSuchContainer,
    NoSuchImage,
    /// `docker run`'s entrypoint (our `sh`) is not in the image.
    NoShell,
    /// Another container already has the name.
    NameInUse,
    /// The daemon is already removing the container (a `docker rm` whose
    /// client was killed goes on in the daemon).
    RemovalInProgress,
    Other,
}

pub fn cause(c: &Captured) -> Cause {
    let err = String::from_utf8_lossy(&c.stderr);
    if c.status.code == Some(127) && err.contains("tinybox: docker:") {
        Cause::NoCli
    } else if err.contains("Cannot connect to the Docker daemon")
        || err.contains("Is the docker daemon running")
        || err.contains("permission denied while trying to connect to the Docker daemon")
    {
        Cause::NoDaemon
    } else if err.contains("error during connect") || err.contains("unexpected EOF") {
        Cause::Lost
    } else if err.contains("No such container") {
        Cause::NoSuchContainer
    } else if err.contains("No such image") || err.contains("No such object") {
        Cause::NoSuchImage
    } else if err.contains("exec: \"sh\": executable file not found") {
        Cause::NoShell
    } else if err.contains("is already in use by container") {
        Cause::NameInUse
    } else if err.contains("is already in progress") {
        Cause::RemovalInProgress
    } else {
        Cause::Other
    }
}

/// The error for a docker command that failed doing `what`, for causes that
/// read the same whatever was being done.
pub fn error(what: &str, c: &Captured) -> DriverError {
    let stderr = c.stderr_text();
    match cause(c) {
        Cause::NoCli => DriverError::unavailable(format!(
            "no docker CLI on the box's host ({stderr}); install docker there (docker.io on Debian)"
        )),
        Cause::NoDaemon => DriverError::unavailable(format!("docker daemon not reachable on the box's host: {stderr}")),
        Cause::Lost => DriverError::interrupted(format!(
            "the docker daemon on the box's host went away during {what}, so what it did is unknown: {stderr}"
        )),
        Cause::NoSuchContainer => DriverError::not_found(format!("{what}: no such container ({stderr})")),
        _ => DriverError::failed(format!("{what} failed ({}): {stderr}", c.status)),
    }
}
