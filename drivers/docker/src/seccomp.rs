//! The seccomp profile of a box bound to a host directory (ADR 0014).
//!
//! docker takes one profile per container and a custom one REPLACES its
//! default, so this is a whole profile: an allowlist in docker's manner
//! (refused: `EPERM`), kept as close to docker's default as its own
//! purpose allows, plus the one thing docker's default does not do —
//! refuse every way to give a file a setuid or setgid bit. A process may
//! set those bits on a file it owns without any capability, so no
//! capability drop or `--user` alone keeps them off the host.
//!
//! The allowlist is every x86_64 and i386 system call name known to the
//! Linux 6.1 UAPI headers (`asm/unistd_64.h`, `asm/unistd_32.h`) minus
//! [`REFUSED`]: what docker's default refuses a container without
//! capabilities (kernel modules, mounts, namespaces, keyrings, bpf,
//! perf, userfaultfd, io_uring, clocks, reboot, ...). A call newer than
//! those headers is refused, as docker's default refuses what it does
//! not list; runc answers `ENOSYS` for those, so libc falls back.

use serde_json::{Value, json};

/// S_ISUID | S_ISGID.
const SET_ID_BITS: u64 = 0o6000;
/// O_CREAT | __O_TMPFILE: the flags under which `open`'s mode is used.
const CREATING: u64 = 0o100 | 0o20000000;
/// Every CLONE_NEW* flag: new namespaces are refused, as docker's default
/// refuses them to a container without CAP_SYS_ADMIN.
const CLONE_NEW_ANY: u64 = 0x7E02_0000;
const EPERM: u64 = 1;
const ENOSYS: u64 = 38;

/// Calls refused outright, or allowed only under [`rules`]' conditions:
/// the list [`ALLOWED`] was made without (kept for review and the tests).
#[cfg(test)]
pub const REFUSED: &[&str] = &[
    // Administration docker's default keeps from a container without capabilities.
    "acct",
    "add_key",
    "bdflush",
    "bpf",
    "chroot",
    "clock_adjtime",
    "clock_adjtime64",
    "clock_settime",
    "clock_settime64",
    "create_module",
    "delete_module",
    "fanotify_init",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "get_kernel_syms",
    "get_mempolicy",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mbind",
    "memfd_secret",
    "migrate_pages",
    "modify_ldt",
    "mount",
    "mount_setattr",
    "move_mount",
    "move_pages",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "pidfd_getfd",
    "pivot_root",
    "quotactl",
    "quotactl_fd",
    "reboot",
    "request_key",
    "set_mempolicy",
    "set_mempolicy_home_node",
    "setns",
    "settimeofday",
    "stime",
    "swapoff",
    "swapon",
    "_sysctl",
    "sysfs",
    "syslog",
    "umount",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "ustat",
    "vhangup",
    "vm86",
    "vm86old",
    // Never implemented.
    "afs_syscall",
    "break",
    "ftime",
    "getpmsg",
    "gtty",
    "idle",
    "lock",
    "mpx",
    "prof",
    "profil",
    "putpmsg",
    "security",
    "stty",
    "tuxcall",
    "ulimit",
    "vserver",
    // Allowed only under a condition (see `rules`), or answered ENOSYS.
    "chmod",
    "clone",
    "clone3",
    "creat",
    "fchmod",
    "fchmodat",
    "mknod",
    "mknodat",
    "open",
    "openat",
    "openat2",
    "personality",
];

/// Allowed unconditionally: the headers' names minus [`REFUSED`].
pub const ALLOWED: &[&str] = &[
    "_llseek",
    "_newselect",
    "accept",
    "accept4",
    "access",
    "adjtimex",
    "alarm",
    "arch_prctl",
    "bind",
    "brk",
    "capget",
    "capset",
    "chdir",
    "chown",
    "chown32",
    "clock_getres",
    "clock_getres_time64",
    "clock_gettime",
    "clock_gettime64",
    "clock_nanosleep",
    "clock_nanosleep_time64",
    "close",
    "close_range",
    "connect",
    "copy_file_range",
    "dup",
    "dup2",
    "dup3",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_ctl_old",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_wait",
    "epoll_wait_old",
    "eventfd",
    "eventfd2",
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "faccessat",
    "faccessat2",
    "fadvise64",
    "fadvise64_64",
    "fallocate",
    "fanotify_mark",
    "fchdir",
    "fchown",
    "fchown32",
    "fchownat",
    "fcntl",
    "fcntl64",
    "fdatasync",
    "fgetxattr",
    "flistxattr",
    "flock",
    "fork",
    "fremovexattr",
    "fsetxattr",
    "fstat",
    "fstat64",
    "fstatat64",
    "fstatfs",
    "fstatfs64",
    "fsync",
    "ftruncate",
    "ftruncate64",
    "futex",
    "futex_time64",
    "futex_waitv",
    "futimesat",
    "get_robust_list",
    "get_thread_area",
    "getcpu",
    "getcwd",
    "getdents",
    "getdents64",
    "getegid",
    "getegid32",
    "geteuid",
    "geteuid32",
    "getgid",
    "getgid32",
    "getgroups",
    "getgroups32",
    "getitimer",
    "getpeername",
    "getpgid",
    "getpgrp",
    "getpid",
    "getppid",
    "getpriority",
    "getrandom",
    "getresgid",
    "getresgid32",
    "getresuid",
    "getresuid32",
    "getrlimit",
    "getrusage",
    "getsid",
    "getsockname",
    "getsockopt",
    "gettid",
    "gettimeofday",
    "getuid",
    "getuid32",
    "getxattr",
    "inotify_add_watch",
    "inotify_init",
    "inotify_init1",
    "inotify_rm_watch",
    "io_cancel",
    "io_destroy",
    "io_getevents",
    "io_pgetevents",
    "io_pgetevents_time64",
    "io_setup",
    "io_submit",
    "ioctl",
    "ioprio_get",
    "ioprio_set",
    "ipc",
    "kill",
    "landlock_add_rule",
    "landlock_create_ruleset",
    "landlock_restrict_self",
    "lchown",
    "lchown32",
    "lgetxattr",
    "link",
    "linkat",
    "listen",
    "listxattr",
    "llistxattr",
    "lremovexattr",
    "lseek",
    "lsetxattr",
    "lstat",
    "lstat64",
    "madvise",
    "membarrier",
    "memfd_create",
    "mincore",
    "mkdir",
    "mkdirat",
    "mlock",
    "mlock2",
    "mlockall",
    "mmap",
    "mmap2",
    "mprotect",
    "mq_getsetattr",
    "mq_notify",
    "mq_open",
    "mq_timedreceive",
    "mq_timedreceive_time64",
    "mq_timedsend",
    "mq_timedsend_time64",
    "mq_unlink",
    "mremap",
    "msgctl",
    "msgget",
    "msgrcv",
    "msgsnd",
    "msync",
    "munlock",
    "munlockall",
    "munmap",
    "nanosleep",
    "newfstatat",
    "nice",
    "oldfstat",
    "oldlstat",
    "oldolduname",
    "oldstat",
    "olduname",
    "pause",
    "pidfd_open",
    "pidfd_send_signal",
    "pipe",
    "pipe2",
    "pkey_alloc",
    "pkey_free",
    "pkey_mprotect",
    "poll",
    "ppoll",
    "ppoll_time64",
    "prctl",
    "pread64",
    "preadv",
    "preadv2",
    "prlimit64",
    "process_madvise",
    "process_mrelease",
    "process_vm_readv",
    "process_vm_writev",
    "pselect6",
    "pselect6_time64",
    "ptrace",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "query_module",
    "read",
    "readahead",
    "readdir",
    "readlink",
    "readlinkat",
    "readv",
    "recvfrom",
    "recvmmsg",
    "recvmmsg_time64",
    "recvmsg",
    "remap_file_pages",
    "removexattr",
    "rename",
    "renameat",
    "renameat2",
    "restart_syscall",
    "rmdir",
    "rseq",
    "rt_sigaction",
    "rt_sigpending",
    "rt_sigprocmask",
    "rt_sigqueueinfo",
    "rt_sigreturn",
    "rt_sigsuspend",
    "rt_sigtimedwait",
    "rt_sigtimedwait_time64",
    "rt_tgsigqueueinfo",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_getaffinity",
    "sched_getattr",
    "sched_getparam",
    "sched_getscheduler",
    "sched_rr_get_interval",
    "sched_rr_get_interval_time64",
    "sched_setaffinity",
    "sched_setattr",
    "sched_setparam",
    "sched_setscheduler",
    "sched_yield",
    "seccomp",
    "select",
    "semctl",
    "semget",
    "semop",
    "semtimedop",
    "semtimedop_time64",
    "sendfile",
    "sendfile64",
    "sendmmsg",
    "sendmsg",
    "sendto",
    "set_robust_list",
    "set_thread_area",
    "set_tid_address",
    "setdomainname",
    "setfsgid",
    "setfsgid32",
    "setfsuid",
    "setfsuid32",
    "setgid",
    "setgid32",
    "setgroups",
    "setgroups32",
    "sethostname",
    "setitimer",
    "setpgid",
    "setpriority",
    "setregid",
    "setregid32",
    "setresgid",
    "setresgid32",
    "setresuid",
    "setresuid32",
    "setreuid",
    "setreuid32",
    "setrlimit",
    "setsid",
    "setsockopt",
    "setuid",
    "setuid32",
    "setxattr",
    "sgetmask",
    "shmat",
    "shmctl",
    "shmdt",
    "shmget",
    "shutdown",
    "sigaction",
    "sigaltstack",
    "signal",
    "signalfd",
    "signalfd4",
    "sigpending",
    "sigprocmask",
    "sigreturn",
    "sigsuspend",
    "socket",
    "socketcall",
    "socketpair",
    "splice",
    "ssetmask",
    "stat",
    "stat64",
    "statfs",
    "statfs64",
    "statx",
    "symlink",
    "symlinkat",
    "sync",
    "sync_file_range",
    "syncfs",
    "sysinfo",
    "tee",
    "tgkill",
    "time",
    "timer_create",
    "timer_delete",
    "timer_getoverrun",
    "timer_gettime",
    "timer_gettime64",
    "timer_settime",
    "timer_settime64",
    "timerfd_create",
    "timerfd_gettime",
    "timerfd_gettime64",
    "timerfd_settime",
    "timerfd_settime64",
    "times",
    "tkill",
    "truncate",
    "truncate64",
    "ugetrlimit",
    "umask",
    "uname",
    "unlink",
    "unlinkat",
    "utime",
    "utimensat",
    "utimensat_time64",
    "utimes",
    "vfork",
    "vmsplice",
    "wait4",
    "waitid",
    "waitpid",
    "write",
    "writev",
];

/// The profile, as `docker run --security-opt seccomp=<file>` reads it.
pub fn profile() -> Value {
    let mut syscalls = vec![json!({"names": ALLOWED, "action": "SCMP_ACT_ALLOW"})];
    syscalls.extend(rules());
    json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": EPERM,
        "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]}],
        "syscalls": syscalls,
    })
}

/// `arg & mask == 0`.
fn clear(index: u32, mask: u64) -> Value {
    json!({"index": index, "value": mask, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"})
}

fn allow_if(names: &[&str], args: Vec<Value>) -> Value {
    json!({"names": names, "action": "SCMP_ACT_ALLOW", "args": args})
}

/// The conditional entries. Entries for one call are alternatives; the
/// conditions of one entry all hold.
fn rules() -> Vec<Value> {
    let mut r = vec![
        // The mode argument never carries S_ISUID or S_ISGID.
        allow_if(&["chmod", "fchmod", "creat", "mknod"], vec![clear(1, SET_ID_BITS)]),
        allow_if(&["fchmodat", "fchmodat2", "mknodat"], vec![clear(2, SET_ID_BITS)]),
        // `open`'s mode matters only when it creates: either it does not, or the mode is clean.
        allow_if(&["open"], vec![clear(1, CREATING)]),
        allow_if(&["open"], vec![clear(2, SET_ID_BITS)]),
        allow_if(&["openat"], vec![clear(2, CREATING)]),
        allow_if(&["openat"], vec![clear(3, SET_ID_BITS)]),
        allow_if(&["clone"], vec![clear(0, CLONE_NEW_ANY)]),
        // openat2's mode sits in a struct seccomp cannot read, and clone3's
        // flags likewise: ENOSYS makes libc fall back on openat and clone.
        json!({"names": ["openat2", "clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS}),
    ];
    // The personalities docker's default allows: Linux, with or without
    // UNAME26 and ADDR_NO_RANDOMIZE, and the query.
    for persona in [0x0u64, 0x8, 0x20000, 0x20008, 0xffff_ffff] {
        r.push(allow_if(&["personality"], vec![json!({"index": 0, "value": persona, "op": "SCMP_CMP_EQ"})]));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_refused_is_also_allowed_unconditionally() {
        for name in REFUSED {
            assert!(!ALLOWED.contains(name), "{name} is both refused and allowed");
        }
        let mut sorted = ALLOWED.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ALLOWED.len(), "a name is listed twice");
        for everyday in ["read", "write", "execve", "fork", "vfork", "mkdir", "fchown", "setxattr", "ptrace"] {
            assert!(ALLOWED.contains(&everyday), "{everyday} must stay allowed");
        }
    }

    #[test]
    fn every_mode_setting_call_is_conditional_on_clean_bits() {
        let p = profile();
        let entries = p["syscalls"].as_array().unwrap();
        for name in ["chmod", "fchmod", "fchmodat", "fchmodat2", "creat", "mknod", "mknodat", "open", "openat"] {
            let guards: Vec<&Value> =
                entries.iter().filter(|e| e["names"].as_array().unwrap().iter().any(|n| n == name)).collect();
            assert!(!guards.is_empty(), "{name} has no entry");
            for g in &guards {
                assert_eq!(g["action"], "SCMP_ACT_ALLOW");
                let args = g["args"].as_array().unwrap();
                assert_eq!(args.len(), 1, "{name}: one condition per entry");
                assert_eq!(args[0]["op"], "SCMP_CMP_MASKED_EQ");
                assert_eq!(args[0]["valueTwo"], 0);
            }
            assert!(
                guards.iter().any(|g| g["args"][0]["value"] == SET_ID_BITS),
                "{name}: no entry checks the set-id bits"
            );
        }
        assert_eq!(p["defaultAction"], "SCMP_ACT_ERRNO");
    }
}
