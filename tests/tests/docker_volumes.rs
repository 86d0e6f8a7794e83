//! `rm` of a docker box made from an image that declares a VOLUME removes
//! the anonymous volume docker made for it, with what the box wrote there
//! (a one-step `run` too: docker's `--rm` does the same).

use tinybox_tests::docker::{self, BASE_IMAGE, Namespace, docker, docker_ok};
use tinybox_tests::{Cli, skip};

#[test]
fn rm_of_a_docker_box_takes_the_anonymous_volumes_its_image_declares() {
    if let Some(why) = docker::unavailable() {
        return skip("docker_volumes::rm_of_a_docker_box_takes_the_anonymous_volumes_its_image_declares", &why);
    }
    let ns = Namespace::new("volumes");
    let image = format!("tinybox-test-volume:{}", ns.name);
    let source = format!("{}-src", ns.name);
    docker_ok(&["create", "--name", &source, BASE_IMAGE, "true"]);
    let owner = format!("LABEL tinybox.namespace={}", ns.name);
    let made = docker(&["commit", "--change", "VOLUME /data", "--change", &owner, &source, &image]);
    docker_ok(&["rm", &source]);
    assert_eq!(made.0, 0, "docker commit failed: {}", made.2);

    let cli = Cli::new();
    let (code, out, err) = cli.run(&["create", "--sandbox", "docker", "--namespace", &ns.name, "--image", &image]);
    assert_eq!(code, 0, "{err}");
    let id = out.trim().to_owned();
    let (code, _, err) = cli.run(&["exec", &id, "--", "sh", "-c", "echo what the box kept > /data/kept"]);
    assert_eq!(code, 0, "{err}");
    let container = ns.container(&id);
    let volumes = docker_ok(&["inspect", "--format", "{{range .Mounts}}{{.Name}} {{end}}", &container]);
    let volumes: Vec<&str> = volumes.split_whitespace().collect();
    assert_eq!(volumes.len(), 1, "the image's VOLUME is one anonymous volume: {volumes:?}");
    assert_eq!(docker(&["volume", "inspect", volumes[0]]).0, 0);

    let (code, _, err) = cli.run(&["rm", &id]);
    assert_eq!(code, 0, "{err}");
    let (code, _, _) = docker(&["volume", "inspect", volumes[0]]);
    assert_ne!(code, 0, "volume {} outlived its box, with what the box wrote in it", volumes[0]);
}
