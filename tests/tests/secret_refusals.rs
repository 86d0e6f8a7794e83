//! `--secret`, `--secret-host` and `--secret-header` on `tinybox create`
//! (ADR 0032): each request breaking a rule is refused in one line naming
//! the value and the rule, before any driver or proxy is asked, and the
//! store is left as it was; a sandbox that does not declare
//! `secret_injection` is refused by the gate. Run as this user.

use std::path::PathBuf;

use tinybox_tests::boxes::{BoxEnv, Principal};

#[test]
fn each_bad_secret_request_is_one_line_and_creates_nothing() {
    let env = BoxEnv::new(&Principal::Me);
    let ws = env.workspace.path().to_str().unwrap().to_owned();
    let token = env.workspace.path().join("token");
    std::fs::write(&token, "real-value\n").unwrap();
    let empty = env.workspace.path().join("empty");
    std::fs::write(&empty, "").unwrap();
    let src = format!("T=file:{}", token.display());
    let empty_src = format!("T=file:{}", empty.display());
    let base = ["create", "--sandbox", "namespace", "--workspace", &ws, "--allow-host", "api.test"];
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["--secret", &src, "--secret-host", "U=api.test"],
            r#"secret binding "U=api.test" names secret U, which no --secret defines"#.into(),
        ),
        (
            vec!["--secret", "T=file:/nonexistent/tinybox-token", "--secret-host", "T=api.test"],
            r#"secret T source "file:/nonexistent/tinybox-token" gives no value: /nonexistent/tinybox-token: "#.into(),
        ),
        (
            vec!["--secret", &empty_src, "--secret-host", "T=api.test"],
            format!(r#"secret T source "file:{}" gives no value: it is empty"#, empty.display()),
        ),
        (
            vec!["--secret", "T=env:TINYBOX_TEST_SURELY_UNSET", "--secret-host", "T=api.test"],
            r#"secret T source "env:TINYBOX_TEST_SURELY_UNSET" gives no value: variable TINYBOX_TEST_SURELY_UNSET"#
                .into(),
        ),
        (vec!["--secret", "T=vault:x", "--secret-host", "T=api.test"], "is none of env:VAR, file:PATH or cmd:COMMAND".into()),
        (
            // A command that fails: its last error line, never its output (the value's place).
            vec!["--secret", "T=cmd:printf real-%s value; echo no token here >&2; exit 4", "--secret-host", "T=api.test"],
            "gives no value: the command failed (exit status: 4): no token here".into(),
        ),
        (
            vec!["--secret", &src, "--secret-host", "T=elsewhere.test"],
            r#"secret binding "T=elsewhere.test" names host "elsewhere.test", which is not on the allowlist; add --allow-host elsewhere.test"#.into(),
        ),
        (
            vec!["--secret", &src, "--secret-header", "api.test=Authorization: Bearer nothing"],
            r#"secret header "Authorization: Bearer nothing" for api.test: it names no secret; put {NAME} where a secret's value goes"#.into(),
        ),
        (vec!["--secret", &src], "secret T is bound to no host".into()),
        (
            vec!["--secret", &src, "--secret-host", "T=api.test", "--env", "T=x"],
            "env T is also a secret's name".into(),
        ),
    ];
    let before = tinybox_tests::tree_contents(env.store.path());
    for (extra, want) in &cases {
        let mut args = base.to_vec();
        args.extend(extra);
        assert_refused(&env, &args, want, Some(&before));
    }
    // No allowlist: nothing would put the secret in.
    let no_allowlist =
        ["create", "--sandbox", "namespace", "--workspace", &ws, "--secret", &src, "--secret-host", "T=api.test"];
    assert_refused(&env, &no_allowlist, "secrets need an allowlist network", Some(&before));
    // A sandbox that does not declare secret_injection: the gate, before dispatch.
    let mut passthrough = vec!["create", "--sandbox", "passthrough", "--workspace", &ws, "--allow-host", "api.test"];
    passthrough.extend(["--secret", &src, "--secret-host", "T=api.test"]);
    let gate =
        "sandbox passthrough does not support secret_injection (its boxes' egress does not go through tinybox's proxy";
    assert_refused(&env, &passthrough, gate, None);
    // The gate's refusal came after the store was opened (its namespace
    // recorded, as for any refused capability), but no box, no proxy.
    assert!(!env.store.path().join("egress").exists(), "a proxy directory was made");
    let out = env.run(&["--json", "ls"]);
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap(), serde_json::json!([]));
}

/// `before`: the store as it must be left, where the refusal comes before it is opened.
fn assert_refused(env: &BoxEnv, args: &[&str], want: &str, before: Option<&[(PathBuf, Vec<u8>)]>) {
    let out = env.run(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?}: not refused: {err}");
    assert_eq!(out.stdout, b"", "{args:?}: no box id");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: one line: {err}");
    assert!(lines[0].contains(want), "{args:?}: {err:?} should say {want:?}");
    assert!(!err.contains("real-value"), "{args:?}: the value itself is never quoted: {err}");
    if let Some(before) = before {
        assert_eq!(tinybox_tests::tree_contents(env.store.path()), before, "{args:?}: the store changed");
    }
}
