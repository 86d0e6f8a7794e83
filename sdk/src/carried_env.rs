//! A box's environment on its way through the host's helper programs.
//!
//! A value a caller gave a box never goes on a command line: every user
//! of the host reads `/proc/PID/cmdline`, while `/proc/PID/environ` is its
//! owner's alone. So a sandbox driver hands the values to the shell it
//! starts on the box's host in that shell's environment, through
//! `host.run`'s `env`, and the shell passes them on to the sandbox's own
//! reader (bwrap's `--args` descriptor, docker's `--env-file`) on a pipe.
//! Under their own names they would steer that shell and every host
//! program after it (`PATH`, `LD_PRELOAD`, `DOCKER_HOST`...), so each
//! travels as `TINYBOX_BOXENV_<n>=NAME=VALUE`, a name no program reads
//! (docs/adr/0027-values-off-command-lines.md).

use std::collections::BTreeMap;

/// The prefix of the carrying variables; `<prefix><n>` holds `NAME=VALUE`
/// (a name holds no `=`, so the first one ends it).
pub const PREFIX: &str = "TINYBOX_BOXENV_";

/// `env` as carrying variables, numbered from 0 in name order.
pub fn vars(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    env.iter().enumerate().map(|(i, (k, v))| (format!("{PREFIX}{i}"), format!("{k}={v}"))).collect()
}

/// A POSIX shell loop over `$n` carrying variables: for each, `kv` holds
/// its `NAME=VALUE` while `$1` (a shell command that reads `kv`) runs.
/// Numbers alone reach `eval`.
pub fn each(body: &str) -> String {
    format!(
        "i=0\nwhile [ \"$i\" -lt \"$n\" ]; do\n    eval \"kv=\\${{{PREFIX}$i}}\"\n    {body}\n    i=$((i + 1))\ndone"
    )
}

/// Unsets the `$n` carrying variables, so nothing started after holds them.
pub fn unset_all() -> String {
    format!("i=0; while [ \"$i\" -lt \"$n\" ]; do unset \"{PREFIX}$i\"; i=$((i + 1)); done")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_variable_is_carried_whole_and_read_back_exactly() {
        let env: BTreeMap<String, String> = [
            ("A".to_owned(), "x=y z".to_owned()),
            ("odd name".to_owned(), "$(no) `no` 'q' \"d\" \\ \n end".to_owned()),
            ("EMPTY".to_owned(), String::new()),
        ]
        .into();
        let carried = vars(&env);
        assert_eq!(carried["TINYBOX_BOXENV_0"], "A=x=y z");
        let script =
            format!("n=$1\n{}\n{}\nenv | grep -c '^{PREFIX}' || true", each(r#"printf '%s\0' "$kv""#), unset_all());
        let out = std::process::Command::new("sh")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .envs(&carried)
            .args(["-c", &script, "sh", &env.len().to_string()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let (fed, left) = text.rsplit_once('\0').unwrap();
        let fed: Vec<&str> = fed.split('\0').collect();
        let expected: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(fed, expected);
        assert_eq!(left.trim(), "0", "none left for what runs next");
    }
}
