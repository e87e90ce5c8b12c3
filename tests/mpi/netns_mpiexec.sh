#!/bin/sh
# mpiexec across two hosts made of network namespaces on this machine.
#
#   netns_mpiexec.sh [mpiexec arguments...]
#
# A drop-in for mpiexec (tests/CMakeLists.txt registers the mpi_2hosts.*
# cases through it; a script that takes an mpiexec can be given this one).
# Each run makes two network namespaces, host a and host b, named after this
# script's process id (parallel runs do not meet), joined by a veth pair
# (10.213.0.1/24 on a, 10.213.0.2/24 on b: the addresses exist only inside
# the two namespaces, so parallel runs use the same ones without a clash).
# mpiexec runs inside a with a hostfile naming the two addresses; in place of
# ssh, a launcher script (written below, given as plm_rsh_agent) starts the
# daemon of b inside b, with a clean environment as ssh would (what the ranks
# need travels with `-x`: this script adds `-x NAME` for every CUBE_* and
# *SAN_OPTIONS variable set, as a user's command line would). Each host has
# its own host name (a UTS namespace each). Open MPI is held to TCP over the
# veth (btl tcp,self; out-of-band and MPI traffic on 10.213.0.0/24 only): the
# ranks talk through the kernel's network stack, as between two machines.
#
# Every rank first records its network namespace (a wrapper runs before
# the program); the run fails unless the ranks were placed on both hosts.
# The namespaces, the veth and every process in them are removed on the way
# out: on success, failure, a signal (CTest's timeout is a kill, so mpiexec
# runs under `timeout` with CUBE_NETNS_LIMIT, below CTest's TIMEOUT), and
# the namespaces and files left by an earlier run that was killed outright
# (its process is gone) are removed at the start.
#
# Environment:
#   CUBE_NETNS_MPIEXEC  the real mpiexec (empty or unset: the run skips)
#   CUBE_NETNS_SLOTS    slots of host a and of host b, "1,1" by default
#                       (-np 3 with "2,1": ranks 0 and 1 on a, rank 2 on b)
#   CUBE_NETNS_LIMIT    seconds mpiexec may run, 240 by default
# Exit status: mpiexec's (77 passes through: the case skipped); 77 when this
# machine cannot make the hosts (not root, `ip netns` refused, no MPI); 1
# when the ranks did not land on both hosts, 124 when mpiexec ran past the
# limit.
set -u

skip() {
  echo "netns_mpiexec: skipped: $*"
  exit 77
}

mpiexec=${CUBE_NETNS_MPIEXEC:-}
slots=${CUBE_NETNS_SLOTS:-1,1}
limit=${CUBE_NETNS_LIMIT:-240}
[ -n "$mpiexec" ] || skip "no mpiexec (CUBE_NETNS_MPIEXEC is empty: built without MPI?)"
[ -x "$mpiexec" ] || command -v "$mpiexec" >/dev/null 2>&1 || skip "mpiexec '$mpiexec' is not there"
[ "$(id -u)" = 0 ] || skip "network namespaces need root (this is uid $(id -u))"
for tool in ip unshare timeout readlink; do
  command -v $tool >/dev/null 2>&1 || skip "no '$tool' on PATH"
done
slots_a=${slots%%,*}
slots_b=${slots#*,}
case "$slots_a,$slots_b" in
  *[!0-9,]* | ,* | *,) echo "netns_mpiexec: CUBE_NETNS_SLOTS is '$slots', not '<a>,<b>'"; exit 2 ;;
esac

prefix=cube-mpi
ns_a=$prefix-$$-a
ns_b=$prefix-$$-b
veth_a=cmpi$$a
veth_b=cmpi$$b
net=10.213.0
addr_a=$net.1
addr_b=$net.2
tmp=${TMPDIR:-/tmp}
dir=
made=0
child=

# Namespaces of runs whose process is gone (killed before their cleanup).
for ns in $(ip netns list 2>/dev/null | sed -n "s/^\($prefix-[0-9]*-[ab]\)\( .*\)\{0,1\}$/\1/p"); do
  pid=${ns#$prefix-}
  pid=${pid%-*}
  if ! kill -0 "$pid" 2>/dev/null; then
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns delete "$ns" 2>/dev/null && echo "netns_mpiexec: removed $ns, left by process $pid"
    rm -rf "$tmp/cube-netns-$pid".*
  fi
done

cleanup() {
  trap '' INT TERM HUP PIPE
  if [ -n "$child" ]; then
    kill -TERM "$child" 2>/dev/null
  fi
  if [ "$made" = 1 ]; then
    # Whatever still runs in the two hosts (the daemons, a rank that hangs).
    for ns in "$ns_a" "$ns_b"; do
      for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    done
    for ns in "$ns_a" "$ns_b"; do
      # The veth goes with its namespace; a namespace can be held a moment
      # by a process that is still exiting.
      tries=0
      while ip netns list | grep -q "^$ns\( \|$\)" && ! ip netns delete "$ns" 2>/dev/null; do
        tries=$((tries + 1))
        [ $tries -ge 20 ] && { echo "netns_mpiexec: could not delete $ns"; break; }
        sleep 0.1
      done
    done
  fi
  [ -n "$dir" ] && rm -rf "$dir"
}
trap 'cleanup' EXIT
trap 'echo "netns_mpiexec: interrupted"; exit 130' INT
trap 'echo "netns_mpiexec: terminated"; exit 143' TERM HUP
trap 'exit 141' PIPE

made=1
if ! ip netns add "$ns_a" 2>/dev/null; then
  made=0
  skip "'ip netns add' is not permitted here"
fi
ip netns add "$ns_b" || exit 1
ip link add "$veth_a" netns "$ns_a" type veth peer name "$veth_b" netns "$ns_b" || exit 1
ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up &&
  ip -n "$ns_a" addr add "$addr_a/24" dev "$veth_a" &&
  ip -n "$ns_b" addr add "$addr_b/24" dev "$veth_b" &&
  ip -n "$ns_a" link set "$veth_a" up && ip -n "$ns_b" link set "$veth_b" up || exit 1

dir=$(mktemp -d "$tmp/cube-netns-$$.XXXXXX") || exit 1
chmod 755 "$dir"
cat >"$dir/hostfile" <<EOF
$addr_a slots=$slots_a
$addr_b slots=$slots_b
EOF
# The launcher, called as ssh would be: <host> <command words...>. The
# words are one command line for the remote shell.
cat >"$dir/rsh" <<EOF
#!/bin/sh
host=\$1
shift
case "\$host" in
  $addr_a) ns=$ns_a name=cube-host-a ;;
  $addr_b) ns=$ns_b name=cube-host-b ;;
  *) echo "netns_mpiexec rsh: no host \$host" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" unshare --uts -- env -i PATH="$PATH" HOME="\${HOME:-/root}" \\
  USER=root LOGNAME=root SHELL=/bin/sh sh -c 'echo "\$0" >/proc/sys/kernel/hostname && exec sh -c "\$1"' "\$name" "\$*"
EOF
# Runs before each rank: records where the rank is.
cat >"$dir/probe" <<EOF
#!/bin/sh
echo "\$(readlink /proc/self/ns/net) \$(cat /proc/sys/kernel/hostname)" >"$dir/rank.\${OMPI_COMM_WORLD_RANK:-x\$\$}"
exec "\$@"
EOF
chmod 755 "$dir/rsh" "$dir/probe"

forward=
for name in $(env | sed -n 's/^\(CUBE_[A-Za-z0-9_]*\)=.*/\1/p; s/^\([A-Z]*SAN_OPTIONS\)=.*/\1/p'); do
  forward="$forward -x $name"
done

bytes() { # received and sent on host b's veth
  ip -n "$ns_b" -s link show "$veth_b" 2>/dev/null | awk '/RX:/{getline; rx=$1} /TX:/{getline; tx=$1} END{print rx+0, tx+0}'
}
before=$(bytes)
echo "netns_mpiexec: hosts $ns_a ($addr_a, $slots_a slots) and $ns_b ($addr_b, $slots_b slots) over $veth_a-$veth_b"
# shellcheck disable=SC2086
timeout -k 5 "$limit" ip netns exec "$ns_a" unshare --uts -- \
  sh -c 'echo cube-host-a >/proc/sys/kernel/hostname && exec "$@"' sh \
  "$mpiexec" --hostfile "$dir/hostfile" \
  --mca plm_rsh_agent "$dir/rsh" --mca orte_fork_agent "$dir/probe" \
  --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24" --mca oob_tcp_if_include "$net.0/24" \
  $forward "$@" &
child=$!
wait "$child"
rc=$?
child=
after=$(bytes)
set -- $before $after
echo "netns_mpiexec: mpiexec exited with $rc; host b's veth received $(($3 - $1)) and sent $(($4 - $2)) bytes"
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "netns_mpiexec: FAIL: mpiexec did not end within $limit s"
  exit 124
fi
hosts=0
if ls "$dir"/rank.* >/dev/null 2>&1; then
  for f in "$dir"/rank.*; do echo "netns_mpiexec: ${f##*/}: $(cat "$f")"; done
  hosts=$(cat "$dir"/rank.* | awk '{print $1}' | sort -u | wc -l)
fi
if [ "$hosts" -ne 2 ]; then
  echo "netns_mpiexec: FAIL: the ranks ran in $hosts network namespace(s), 2 expected"
  [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] && rc=1
fi
exit "$rc"
