# Runs "$@" (the seccomp feeder, then bwrap) with egress through slirp4netns and the host's loopback
# disabled: the box reaches the outside but never a service listening on the
# host's 127.0.0.1.
#
# bwrap, unprivileged, nests its own user namespaces, so no process is left
# through which slirp4netns could enter the network namespace it makes.
# Instead: `unshare` makes a user and network namespace first, says so on a
# pipe, and waits; slirp4netns attaches to it; only when the tap device is up
# does bwrap start inside it. If slirp4netns fails, its ready pipe closes
# empty and the box never starts.
set -eu
d=$(mktemp -d "${TMPDIR:-/tmp}/tinybox-net.XXXXXX")
slirp=
ns=
cleanup() { [ -n "$slirp" ] && kill "$slirp" 2>/dev/null; rm -rf "$d"; }
trap cleanup EXIT
mkfifo "$d/inside" "$d/go" "$d/ready"
unshare --user --map-current-user --net -- \
    sh -c 'echo >"$1"; read -r _ <"$2"; shift 2; exec "$@"' tinybox-netns "$d/inside" "$d/go" "$@" &
ns=$!
# Only once it is inside its own namespaces may slirp4netns look at it.
read -r _ <"$d/inside"
slirp4netns --configure --mtu=65520 --disable-host-loopback --ready-fd=5 \
    --userns-path="/proc/$ns/ns/user" "$ns" tap0 \
    >/dev/null 2>"$d/slirp.log" 5>"$d/ready" &
slirp=$!
if [ -z "$(head -c1 <"$d/ready")" ]; then
    echo "tinybox: slirp4netns could not give the box a network: $(tr '\n' ' ' <"$d/slirp.log")" >&2
    kill -9 "$ns" 2>/dev/null
    exit 125
fi
echo >"$d/go"
set +e
wait "$ns"
exit $?
