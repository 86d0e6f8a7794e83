//! One front end of tinybox behind one trait, so the use cases are written
//! once and run through each: the CLI (`tinybox` processes), the module
//! (the cdylib's C ABI, from a Python ctypes host), MCP (`tinybox mcp` on
//! stdio) and the HTTP API's `/v1` routes (`tinybox serve`). Each
//! implementation only translates a verb into its front end's words and
//! its answer back; nothing here decides what a box may do. What a front
//! end cannot offer at all is [`Refused::Unoffered`] with the reason, never
//! an emulation (ADR 0039).

pub mod cli;
pub mod http;
pub mod mcp;
pub mod module;
pub mod probe;

use std::path::Path;

/// How a verb ended when it did not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The front end's refusal, as it printed it (stderr, a tool error's
    /// text, an error body's message, a module error's message).
    Line(String),
    /// The front end has no way to ask for this at all.
    Unoffered(&'static str),
}

impl Refused {
    /// The refusal's line; panics (naming `what`) when the verb is unoffered.
    pub fn line(self, what: &str) -> String {
        match self {
            Refused::Line(l) => l,
            Refused::Unoffered(why) => panic!("{what}: unoffered ({why}), where a refusal was expected"),
        }
    }
}

pub type Answer<T> = Result<T, Refused>;

/// What the use cases ask a box to be made with.
#[derive(Debug, Clone, Default)]
pub struct Ask {
    pub image: Option<String>,
    pub pids: Option<u64>,
    /// Refuse any sandbox below the floor for untrusted code. The servers
    /// (MCP, HTTP) ask for it on every box, whatever is asked here.
    pub untrusted: bool,
}

/// One command's end, as bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i32,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    pub name: String,
    pub kind: String,
    pub size: u64,
}

/// A front end, started on one sandbox over a store of its own.
pub trait FrontEnd {
    /// A command started and not yet waited for.
    type Running;

    /// The front end's name, as test names spell it.
    fn name(&self) -> &'static str;
    /// The store directory every verb of this front end works on.
    fn store(&self) -> &Path;
    /// Makes a box on the sandbox this front end was started on.
    fn create(&mut self, ask: &Ask) -> Answer<String>;
    /// Runs `argv` in `id` with `stdin` as its input, to its end.
    fn exec(&mut self, id: &str, argv: &[&str], stdin: &[u8]) -> Answer<Ran>;
    /// Starts `argv` in `id` and returns at once, the command running.
    fn start(&mut self, id: &str, argv: &[&str]) -> Answer<Self::Running>;
    /// Cancels a started command the front end's own way.
    fn cancel(&mut self, running: Self::Running) -> Answer<()>;
    fn write_file(&mut self, id: &str, path: &str, bytes: &[u8]) -> Answer<()>;
    fn read_file(&mut self, id: &str, path: &str) -> Answer<Vec<u8>>;
    /// The directory's entries, sorted by name.
    fn list_dir(&mut self, id: &str, path: &str) -> Answer<Vec<Entry>>;
    /// Asks for a snapshot of `id`; its id.
    fn snapshot(&mut self, id: &str) -> Answer<String>;
    fn remove(&mut self, id: &str) -> Answer<()>;
    /// Ends the front end itself with `running` still in flight: a server
    /// removes the boxes it made; a front end that is no server says so.
    fn end_with_in_flight(&mut self, running: &Self::Running) -> Answer<()>;
}

/// The text of a refusal line without the front end's `tinybox: ` prefix:
/// core's own words.
pub fn core_words(line: &str) -> &str {
    line.trim_end_matches('\n').strip_prefix("tinybox: ").unwrap_or(line.trim_end_matches('\n'))
}

/// A refusal line as one line: the text without its one final newline.
pub fn one_line(what: &str, text: &str) -> String {
    let line = text.strip_suffix('\n').unwrap_or(text);
    assert!(!line.is_empty() && !line.contains('\n'), "{what}: not one line: {text:?}");
    line.to_owned()
}

/// Standard base64, as every JSON front end spells bytes.
pub fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The bytes of standard base64 `text`; panics naming `what` when it is not.
pub fn unb64(what: &str, text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap_or_else(|e| panic!("{what}: not base64 ({e}): {text}"))
}

/// A JSON stream field as bytes: `name` (text) or `name_base64`.
pub fn json_bytes(what: &str, v: &serde_json::Value, name: &str) -> Vec<u8> {
    match v.get(format!("{name}_base64")).and_then(|b| b.as_str()) {
        Some(b) => unb64(what, b),
        None => v[name].as_str().unwrap_or_else(|| panic!("{what}: no {name} in {v}")).as_bytes().to_vec(),
    }
}
