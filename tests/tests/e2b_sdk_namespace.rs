//! The official `e2b` Python SDK against `tinybox serve` on namespace boxes
//! made from an image (ADR 0029): the `base` image (bash and python3) is
//! imported into the server's own store from `docker save` (no registry
//! needed), and the whole session of [`tinybox_tests::e2b_session`] runs
//! on it — files written by one call are there for the next, a background
//! command outlives the call that started it. From outside, the box is a
//! bwrap holding its directory in the store, and nothing of it is left
//! once the SDK killed it.

use std::cell::RefCell;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use tinybox_tests::api::{self, Server};
use tinybox_tests::e2b_session::{self, Expect};
use tinybox_tests::{have, skip};

const TEST: &str = "e2b_sdk_namespace::the_official_e2b_sdk_drives_namespace_image_boxes_through_tinybox_serve";

/// Host processes whose command line names `dir`.
fn processes_naming(dir: &std::path::Path) -> Vec<String> {
    let needle = dir.display().to_string();
    tinybox_tests::processes().into_iter().map(|(_, _, cmd)| cmd).filter(|c| c.contains(&needle)).collect()
}

#[test]
fn the_official_e2b_sdk_drives_namespace_image_boxes_through_tinybox_serve() {
    if !have("bwrap") {
        return skip(TEST, "bwrap is not installed (contrib/setup/install-deps)");
    }
    if let Some(why) = tinybox_tests::docker::unavailable() {
        return skip(TEST, &format!("the base image is built with docker: {why}"));
    }
    let image = api::base_image().expect("the E2B base image");
    let python = match api::e2b_python() {
        Ok(p) => p,
        Err(why) => return skip(TEST, &why),
    };
    let reference = format!("docker.io/library/{image}");
    let server = Server::start(&["--sandbox", "namespace", "--base-image", &reference, "--ttl", "10m"]);
    let mut save = Command::new("docker").args(["save", image]).stdout(Stdio::piped()).spawn().unwrap();
    let import = server.cli.cmd(&["image", "import", "-"]).stdin(save.stdout.take().unwrap()).output().unwrap();
    assert!(save.wait().unwrap().success() && import.status.success(), "{}", String::from_utf8_lossy(&import.stderr));

    let workspaces = server.cli.home.path().join("drivers/namespace/workspaces");
    let seen = RefCell::new(None::<PathBuf>);
    let outside = |id: &str| {
        let dir = std::fs::read_dir(&workspaces)
            .expect("the namespace driver's workspaces")
            .flatten()
            .map(|e| e.path())
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().ends_with(&format!("-{id}"))))
            .unwrap_or_else(|| panic!("no directory for {id} in {}", workspaces.display()));
        assert!(!processes_naming(&dir).is_empty(), "the box's bwrap holds {}", dir.display());
        *seen.borrow_mut() = Some(dir);
    };
    e2b_session::drive(&server, &python, &Expect { sandbox: "namespace", isolation: "kernel" }, &outside);
    let dir = seen.take().expect("the session reached its box");
    assert_eq!(processes_naming(&dir), Vec::<String>::new(), "no process of the killed box is left");
    assert!(!dir.exists(), "the killed box's directory is gone: {}", dir.display());
}
