//! The start shell (`sandbox::start_script`) run for real with `sh`: the
//! seccomp program on fd 3, from a pipe or a file, the caller's stdin kept,
//! each of the box's cgroups entered before the command, and the box's
//! environment on fd 5 for `bwrap --args`, in no host program's environment.

use super::*;

/// Runs the start shell for real with `sh`: `cgroups`, the program bytes
/// `program`, then `rest`, with `stdin` as its stdin.
fn run_start(cgroups: &[&str], program: &[u8], rest: &[&str], stdin: &[u8]) -> std::process::Output {
    use std::io::Write as _;
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &start_script(), "tinybox-start", "tasks", &cgroups.len().to_string()]);
    cmd.args(cgroups).arg("0").arg("pipe").arg(crate::seccomp::printf_format(program)).args(rest);
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn the_start_shell_hands_the_program_on_fd_3_and_keeps_the_caller_s_stdin() {
    // Every byte value, NUL included, as the filter's bytes are.
    let program: Vec<u8> = (0..=255u8).collect();
    let out = run_start(&[], &program, &["sh", "-c", "cat <&3; printf '|'; cat; exit 7"], b"the caller's stdin");
    assert_eq!(out.status.code(), Some(7), "the command's own status: {out:?}");
    let mut expected = program.clone();
    expected.extend_from_slice(b"|the caller's stdin");
    assert_eq!(out.stdout, expected);
    assert!(out.stderr.is_empty(), "{out:?}");
}

#[test]
fn the_start_shell_enters_each_cgroup_before_the_command_and_stops_at_one_it_cannot() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let paths: Vec<&str> = dirs.iter().map(|d| d.path().to_str().unwrap()).collect();
    // The command reads what was written before it started: 0, the start
    // shell itself (its one thread), in each directory's tasks.
    let out = run_start(&paths, b"x", &["sh", "-c", "cat \"$1/tasks\" \"$2/tasks\"", "sh", paths[0], paths[1]], b"");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0\n0\n", "{out:?}");

    let missing = dirs[0].path().join("gone");
    let missing = missing.to_str().unwrap();
    let marker = dirs[1].path().join("ran");
    let out = run_start(&[missing], b"x", &["touch", marker.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(125));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).lines().last(),
        Some(format!("tinybox: cannot enter cgroup {missing}").as_str())
    );
    assert!(!marker.exists(), "nothing runs outside the box's cgroup");
}

#[test]
fn the_start_shell_opens_a_program_file_on_fd_3_without_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let program: Vec<u8> = (0..=255u8).rev().collect();
    let file = dir.path().join("p.bpf");
    std::fs::write(&file, &program).unwrap();
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &start_script(), "tinybox-start", "tasks", "0", "0", "file", file.to_str().unwrap()]);
    // The shell execs the command: its pid is the start shell's own.
    cmd.args(["sh", "-c", "cat <&3; printf '|'; cat; exit 7"]);
    let out = cmd
        .stdin(std::fs::File::open(&file).unwrap())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let mut expected = program.clone();
    expected.push(b'|');
    expected.extend_from_slice(&program);
    assert_eq!(out.stdout, expected, "fd 3 is the file, stdin the caller's");

    let gone = dir.path().join("gone.bpf");
    let out = std::process::Command::new("sh")
        .args(["-c", &start_script(), "tinybox-start", "tasks", "0", "0", "file", gone.to_str().unwrap(), "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let last = String::from_utf8_lossy(&out.stderr).lines().last().map(str::to_owned);
    assert_eq!(last, Some(format!("tinybox: cannot open the box's seccomp program {}", gone.display())));
}

/// What bwrap reads from descriptor 5 as more of its arguments, split at NUL.
fn env_args_through_the_start_shell(env: &BTreeMap<String, String>, stdin: &[u8]) -> (Vec<String>, String) {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.bpf");
    std::fs::write(&file, b"prog").unwrap();
    let mut cmd = std::process::Command::new("sh");
    cmd.env_clear().env("PATH", "/usr/bin:/bin").envs(tinybox_sdk::carried_env::vars(env));
    cmd.args(["-c", &start_script(), "tinybox-start", "tasks", "0", &env.len().to_string(), "file"]);
    cmd.arg(&file);
    // The command: what it reads on fd 5, a separator, its stdin, then
    // whatever of the start shell's variables it still has.
    cmd.args(["sh", "-c", "cat <&5; printf '|'; cat; printf '|'; env | grep -c '^TINYBOX_BOXENV_' || true"]);
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    // An LD_PRELOAD the host's loader read would have said it could not load it.
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut parts = text.splitn(3, '|');
    let fed = parts.next().unwrap();
    assert_eq!(parts.next(), Some(String::from_utf8_lossy(stdin).as_ref()), "the caller's stdin is the command's");
    let left = parts.next().unwrap().trim().to_owned();
    let args = fed.split_terminator('\0').map(str::to_owned).collect();
    (args, left)
}

#[test]
fn the_start_shell_feeds_the_boxs_environment_on_fd_5_and_keeps_none_of_it() {
    let env: BTreeMap<String, String> = [
        ("PATH".to_owned(), "/workspace/bin:/usr/bin".to_owned()),
        ("LD_PRELOAD".to_owned(), "/workspace/evil.so".to_owned()),
        ("odd name-1.x".to_owned(), "a=b c\nd 'e' \"f\" $(g) `h` \\i".to_owned()),
        ("EMPTY".to_owned(), String::new()),
    ]
    .into();
    let (args, left) = env_args_through_the_start_shell(&env, b"the caller's stdin");
    let expected: Vec<String> = env.iter().flat_map(|(k, v)| ["--setenv".to_owned(), k.clone(), v.clone()]).collect();
    assert_eq!(args, expected, "exactly the box's variables, byte for byte, in bwrap's --args form");
    assert_eq!(left, "0", "none of the start shell's carriers reaches what it runs");
}

#[test]
fn a_large_environment_is_fed_whole() {
    // Past a pipe's buffer, under the kernel's limit on one variable.
    let big = "v".repeat(100_000);
    let env: BTreeMap<String, String> = [("BIG".to_owned(), big.clone()), ("SMALL".to_owned(), "s".to_owned())].into();
    let (args, _) = env_args_through_the_start_shell(&env, b"");
    assert_eq!(args, ["--setenv", "BIG", &big, "--setenv", "SMALL", "s"]);
}
