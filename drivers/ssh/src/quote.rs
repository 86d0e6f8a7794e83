//! The one place in tinybox where a bug is a command-injection bug.
//!
//! ssh's exec channel carries a command *string*, which the remote user's
//! login shell parses (sshd runs `$SHELL -c STRING`). tinybox passes
//! argument vectors precisely so nothing has to quote; this file turns one
//! back into a string, and nothing else in tinybox does.
//!
//! Pure functions only: bytes in, bytes out. The rules:
//!
//! - **Supported shells: the POSIX family** (sh, dash, bash, zsh, ksh, mksh,
//!   ash/busybox, yash, posh). Every word is single-quoted; a `'` inside one
//!   becomes `'\''`. Inside single quotes a POSIX shell gives no character a
//!   meaning — not `$`, `` ` ``, `\`, `!`, `*`, newline — so every byte but
//!   NUL reaches the program as it was.
//! - **Not supported: fish, csh/tcsh** and anything else. fish reads `\'` and
//!   `\\` inside single quotes, csh cannot hold a newline in them; the same
//!   string would mean something else there. The driver finds the login
//!   shell once per connection ([`PROBE`], [`classify_probe`]) and refuses
//!   these before sending any quoted command.
//! - **Plain commands need no shell at all.** A command whose words are all
//!   drawn from `[A-Za-z0-9_./-]` (and whose program does not start with `-`),
//!   with no cwd and no environment, becomes `exec w1 w2 ...`: no quote, no
//!   metacharacter, parsed alike by every shell named above, fish and tcsh
//!   included. Those skip the probe (reading a fingerprint marker is one).
//! - **NUL cannot be carried** (a C string ends at it): refused.
//! - **Non-UTF-8 bytes:** the functions here work on bytes, but the
//!   protocol's `argv`, `cwd` and `env` are JSON strings, so today only UTF-8
//!   reaches them.
//! - `cd DIR && exec ...`, never `;`: a missing directory fails the command
//!   rather than running it somewhere else. A relative DIR gets `./` in front
//!   so CDPATH cannot redirect it and a leading `-` is not an option.
//! - Environment: `exec env [-i] -- 'K=V' ... 'prog' args`. `env` rather than
//!   shell assignments, because a variable name need not be a shell
//!   identifier. A program named with `=` or a leading `-` cannot follow
//!   `env` (or dash's `exec`) unambiguously and is refused in that form.

use std::collections::BTreeMap;

/// Why a command cannot be turned into a remote command line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuoteError {
    #[error("the argument vector is empty")]
    EmptyArgv,
    #[error("argument {index} contains NUL, which no command line can carry")]
    NulInArg { index: usize },
    #[error("the working directory contains NUL, which no command line can carry")]
    NulInCwd,
    #[error("the working directory is empty")]
    EmptyCwd,
    #[error("environment variable {name:?} is invalid: names are non-empty without '=' or NUL, values without NUL")]
    BadEnv { name: String },
    #[error(
        "program name {program:?} starts with '-' or contains '=', so it cannot follow `env` unambiguously on the remote side; name it by a path such as ./{program}"
    )]
    AmbiguousProgram { program: String },
}

/// A remote command line, and whether it is plain (no quoting was needed,
/// so every supported and unsupported shell parses it alike).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteCommand {
    pub text: Vec<u8>,
    pub plain: bool,
}

/// Bytes every shell we know treats as an ordinary word character.
fn is_plain_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/' | b'-')
}

/// A word every shell reads as itself, unquoted.
pub fn is_plain_word(word: &[u8]) -> bool {
    !word.is_empty() && word.iter().copied().all(is_plain_byte)
}

/// One word, single-quoted for a POSIX shell: `'` becomes `'\''`.
pub fn quote_word(word: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(word.len() + 2);
    out.push(b'\'');
    for &b in word {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

/// The string the remote login shell parses to run `argv` in `cwd` with
/// `env` added to (or, with `clear_env`, replacing) its environment.
pub fn command_line<A: AsRef<[u8]>>(
    argv: &[A],
    cwd: Option<&[u8]>,
    env: &BTreeMap<Vec<u8>, Vec<u8>>,
    clear_env: bool,
) -> Result<RemoteCommand, QuoteError> {
    let (program, _) = argv.split_first().ok_or(QuoteError::EmptyArgv)?;
    for (index, arg) in argv.iter().enumerate() {
        if arg.as_ref().contains(&0) {
            return Err(QuoteError::NulInArg { index });
        }
    }
    for (name, value) in env {
        if name.is_empty() || name.contains(&b'=') || name.contains(&0) || value.contains(&0) {
            return Err(QuoteError::BadEnv { name: String::from_utf8_lossy(name).into_owned() });
        }
    }
    if let Some(dir) = cwd {
        if dir.is_empty() {
            return Err(QuoteError::EmptyCwd);
        }
        if dir.contains(&0) {
            return Err(QuoteError::NulInCwd);
        }
    }
    let program = program.as_ref();
    let plain = cwd.is_none()
        && env.is_empty()
        && !clear_env
        && !program.starts_with(b"-")
        && argv.iter().all(|a| is_plain_word(a.as_ref()));
    let mut text = Vec::new();
    if plain {
        text.extend_from_slice(b"exec");
        for arg in argv {
            text.push(b' ');
            text.extend_from_slice(arg.as_ref());
        }
        return Ok(RemoteCommand { text, plain: true });
    }
    if let Some(dir) = cwd {
        text.extend_from_slice(b"cd ");
        if dir.starts_with(b"/") {
            text.extend(quote_word(dir));
        } else {
            text.extend(quote_word(&[b"./", dir].concat()));
        }
        text.extend_from_slice(b" && ");
    }
    text.extend_from_slice(b"exec");
    // dash's `exec` takes no `--`, so a program starting with `-` goes through env.
    if clear_env || !env.is_empty() || program.starts_with(b"-") {
        if program.contains(&b'=') || program.starts_with(b"-") {
            return Err(QuoteError::AmbiguousProgram { program: String::from_utf8_lossy(program).into_owned() });
        }
        text.extend_from_slice(b" env");
        if clear_env {
            text.extend_from_slice(b" -i");
        }
        text.extend_from_slice(b" --");
        for (name, value) in env {
            text.push(b' ');
            text.extend(quote_word(&[name.as_slice(), b"=", value.as_slice()].concat()));
        }
    }
    for arg in argv {
        text.push(b' ');
        text.extend(quote_word(arg.as_ref()));
    }
    Ok(RemoteCommand { text, plain: false })
}

/// The same for the protocol's string-typed run parameters.
pub fn command_line_str(
    argv: &[String],
    cwd: Option<&str>,
    env: &BTreeMap<String, String>,
    clear_env: bool,
) -> Result<(String, bool), QuoteError> {
    let env: BTreeMap<Vec<u8>, Vec<u8>> =
        env.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())).collect();
    let cmd = command_line(argv, cwd.map(str::as_bytes), &env, clear_env)?;
    // Every piece was UTF-8 and quoting adds only ASCII.
    let text = String::from_utf8(cmd.text).expect("quoting UTF-8 yields UTF-8");
    Ok((text, cmd.plain))
}

/// Sent once per connection before any quoted command: prints the login
/// shell and how it reads two single-quoted words. Harmless in every shell
/// we know: no word in it does anything but print.
pub const PROBE: &str = r#"echo "$SHELL"; printf '%s\n' 'tinybox\\probe' 'single'\''quote'"#;

/// What a POSIX shell prints for the two words of [`PROBE`].
const PROBE_WORDS: [&str; 2] = ["tinybox\\\\probe", "single'quote"];

/// Login shells whose quoting is POSIX single quoting, by program name.
pub const SUPPORTED_SHELLS: &[&str] =
    &["sh", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "mksh-static", "ash", "busybox", "yash", "posh"];

/// Login shells known not to parse POSIX quoting, named in the refusal.
const KNOWN_UNSUPPORTED: &[&str] = &["fish", "csh", "tcsh", "rc", "es", "nu", "xonsh", "elvish", "pwsh", "rbash"];

/// The verdict on a remote login shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShellVerdict {
    /// A POSIX shell: quoted commands may be sent. Holds its path.
    Posix(String),
    /// Not one we can quote for; the text says which and why.
    Refused(String),
}

/// Reads the probe's output (stdout of [`PROBE`] run by the login shell).
/// Both tests must pass: the shell's name is on the list, and it read the
/// quoted words as a POSIX shell does.
pub fn classify_probe(stdout: &[u8]) -> ShellVerdict {
    let text = String::from_utf8_lossy(stdout);
    let mut lines = text.lines();
    let shell = lines.next().unwrap_or("").trim().to_owned();
    let words: Vec<&str> = lines.collect();
    let name = shell.rsplit('/').next().unwrap_or("").trim_start_matches('-').to_owned();
    let supported = SUPPORTED_SHELLS.join(", ");
    if shell.is_empty() {
        return ShellVerdict::Refused(format!(
            "cannot tell the remote login shell ($SHELL is empty); tinybox quotes commands for POSIX shells only ({supported})"
        ));
    }
    if KNOWN_UNSUPPORTED.contains(&name.as_str()) {
        return ShellVerdict::Refused(format!(
            "the remote login shell is {shell}, which does not parse POSIX quoting; tinybox refuses to send it a quoted command. Supported login shells: {supported} (change it with `chsh -s /bin/sh`, or use a remote user whose shell is one of them)"
        ));
    }
    if !SUPPORTED_SHELLS.contains(&name.as_str()) {
        return ShellVerdict::Refused(format!(
            "the remote login shell is {shell}, which tinybox does not know to be POSIX; supported login shells: {supported}"
        ));
    }
    if words != PROBE_WORDS {
        return ShellVerdict::Refused(format!(
            "the remote login shell {shell} did not read single quotes as a POSIX shell does (it printed {words:?}); tinybox refuses to send it a quoted command"
        ));
    }
    ShellVerdict::Posix(shell)
}

#[cfg(test)]
#[path = "quote_tests.rs"]
mod tests;
