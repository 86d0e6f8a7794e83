//! A dockerd of one test's own, which the test may kill and start again:
//! its own socket, data-root, exec-root and pidfile in a temporary
//! directory, no bridge and no iptables rules, in a network namespace of
//! its own (`unshare -n`), so neither the shared daemon nor the host's
//! docker0 is touched (docs: /work/shared/environment.md, "Sharing the
//! machine's Docker"). It holds the base image, loaded from the shared
//! daemon. Dropping it kills what it left behind (its containerd, the
//! shims and their containers) by pid and unmounts its layers.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::chaos::{alive, kill};
use crate::docker::{BASE_IMAGE, GUARD, docker_ok};

pub struct PrivateDaemon {
    dir: tempfile::TempDir,
    dockerd: Option<Child>,
}

impl PrivateDaemon {
    /// Starts one, or says why it cannot run here.
    pub fn start() -> Result<PrivateDaemon, String> {
        if !crate::have("unshare") || !crate::have("dockerd") {
            return Err("no unshare or dockerd on PATH".into());
        }
        if !rustix::process::geteuid().is_root() {
            return Err("a private dockerd needs root".into());
        }
        let dir = tempfile::Builder::new().prefix("tbd").tempdir_in("/tmp").map_err(|e| e.to_string())?;
        let mut daemon = PrivateDaemon { dir, dockerd: None };
        daemon.launch()?;
        let image = daemon.dir.path().join("base.tar").display().to_string();
        docker_ok(&["save", "-o", &image, BASE_IMAGE]);
        let (code, _, err) = daemon.docker(&["load", "-i", &image]);
        if code != 0 {
            return Err(format!("cannot load the base image into a private dockerd: {err}"));
        }
        Ok(daemon)
    }

    /// Starts dockerd over this daemon's directories and waits (bounded)
    /// until it answers.
    fn launch(&mut self) -> Result<(), String> {
        let path = |name: &str| self.dir.path().join(name).display().to_string();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("log"))
            .map_err(|e| e.to_string())?;
        let dockerd = Command::new("unshare")
            .args(["-n", "dockerd", "--host", &format!("unix://{}", path("d.sock"))])
            .args(["--data-root", &path("data"), "--exec-root", &path("exec"), "--pidfile", &path("d.pid")])
            .args(["--bridge=none", "--iptables=false", "--ip6tables=false"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start dockerd: {e}"))?;
        self.dockerd = Some(dockerd);
        let deadline = Instant::now() + GUARD;
        while self.docker(&["version", "--format", "{{.Server.Version}}"]).0 != 0 {
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
                return Err(format!("a private dockerd did not answer within {GUARD:?}: {log}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// What a client of this daemon sets as `DOCKER_HOST`.
    pub fn host(&self) -> String {
        format!("unix://{}", self.dir.path().join("d.sock").display())
    }

    /// `docker ARGS` against this daemon: (status, stdout, stderr).
    pub fn docker(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new("docker")
            .args(args)
            .env("DOCKER_HOST", self.host())
            .stdin(Stdio::null())
            .output()
            .expect("run docker");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
    }

    /// SIGKILLs dockerd alone; its containerd and containers are left as a
    /// crashed daemon leaves them.
    pub fn kill(&mut self) {
        if let Some(mut d) = self.dockerd.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }

    /// SIGKILLs dockerd and everything it started (containerd, shims, the
    /// containers' processes), as a crash of the machine's docker service
    /// would, then starts it again over the same data: its containers come
    /// back exited.
    pub fn crash_and_restart(&mut self) -> Result<(), String> {
        self.kill();
        self.kill_leftovers();
        // A killed containerd becomes init's zombie until reaped, and a new
        // dockerd that finds its pid file alive waits for it for good.
        let _ = std::fs::remove_file(self.dir.path().join("exec/containerd/containerd.pid"));
        let _ = std::fs::remove_file(self.dir.path().join("d.pid"));
        self.launch()
    }

    /// The pid of this daemon's dockerd, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.dockerd.as_ref().map(Child::id)
    }

    fn kill_leftovers(&self) {
        // Its containerd and shims name the directory in their arguments;
        // a shim's children are its containers' processes.
        let root = self.dir.path().to_string_lossy().into_owned();
        let mine: Vec<u32> =
            crate::processes().into_iter().filter(|(_, _, args)| args.contains(&root)).map(|p| p.0).collect();
        let deadline = Instant::now() + GUARD;
        for pid in &mine {
            for (child, _, _) in crate::processes().into_iter().filter(|(_, parent, _)| parent == pid) {
                kill(child);
            }
            kill(*pid);
        }
        while mine.iter().any(|p| alive(*p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for PrivateDaemon {
    fn drop(&mut self) {
        self.kill();
        self.kill_leftovers();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let root = self.dir.path().to_string_lossy().into_owned();
        let mut points: Vec<&str> =
            mounts.lines().filter_map(|l| l.split(' ').nth(4)).filter(|m| m.starts_with(&root)).collect();
        points.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for point in points {
            let _ = Command::new("umount").args(["-l", point]).status();
        }
    }
}
