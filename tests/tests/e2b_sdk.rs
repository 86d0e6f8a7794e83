//! The official `e2b` Python SDK (from PyPI, in a venv under target/)
//! against `tinybox serve` on docker boxes of the `base` image (bash and
//! python3): the whole session of [`tinybox_tests::e2b_session`], and from
//! outside, the box is a docker container of the server's store, gone
//! once the SDK killed it.

use std::cell::RefCell;

use serde_json::Value;
use tinybox_tests::api::{self, Server};
use tinybox_tests::e2b_session::{self, Expect};
use tinybox_tests::skip;

const TEST: &str = "e2b_sdk::the_official_e2b_sdk_drives_docker_boxes_through_tinybox_serve";

#[test]
fn the_official_e2b_sdk_drives_docker_boxes_through_tinybox_serve() {
    if let Some(why) = tinybox_tests::docker::unavailable() {
        return skip(TEST, &why);
    }
    let image = api::base_image().expect("the E2B base image");
    let python = match api::e2b_python() {
        Ok(p) => p,
        Err(why) => return skip(TEST, &why),
    };
    let server = Server::start(&["--sandbox", "docker", "--base-image", image, "--ttl", "10m"]);
    let containers = |id: &str, namespace: &str| {
        let filters = [format!("label=tinybox.namespace={namespace}"), format!("label=tinybox.box={id}")];
        tinybox_tests::docker::docker_ok(&["ps", "-aq", "--filter", &filters[0], "--filter", &filters[1]])
    };
    let seen = RefCell::new(None);
    let outside = |id: &str| {
        let inspect = server.cli.cmd(&["--json", "inspect", id]).output().unwrap();
        let view: Value = serde_json::from_slice(&inspect.stdout).unwrap();
        let namespace = view["spec"]["namespace"].as_str().unwrap().to_owned();
        assert!(!containers(id, &namespace).is_empty(), "no container for {id} in namespace {namespace}");
        *seen.borrow_mut() = Some((id.to_owned(), namespace));
    };
    e2b_session::drive(&server, &python, &Expect { sandbox: "docker", isolation: "kernel" }, &outside);
    let (id, namespace) = seen.take().expect("the session reached its box");
    assert_eq!(containers(&id, &namespace), "", "the killed sandbox's container is gone");
}
