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
//! - **No value of the environment is ever in a command line**: the string
//!   is on the local `ssh`'s command line and on the remote shell's, which
//!   every user of either machine reads. The values go first, on ssh's
//!   stdin, into a 0600 file the remote side makes ([`UPLOAD_ENV`],
//!   [`env_script`]: one `export NAME='VALUE'` a line); the command then
//!   names only that file, which its `/bin/sh` sources and removes before
//!   the program starts ([`sourced_command_line`], ADR 0027). So names must
//!   be shell identifiers there (refused otherwise). With `clear_env` the
//!   start is `exec env -i /bin/sh ...`, a shell with nothing of the
//!   login's. A program with a leading `-` cannot follow dash's `exec`
//!   unambiguously and is refused in the `env` forms.

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
        "environment variable {name:?} cannot be set on an ssh host: the remote shell sets a command's environment from a file, so names there are shell names ([A-Za-z_][A-Za-z0-9_]*); rename it"
    )]
    EnvNameNotShell { name: String },
    #[error("the remote file holding the environment, {path:?}, is not an absolute path of plain characters")]
    BadEnvFile { path: String },
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

/// The string the remote login shell parses to run `argv` in `cwd`, with
/// (`clear_env`) nothing of the login's environment or with all of it. An
/// environment of its own goes through [`sourced_command_line`] instead.
pub fn command_line<A: AsRef<[u8]>>(
    argv: &[A],
    cwd: Option<&[u8]>,
    clear_env: bool,
) -> Result<RemoteCommand, QuoteError> {
    let program = check(argv, cwd)?;
    let plain =
        cwd.is_none() && !clear_env && !program.starts_with(b"-") && argv.iter().all(|a| is_plain_word(a.as_ref()));
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
        text.extend(quote_word(&directory(dir)));
        text.extend_from_slice(b" && ");
    }
    text.extend_from_slice(b"exec");
    // dash's `exec` takes no `--`, so a program starting with `-` goes through env.
    if clear_env || program.starts_with(b"-") {
        if program.contains(&b'=') || program.starts_with(b"-") {
            return Err(QuoteError::AmbiguousProgram { program: String::from_utf8_lossy(program).into_owned() });
        }
        text.extend_from_slice(b" env");
        if clear_env {
            text.extend_from_slice(b" -i");
        }
        text.extend_from_slice(b" --");
    }
    for arg in argv {
        text.push(b' ');
        text.extend(quote_word(arg.as_ref()));
    }
    Ok(RemoteCommand { text, plain: false })
}

/// The checks every command line makes; its program.
fn check<'a, A: AsRef<[u8]>>(argv: &'a [A], cwd: Option<&[u8]>) -> Result<&'a [u8], QuoteError> {
    let (program, _) = argv.split_first().ok_or(QuoteError::EmptyArgv)?;
    for (index, arg) in argv.iter().enumerate() {
        if arg.as_ref().contains(&0) {
            return Err(QuoteError::NulInArg { index });
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
    Ok(program.as_ref())
}

/// A directory as `cd` takes it: absolute as it is, relative after `./`,
/// so CDPATH cannot redirect it and a leading `-` is not an option.
fn directory(dir: &[u8]) -> Vec<u8> {
    if dir.starts_with(b"/") { dir.to_vec() } else { [b"./", dir].concat() }
}

/// Run on the remote side with the environment file's bytes on its stdin
/// ([`env_script`]): makes a file only its user can read, writes the
/// bytes into it, and prints its absolute path (removed again if the copy
/// fails). Nothing in it is the caller's.
pub const UPLOAD_ENV: &str = r#"umask 077 && f=$(mktemp "${TMPDIR:-/tmp}/tinybox-env.XXXXXXXX") && case $f in /*) ;; *) f=$(pwd)/$f ;; esac && { cat >"$f" || { rm -f -- "$f"; exit 1; }; } && printf '%s\n' "$f""#;

/// What the remote `/bin/sh` of [`sourced_command_line`] runs: `$1` the
/// environment file, `$2` the directory, then the command. It enters the
/// directory (a missing one fails the command, the file removed), then
/// sources the file and removes it before anything else runs (a file that
/// does not source ends the command with 125).
const SOURCE_ENV: &str = r#"cd "$2" || { s=$?; rm -f -- "$1"; exit "$s"; }; . "$1"; s=$?; rm -f -- "$1"; [ "$s" = 0 ] || exit 125; shift 2; exec "$@""#;

/// The same with nothing of the login's environment: the PWD and OLDPWD
/// dash's `cd` exports go before the file's variables come (ones the file
/// sets are kept).
const SOURCE_ENV_CLEARED: &str = r#"cd "$2" || { s=$?; rm -f -- "$1"; exit "$s"; }; unset PWD OLDPWD; . "$1"; s=$?; rm -f -- "$1"; [ "$s" = 0 ] || exit 125; shift 2; exec "$@""#;

/// The environment file the remote `/bin/sh` sources: `export NAME='VALUE'`
/// a line, each value single-quoted ([`quote_word`]). A name must be a
/// shell name; NUL cannot be carried.
pub fn env_script(env: &BTreeMap<Vec<u8>, Vec<u8>>) -> Result<Vec<u8>, QuoteError> {
    let mut text = Vec::new();
    for (name, value) in env {
        let lossy = || String::from_utf8_lossy(name).into_owned();
        if name.is_empty() || name.contains(&b'=') || name.contains(&0) || value.contains(&0) {
            return Err(QuoteError::BadEnv { name: lossy() });
        }
        let shell_name = (name[0].is_ascii_alphabetic() || name[0] == b'_')
            && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_');
        if !shell_name {
            return Err(QuoteError::EnvNameNotShell { name: lossy() });
        }
        text.extend_from_slice(b"export ");
        text.extend_from_slice(name);
        text.push(b'=');
        text.extend(quote_word(value));
        text.push(b'\n');
    }
    Ok(text)
}

/// The string the remote login shell parses to run `argv` in `cwd` with
/// the environment in the remote file `env_file` ([`UPLOAD_ENV`]'s path)
/// added to the login's (or, with `clear_env`, alone): `exec [env -i]
/// /bin/sh -c SOURCE sh FILE DIR argv...`. It names the file, never a value.
pub fn sourced_command_line<A: AsRef<[u8]>>(
    argv: &[A],
    cwd: Option<&[u8]>,
    env_file: &[u8],
    clear_env: bool,
) -> Result<RemoteCommand, QuoteError> {
    let program = check(argv, cwd)?;
    if program.starts_with(b"-") {
        return Err(QuoteError::AmbiguousProgram { program: String::from_utf8_lossy(program).into_owned() });
    }
    if !env_file.starts_with(b"/") || !is_plain_word(env_file) {
        return Err(QuoteError::BadEnvFile { path: String::from_utf8_lossy(env_file).into_owned() });
    }
    let mut text: Vec<u8> = b"exec ".to_vec();
    if clear_env {
        text.extend_from_slice(b"env -i ");
    }
    text.extend_from_slice(b"/bin/sh -c ");
    text.extend(quote_word(if clear_env { SOURCE_ENV_CLEARED } else { SOURCE_ENV }.as_bytes()));
    text.extend_from_slice(b" sh ");
    text.extend(quote_word(env_file));
    text.push(b' ');
    text.extend(quote_word(&cwd.map_or_else(|| b".".to_vec(), directory)));
    for arg in argv {
        text.push(b' ');
        text.extend(quote_word(arg.as_ref()));
    }
    Ok(RemoteCommand { text, plain: false })
}

/// [`command_line`] for the protocol's string-typed run parameters.
pub fn command_line_str(argv: &[String], cwd: Option<&str>, clear_env: bool) -> Result<(String, bool), QuoteError> {
    let cmd = command_line(argv, cwd.map(str::as_bytes), clear_env)?;
    // Every piece was UTF-8 and quoting adds only ASCII.
    let text = String::from_utf8(cmd.text).expect("quoting UTF-8 yields UTF-8");
    Ok((text, cmd.plain))
}

/// [`env_script`] for the protocol's strings.
pub fn env_script_str(env: &BTreeMap<String, String>) -> Result<Vec<u8>, QuoteError> {
    env_script(&env.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())).collect())
}

/// [`sourced_command_line`] for the protocol's strings.
pub fn sourced_command_line_str(
    argv: &[String],
    cwd: Option<&str>,
    env_file: &str,
    clear_env: bool,
) -> Result<String, QuoteError> {
    let cmd = sourced_command_line(argv, cwd.map(str::as_bytes), env_file.as_bytes(), clear_env)?;
    Ok(String::from_utf8(cmd.text).expect("quoting UTF-8 yields UTF-8"))
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
