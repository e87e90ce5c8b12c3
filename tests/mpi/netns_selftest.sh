#!/bin/sh
# The two-host harness (tests/mpi/netns_mpiexec.sh) checked on itself, with
# shell commands as ranks: it must fail a job whose ranks stay on one host,
# end a job that hangs past its limit, clean up after a signal, start the
# remote ranks with only what -x forwards, and leave no namespace, veth or
# process behind in any of these. Skips (77) where the harness skips.
#   netns_selftest.sh <netns_mpiexec.sh>
set -u
harness=$1
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
out=$(mktemp "${TMPDIR:-/tmp}/cube-netns-selftest.XXXXXX") || exit 1
trap 'rm -f "$out"' EXIT

# Runs the harness in the background (its process id names its namespaces).
start() {
  sh "$harness" --allow-run-as-root "$@" >"$out" 2>&1 &
  pid=$!
}
# Nothing of run $pid is left: namespaces, the veth pair (in the root
# namespace too), files, processes.
left_nothing() {
  if ip netns list | grep -q "^cube-mpi-$pid-"; then fail "$1: namespaces of run $pid are left"; fi
  if ip link show 2>/dev/null | grep -q "cmpi${pid}[ab]"; then fail "$1: a veth of run $pid is left"; fi
  if ls -d "${TMPDIR:-/tmp}/cube-netns-$pid".* >/dev/null 2>&1; then fail "$1: files of run $pid are left"; fi
  if ps -eo args | grep -q "[s]leep 4242"; then fail "$1: a rank of run $pid still runs"; fi
}

# 1. Two ranks, one on each host: each prints where it is and what it got.
CUBE_SELFTEST_FORWARDED=yes SELFTEST_NOT_FORWARDED=yes start -np 2 sh -c \
  'echo "rank $OMPI_COMM_WORLD_RANK: $(readlink /proc/self/ns/net) $(cat /proc/sys/kernel/hostname) cube=${CUBE_SELFTEST_FORWARDED:-unset} other=${SELFTEST_NOT_FORWARDED:-unset}"'
wait $pid
rc=$?
cat "$out"
if [ $rc -eq 77 ]; then
  echo "the harness skipped: nothing to check here"
  exit 77
fi
[ $rc -eq 0 ] || fail "two ranks: the harness exited with $rc"
nets=$(sed -n 's/^rank [01]: \(net:\[[0-9]*\]\) .*/\1/p' "$out" | sort -u | wc -l)
[ "$nets" -eq 2 ] || fail "two ranks: $nets network namespaces, 2 expected"
grep -q '^rank 0: .* cube-host-a cube=yes other=yes$' "$out" || fail "rank 0 is not on host a with its environment"
grep -q '^rank 1: .* cube-host-b cube=yes other=unset$' "$out" ||
  fail "rank 1 is not on host b with only the forwarded environment"
left_nothing "two ranks"

# 2. Both ranks on host a: the harness must refuse the run.
CUBE_NETNS_SLOTS=2,0 start -np 2 true
wait $pid
rc=$?
[ $rc -eq 1 ] || fail "one host: exited with $rc, 1 expected"
grep -q "ran in 1 network namespace(s), 2 expected" "$out" || { cat "$out"; fail "one host: not named"; }
left_nothing "one host"

# 3. A job that hangs: ended at the limit, everything removed.
CUBE_NETNS_LIMIT=2 start -np 2 sleep 4242
wait $pid
rc=$?
[ $rc -eq 124 ] || { cat "$out"; fail "hang: exited with $rc, 124 expected"; }
grep -q "did not end within 2 s" "$out" || fail "hang: not named"
left_nothing "hang"

# 4. The harness terminated mid-job (as an outer timeout would), once both
# ranks run (processes whose whole command line is the rank's: the harness
# and mpiexec name it too, before any namespace exists).
start -np 2 sleep 4242
tries=0
until [ "$(ps -eo args | grep -cx 'sleep 4242')" -ge 2 ] || [ $tries -ge 100 ]; do
  sleep 0.1
  tries=$((tries + 1))
done
[ $tries -lt 100 ] || fail "signal: the ranks never started"
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 143 ] || { cat "$out"; fail "signal: exited with $rc, 143 expected"; }
left_nothing "signal"

# 5. The harness killed outright: the next run removes what it left.
start -np 2 sleep 4242
tries=0
until [ "$(ps -eo args | grep -cx 'sleep 4242')" -ge 2 ] || [ $tries -ge 100 ]; do
  sleep 0.1
  tries=$((tries + 1))
done
[ $tries -lt 100 ] || fail "kill: the ranks never started"
kill -KILL $pid
wait $pid 2>/dev/null
killed=$pid
start -np 2 true
wait $pid
rc=$?
[ $rc -eq 0 ] || { cat "$out"; fail "after a kill: exited with $rc"; }
grep -q "removed cube-mpi-$killed-a, left by process $killed" "$out" || { cat "$out"; fail "after a kill: run $killed's namespaces not removed"; }
pid=$killed
left_nothing "killed"

[ $fails -eq 0 ] && echo "the harness placed, limited and cleaned up as it should"
exit $((fails != 0))
