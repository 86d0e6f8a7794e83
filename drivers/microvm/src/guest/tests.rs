//! Unit tests of the guest's build: module plans, the kernel and the initramfs.

use std::collections::BTreeMap;

use super::*;

const DEP: &str = "\
kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko kernel/fs/fscache/fscache.ko kernel/fs/netfs/netfs.ko
kernel/net/9p/9pnet.ko:
kernel/fs/fscache/fscache.ko: kernel/fs/netfs/netfs.ko
kernel/fs/netfs/netfs.ko:
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/char/virtio_console.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
";

fn names(v: &[(String, PathBuf)]) -> Vec<&str> {
    v.iter().map(|(n, _)| n.as_str()).collect()
}

#[test]
fn modules_load_after_everything_they_need_and_only_once() {
    let plan = plan_from(DEP, "", Path::new("/lib/modules/6.1")).unwrap();
    let base = names(&plan.base);
    assert_eq!(
        base,
        ["virtio_ring", "virtio", "virtio_mmio", "virtio_console", "9pnet", "9pnet_virtio", "netfs", "fscache", "9p"]
    );
    // Egress adds only what the base did not already load.
    assert_eq!(names(&plan.net), ["failover", "net_failover", "virtio_net"]);
    assert_eq!(plan.base[0].1, Path::new("/lib/modules/6.1/kernel/drivers/virtio/virtio_ring.ko"));
}

#[test]
fn built_in_modules_are_not_loaded_and_a_missing_one_is_named() {
    let builtin =
        "kernel/drivers/virtio/virtio.ko\nkernel/drivers/virtio/virtio_ring.ko\nkernel/drivers/virtio/virtio_mmio.ko\n";
    let plan = plan_from(DEP, builtin, Path::new("/m")).unwrap();
    assert!(!names(&plan.base).contains(&"virtio"), "{:?}", names(&plan.base));
    let cloud = DEP.lines().filter(|l| !l.contains("9p")).collect::<Vec<_>>().join("\n");
    assert_eq!(plan_from(&cloud, "", Path::new("/m")).unwrap_err(), "9pnet_virtio");
}

#[test]
fn kernels_are_tried_newest_first_by_release_numbers() {
    let dir = std::env::temp_dir().join(format!("tinybox-kernels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for r in ["6.1.0-9-amd64", "6.1.0-10-amd64", "5.10.0-30-amd64"] {
        std::fs::write(dir.join(format!("vmlinuz-{r}")), b"").unwrap();
    }
    std::fs::write(dir.join("config-6.1.0-10-amd64"), b"").unwrap();
    let found: Vec<String> =
        installed_kernels(&dir, Path::new("/lib/modules")).into_iter().map(|k| k.release).collect();
    assert_eq!(found, ["6.1.0-10-amd64", "6.1.0-9-amd64", "5.10.0-30-amd64"]);
    let err = choose_kernel(&installed_kernels(&dir, &dir)).unwrap_err();
    assert!(err.contains("no kernel here can run a box") && err.contains("6.1.0-10-amd64"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_kernel_without_pvh_or_xz_is_booted_as_it_is() {
    assert_eq!(unpack_kernel(b"not a kernel", Some("CONFIG_PVH=y")), None);
    assert_eq!(unpack_kernel(&[0u8; 4096], None), None);
    let mut fake = vec![0u8; 4096];
    fake[0x202..0x206].copy_from_slice(b"HdrS");
    fake[0x1f1] = 1;
    // A payload that is not xz.
    fake[0x248..0x24c].copy_from_slice(&0u32.to_le_bytes());
    fake[0x24c..0x250].copy_from_slice(&16u32.to_le_bytes());
    assert_eq!(unpack_kernel(&fake, Some("CONFIG_PVH=y")), None);
}

#[test]
fn the_initramfs_holds_busybox_the_agent_init_and_the_planned_modules() {
    let dir = std::env::temp_dir().join(format!("tinybox-initramfs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.ko"), b"module a").unwrap();
    let plan = ModulePlan { base: vec![("a".into(), dir.join("a.ko"))], ..Default::default() };
    let inputs = Inputs {
        busybox: b"busybox bytes",
        applets: vec!["bin/sh".into(), "usr/bin/awk".into()],
        agent: b"agent bytes",
        init: "#!/bin/sh\n",
        modules: &plan,
    };
    let archive = initramfs(&inputs).unwrap();
    let mut entries = BTreeMap::new();
    let mut rest = &archive[..];
    loop {
        let mut reader = cpio::newc::Reader::new(rest).unwrap();
        if reader.entry().is_trailer() {
            break;
        }
        let name = reader.entry().name().to_owned();
        let mode = reader.entry().mode();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut reader, &mut data).unwrap();
        entries.insert(name, (mode, data));
        rest = reader.finish().unwrap();
    }
    assert_eq!(entries["init"], (0o100755, b"#!/bin/sh\n".to_vec()));
    assert_eq!(entries["sbin/tinybox-microvm-agent"], (0o100755, b"agent bytes".to_vec()));
    assert_eq!(entries["bin/busybox"].1, b"busybox bytes");
    assert_eq!(entries["usr/bin/awk"], (0o120777, b"/bin/busybox".to_vec()));
    assert_eq!(entries["lib/modules/a.ko"].1, b"module a");
    assert_eq!(entries["lib/modules/base"].1, b"a\n");
    assert_eq!(entries["lib/modules/net"].1, b"");
    assert_eq!(entries["tmp"].0, 0o041777);
    // Cached by content: the same inputs give the same file, once.
    let first = cached_initramfs(&inputs, &dir).unwrap();
    assert_eq!(cached_initramfs(&inputs, &dir).unwrap(), first);
    assert_eq!(std::fs::read(&first).unwrap(), archive);
    std::fs::remove_dir_all(&dir).unwrap();
}
