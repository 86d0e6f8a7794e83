//! What a copy refuses or fails with: a leaf of the copy module, so the
//! error core gathers (`Error::Copy`) knows nothing of the copy code.

use std::path::PathBuf;

use tinybox_sdk::model::BoxId;

/// A copy that breaks a rule, or that the box could not do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CopyError {
    #[error(
        "{src:?} and {dst:?} name no box; one of them is BOX:PATH, as in `tinybox cp ./file box-1:/tmp/` (a local path with ':' starts with ./ or /)"
    )]
    NoBox { src: String, dst: String },
    #[error("{src:?} and {dst:?} both name a box; copy through this machine, one direction at a time")]
    TwoBoxes { src: String, dst: String },
    #[error(
        "{0} is a terminal; `-` is a tar stream, as in `tar -c -f - DIR | tinybox cp - BOX:/dst` or `tinybox cp BOX:/src - | tar -x -f -`"
    )]
    Terminal(&'static str),
    #[error("the path in box {box_id} is empty; name a file or directory, as in {box_id}:/tmp/out")]
    EmptyBoxPath { box_id: BoxId },
    #[error("{path:?} names no single file or directory (it ends in . or .. or is /); name the directory itself")]
    NoName { path: String },
    #[error("{path} does not exist here; check the path")]
    NoLocal { path: PathBuf },
    #[error("{path} is a {what}; tinybox cp copies files, directories and symlinks only")]
    LocalKind { path: PathBuf, what: &'static str },
    #[error("{path} is not an existing directory here; make it first or name a new file in an existing one")]
    NoLocalDir { path: PathBuf },
    #[error("{path} exists here and is not a directory; a directory cannot replace it (remove it, or copy elsewhere)")]
    NotADir { path: PathBuf },
    #[error("{path} exists and is a directory; a file cannot replace it (name a path inside it)")]
    DirInTheWay { path: PathBuf },
    #[error("box {box_id} has no {path}; check the path (`tinybox exec {box_id} -- ls` lists what is there)")]
    NoBoxPath { box_id: BoxId, path: String },
    #[error(
        "{path} is not an existing directory in box {box_id}; make it first (`tinybox exec {box_id} -- mkdir -p {path}`)"
    )]
    NoBoxDir { box_id: BoxId, path: String },
    #[error(
        "box {box_id} has no program {program}, which tinybox cp runs in the box; use an image that has sh and tar"
    )]
    NoProgram { box_id: BoxId, program: String },
    #[error("box {box_id} could not {what} (exit status {code}): {detail}")]
    BoxFailed { box_id: BoxId, what: &'static str, code: i32, detail: String },
    /// The tar stream from the box asked for something this side never writes.
    #[error("refused the box's tar: {0}; nothing past it was written")]
    Tar(TarRefusal),
    #[error("{path} is a {what} in box {box_id}, not a regular file; read a file, or copy with tinybox cp")]
    NotAFile { box_id: BoxId, path: String, what: String },
    #[error("{path} in box {box_id} is {size} bytes, over the {limit}-byte bound; copy it with tinybox cp instead")]
    TooBig { box_id: BoxId, path: String, size: u64, limit: u64 },
    #[error(
        "{path} is {size} bytes ({}), over the copy's bound of {}; nothing of the copy was left here (tinybox cp --max-size SIZE raises the bound)",
        human(*.size), human(*.limit)
    )]
    FileOverBound { path: String, size: u64, limit: u64 },
    #[error(
        "the copy stopped at its bound of {} written here; nothing of it was left here (tinybox cp --max-size SIZE raises the bound)",
        human(*.limit)
    )]
    WrittenOverBound { limit: u64 },
    #[error(
        "the tar stream stopped at the copy's bound of {} sent, cut short (tinybox cp --max-size SIZE raises the bound)",
        human(*.limit)
    )]
    StreamOverBound { limit: u64 },
    #[error(
        "{dst} passes through {link}, a symlink in box {box_id}'s workspace {ws}, which the box can point anywhere; copy to a path that does not pass through it",
        dst = .dst.display(), link = .link.display(), ws = .ws.display()
    )]
    ThroughBoxLink { dst: PathBuf, link: PathBuf, box_id: BoxId, ws: PathBuf },
    #[error("cannot reach {path} here: {detail}")]
    Local { path: PathBuf, detail: String },
    #[error(
        "{sandbox} box {box_id} keeps only {} between commands, so {path} would be gone when the copy ends; copy to {}/... instead",
        .keeps.join(", "), .keeps.first().map(String::as_str).unwrap_or("/workspace")
    )]
    NotKept { sandbox: String, box_id: BoxId, path: String, keeps: Vec<String> },
}

/// What in a box's tar stream this side never writes: each entry is
/// checked before anything of it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TarRefusal {
    #[error("the box sent an empty tar")]
    Empty,
    #[error("{path} climbs out with ..")]
    ClimbsOut { path: String },
    #[error("{path} is an absolute path")]
    Absolute { path: String },
    #[error("{path:?} names nothing")]
    NamesNothing { path: String },
    #[error("{path} is outside {root} (the path that was asked for)")]
    OutsideRoot { path: String, root: String },
    #[error("{path} would be written through a symlink or a file")]
    ThroughLink { path: String },
    #[error("{path} links to nothing")]
    LinksToNothing { path: String },
    #[error("{path} is a hard link to {target}, which is not a file this copy wrote")]
    HardLinkElsewhere { path: String, target: String },
    #[error("{path} is a {kind}; only files, directories and symlinks are written here")]
    Kind { path: String, kind: &'static str },
}

/// A size as a person reads it: `1 TiB`, `10 GiB`, `512 bytes`.
pub(super) fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} bytes");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 { format!("{value:.0} {}", UNITS[unit]) } else { format!("{value:.1} {}", UNITS[unit]) }
}
