# Runs "$@" (the namespace driver's seccomp feeder, then bwrap; the microvm
# driver's passt) with egress through slirp4netns and the host's loopback
# disabled, behind the egress fence: the box reaches public addresses but
# never the host itself, nor private, link-local, CGNAT or loopback ranges,
# nor IPv6, unless an address is an exception in the rules.
#
# $1 and $2: the IPv4 rules (iptables-restore input) before and after the
# host's own addresses, which only this host knows, so they are listed here;
# $3: the IPv6 rules (tinybox_sdk::fence). The namespace's first process
# holds CAP_NET_ADMIN over it (unshare --keep-caps) and puts the rules in
# place before the box's command starts; the box itself runs in bwrap's
# nested user namespace with no capabilities, so it cannot remove them.
#
# bwrap, unprivileged, nests its own user namespaces, so no process is left
# through which slirp4netns could enter the network namespace it makes.
# Instead: `unshare` makes a user and network namespace first, says so on a
# pipe, and waits; slirp4netns attaches to it; only when the tap device is up
# does bwrap start inside it. If slirp4netns fails, its ready pipe closes
# empty and the box never starts.
#
# Every process made here names "$d", under $TMPDIR, on its command line
# (slirp4netns through the symlink it is given as the namespace's path;
# this shell and "$@" carry the caller's own arguments), so a caller that
# sets TMPDIR to a directory of the box's, and names it in "$@", finds and
# stops them all even when this shell was killed before its cleanup ran.
set -eu
v4_head=$1 v4_tail=$2 v6=$3
shift 3
sbin=/usr/sbin:/sbin:/usr/bin:/bin
ipt=$(PATH=$sbin command -v iptables-nft-restore || PATH=$sbin command -v iptables-restore) || {
    echo "tinybox: egress needs iptables on the host for its fence; install the iptables package" >&2
    exit 125
}
ip6t=$(PATH=$sbin command -v ip6tables-nft-restore || PATH=$sbin command -v ip6tables-restore) || {
    echo "tinybox: egress needs ip6tables on the host for its fence; install the iptables package" >&2
    exit 125
}
# The host's own IPv4 addresses: a service on 0.0.0.0 answers on each.
if ! addrs=$(hostname -I 2>/dev/null); then
    listed=$(PATH=$sbin ip -o -4 addr show 2>/dev/null) || {
        echo "tinybox: cannot list this host's addresses for the egress fence (hostname -I and ip both failed)" >&2
        exit 125
    }
    addrs=$(printf '%s\n' "$listed" | awk '{ sub("/.*", "", $4); print $4 }')
fi
host_rules=
for a in $addrs; do
    case $a in
    *[!0-9.]* | '') continue ;;
    esac
    host_rules="$host_rules$(printf '%s' "-A OUTPUT -d $a/32 -j tinybox-refuse")
"
done
d=$(mktemp -d "${TMPDIR:-/tmp}/tinybox-net.XXXXXX")
slirp=
ns=
cleanup() { [ -n "$slirp" ] && kill "$slirp" 2>/dev/null; rm -rf "$d"; }
trap cleanup EXIT
mkfifo "$d/inside" "$d/go" "$d/ready"
printf '%s%s%s' "$v4_head" "$host_rules" "$v4_tail" >"$d/v4"
printf '%s' "$v6" >"$d/v6"
# A background job of a shell without job control gets /dev/null for its
# stdin and ignores SIGINT and SIGQUIT: the box's command gets this shell's
# stdin back (through fd 7, closed for everything else) and the two
# signals' defaults (env --default-signal, coreutils 8.31, where this
# host's env has it), so input and a terminal's Ctrl-C reach the box.
exec 7<&0
dflt=
if env --default-signal=INT,QUIT true 2>/dev/null; then dflt="env --default-signal=INT,QUIT"; fi
# Inside: the fence goes up first; only then does slirp4netns look (so no
# packet of the box's ever leaves before it), and the box's command runs
# with no capability left, not even in its bounding set.
XTABLES_LOCKFILE="$d/xtables.lock" $dflt unshare --user --map-current-user --net --keep-caps -- \
    sh -c '
        if ! "$3" <"$5" || ! "$4" <"$6"; then echo fenceless >"$1"; exit 125; fi
        echo fenced >"$1"; read -r _ <"$2"; shift 6
        # Root in this namespace is bwrap running privileged, which needs its
        # capabilities here; anyone else keeps none, as bwrap requires. Either
        # way the box runs in bwrap'"'"'s own user namespace with --cap-drop ALL,
        # which holds nothing over this network namespace.
        [ "$(id -u)" = 0 ] && exec "$@"
        exec setpriv --inh-caps=-all --ambient-caps=-all --bounding-set=-all -- "$@"' \
    tinybox-netns "$d/inside" "$d/go" "$ipt" "$ip6t" "$d/v4" "$d/v6" "$@" <&7 7<&- &
ns=$!
exec 7<&-
# Only once it is inside its own namespaces, behind its fence, may slirp4netns look at it.
read -r state <"$d/inside"
if [ "$state" != fenced ]; then
    echo "tinybox: the egress fence could not be put in place in the box's network namespace" >&2
    wait "$ns" || true
    exit 125
fi
ln -s "/proc/$ns/ns/user" "$d/userns"
slirp4netns --configure --mtu=65520 --disable-host-loopback --ready-fd=5 \
    --userns-path="$d/userns" "$ns" tap0 \
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
