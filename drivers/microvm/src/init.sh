#!/bin/sh
# PID 1 of a tinybox microVM. The driver passes its parameters on the
# kernel command line; the kernel hands unknown `name=value` words to init
# as environment: tb_ws (1: mount the workspace), tb_net (egress|none),
# tb_pids (the pids cap), tb_ports (how many ports the agent waits for).
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs -o mode=1777 tmp /tmp
mkdir -p /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
fail() { echo "tinybox-init: $*" >/dev/console; poweroff -f; }
for m in $(cat /lib/modules/base); do insmod "/lib/modules/$m.ko" || fail "cannot load module $m"; done
ip link set lo up
if [ "$tb_ws" = 1 ]; then
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none ws /workspace || fail "cannot mount the workspace"
fi
if [ "$tb_net" = egress ]; then
    for m in $(cat /lib/modules/net); do insmod "/lib/modules/$m.ko" || fail "cannot load module $m"; done
    ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2 ||
        fail "cannot configure eth0"
    echo "nameserver 10.0.2.3" >/etc/resolv.conf
fi
if mount -t cgroup2 cgroup2 /sys/fs/cgroup; then
    echo +pids >/sys/fs/cgroup/cgroup.subtree_control
    mkdir /sys/fs/cgroup/box
    [ -n "$tb_pids" ] && echo "$tb_pids" >/sys/fs/cgroup/box/pids.max
fi
unset tb_ws tb_net tb_pids
if [ "$tb_root" = 1 ]; then
    # The image's disk becomes the root. The agent, and a busybox to be
    # PID 1, come along in a tmpfs of their own at /run/tinybox: no file of
    # the image is needed for tinybox to serve, and none is replaced.
    for m in $(cat /lib/modules/disk); do insmod "/lib/modules/$m.ko" || fail "cannot load module $m"; done
    mkdir -p /newroot
    mount -t ext4 -o noinit_itable /dev/vda /newroot || fail "cannot mount the image disk"
    mkdir -p /newroot/proc /newroot/sys /newroot/dev /newroot/tmp /newroot/run/tinybox ||
        fail "cannot prepare the image root"
    mount -t tmpfs -o mode=0700 tinybox /newroot/run/tinybox || fail "cannot mount /run/tinybox"
    cp /bin/busybox /sbin/tinybox-microvm-agent /newroot/run/tinybox/ || fail "cannot place the agent"
    if [ -e /etc/resolv.conf ]; then
        rm -f /newroot/etc/resolv.conf
        mkdir -p /newroot/etc && cp /etc/resolv.conf /newroot/etc/resolv.conf
    fi
    # PID 1 in the image root: the same loop as below, from the tmpfs.
    printf '%s\n' 'echo -1000 >/proc/self/oom_score_adj' 'cd /' 'while :; do' \
        '    /run/tinybox/tinybox-microvm-agent </dev/null' \
        '    echo "tinybox-init: the agent exited ($?); starting it again" >/dev/console' \
        'done' >/newroot/run/tinybox/init
    for m in /proc /sys /dev; do mount --move "$m" "/newroot$m" || fail "cannot move $m"; done
    unset tb_root
    exec switch_root /newroot /run/tinybox/busybox sh /run/tinybox/init
fi
cd /workspace
# The agent is never the OOM killer's choice: a box that exhausts the
# guest's memory loses its own command (each command resets its score, see
# the agent's --enter), never the agent every later command needs. Children
# inherit the score, so it is set once, here, for the agent.
echo -1000 >/proc/self/oom_score_adj
# The agent serves the host; this shell stays PID 1 and reaps orphans
# while it waits. A box that kills every process it can (kill -9 -1 as the
# guest's root) kills the agent too: start it again, so the VM stays usable.
while :; do
    /sbin/tinybox-microvm-agent </dev/null
    echo "tinybox-init: the agent exited ($?); starting it again" >/dev/console
done
