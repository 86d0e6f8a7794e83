//! A box's environment reaches the docker CLI as an env file on a pipe,
//! never on its command line (`--env NAME=VALUE` is readable by every
//! user of the host for as long as the command runs). The values travel
//! to the client wrapper in its own environment, under names no program
//! reads (`tinybox_sdk::carried_env`); the wrapper prints them as the env
//! file's lines into a here-document on descriptor 5 and unsets them
//! before docker starts, and `--env-file /dev/fd/5` makes docker read it
//! (docs/adr/0027-values-off-command-lines.md). Neither the wrapper's
//! shell nor the docker CLI ever sees a box variable under its own name,
//! so a box's `PATH`, `LD_PRELOAD` or `DOCKER_HOST` steers neither.
//!
//! An env file is lines of `NAME=VALUE`, so what it cannot carry is
//! refused, in one line naming the variable, rather than changed: a value
//! holding a newline or ending in a carriage return, a name docker would
//! trim, read as a comment or refuse, and a line past docker's 64 KiB.

use std::collections::BTreeMap;

/// Where the docker CLI reads the box's environment.
pub const ENV_FILE: &str = "/dev/fd/5";

/// docker reads an env file with Go's line scanner, whose lines end at
/// 64 KiB.
const MAX_LINE: usize = 64 * 1024 - 1;

/// Why `env` cannot reach a docker box through an env file, if it cannot.
pub fn refusal(env: &BTreeMap<String, String>) -> Option<String> {
    let why = |name: &str, rule: &str| {
        Some(format!(
            "environment variable {name:?} cannot reach a docker box: {rule}; docker reads a box's environment from an \
             env file (a command line is readable by every user of the host), one NAME=VALUE a line; \
             pass such a value in a file in the box's workspace instead"
        ))
    };
    for (name, value) in env {
        if name.contains([' ', '\t']) {
            return why(name, "its name holds a space or a tab, which docker refuses in a name");
        }
        if name.starts_with(char::is_whitespace) || name.starts_with('#') || name.starts_with('\u{feff}') {
            return why(
                name,
                "its name starts with a space, '#' or a byte-order mark, which docker drops or reads as a comment",
            );
        }
        if value.contains('\n') {
            return why(name, "its value holds a newline, which would end its line");
        }
        if value.ends_with('\r') {
            return why(name, "its value ends with a carriage return, which docker drops with the line's end");
        }
        if name.len() + 1 + value.len() > MAX_LINE {
            return why(name, "it is longer than docker's 64 KiB line");
        }
    }
    None
}

/// The client wrapper ([`crate::argv::CLIENT_WRAPPER`]'s rule: the client
/// runs as a child, `exit $?`, so a killed client shows as a signal) that
/// feeds `$n` carried variables to the client as [`ENV_FILE`], and, with
/// `seccomp`, a profile on descriptor 3 from the argument after `$n`.
pub fn wrapper(seccomp: bool) -> String {
    use tinybox_sdk::carried_env::{each, unset_all};
    let lines = each(r#"printf '%s\n' "$kv""#);
    let (take, heredoc) = if seccomp {
        ("p=$1; shift\n", " 3<<TINYBOX_SECCOMP_END 5<<TINYBOX_ENV_END\n$p\nTINYBOX_SECCOMP_END\n")
    } else {
        ("", " 5<<TINYBOX_ENV_END\n")
    };
    // The expansions in a here-document are not scanned again, and no
    // value holds a newline, so none can end it early.
    format!("n=$1; shift\n{take}e=$({lines})\n{}\n\"$@\"{heredoc}$e\nTINYBOX_ENV_END\nexit $?", unset_all())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_env_file_cannot_carry_is_refused_by_name() {
        let ok: BTreeMap<String, String> = [
            ("A".to_owned(), "x=y z 'q' \"d\" $(no) `no` \\ \r mid".to_owned()),
            ("odd-name.1".to_owned(), String::new()),
            ("LONG".to_owned(), "v".repeat(MAX_LINE - 5)),
        ]
        .into();
        assert_eq!(refusal(&ok), None);
        for (name, value, rule) in [
            ("PEM", "line 1\nline 2", "newline"),
            ("CR", "x\r", "carriage return"),
            ("a b", "x", "space or a tab"),
            ("#c", "x", "comment"),
            ("\u{feff}B", "x", "byte-order mark"),
            ("LONG", &"v".repeat(MAX_LINE), "64 KiB"),
        ] {
            let env: BTreeMap<String, String> = [(name.to_owned(), value.to_owned())].into();
            let err = refusal(&env).unwrap_or_else(|| panic!("{name:?} accepted"));
            assert!(err.contains(rule) && err.contains(&format!("{name:?}")), "{err}");
            assert!(!err.contains(value) || value.len() < 2, "the refusal does not repeat the value: {err}");
        }
    }

    /// Runs the wrapper for real around `cat /dev/fd/5` (and fd 3 with a profile).
    fn fed(env: &BTreeMap<String, String>, seccomp: Option<&str>) -> String {
        let mut cmd = std::process::Command::new("sh");
        cmd.env_clear().env("PATH", "/usr/bin:/bin").envs(tinybox_sdk::carried_env::vars(env));
        cmd.args(["-c", &wrapper(seccomp.is_some()), "sh", &env.len().to_string()]);
        cmd.args(seccomp);
        let client = "cat /dev/fd/5; [ -z \"$2\" ] || { printf '|'; cat /dev/fd/3; }; printf '|'; env | grep -c '^TINYBOX_BOXENV_' || true";
        cmd.args(["sh", "-c", client, "client", "x", if seccomp.is_some() { "y" } else { "" }]);
        let out = cmd.output().unwrap();
        assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn the_wrapper_feeds_exactly_the_env_file_and_the_client_keeps_no_carrier() {
        let env: BTreeMap<String, String> = [
            ("A".to_owned(), "x=y z 'q' \"d\" $(no) `no` \\ end".to_owned()),
            ("PATH".to_owned(), "/workspace/bin".to_owned()),
            ("TINYBOX_ENV_END".to_owned(), "TINYBOX_ENV_END".to_owned()),
        ]
        .into();
        let expected: String = env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        assert_eq!(fed(&env, None), format!("{expected}|0\n"));
        let profile = "{\"a\": 1}\n$(no)";
        assert_eq!(fed(&env, Some(profile)), format!("{expected}|{profile}\n|0\n"));
    }
}
