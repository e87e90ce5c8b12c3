#!/bin/sh
# tests/mpi/rank_lost.sh on itself, with a stand-in for mpiexec (no MPI
# needed): a run is retried, up to three runs in all, only for a failure of
# Open MPI's own (its TCP transport's connect warning, or mpiexec dying of a
# signal with a backtrace through Open MPI's runtime and none through cube's
# code), and not when CUBE_TEST_SEED fixes the seed; a crash through cube's
# code, or a run without markers for another reason, fails at once; a run in
# which both survivors wrote their markers passes.
#   rank_lost_selftest.sh <rank_lost.sh>
set -u
script=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/rank_lost_selftest.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
# The stand-in: prints $FAKE_LOG, writes the survivors' markers when
# FAKE_MARKERS is 1 (from its call number FAKE_MARKERS_FROM on, when set:
# the calls before it print the log), counts its calls, exits $FAKE_RC.
cat > "$dir/mpiexec" <<'FAKE'
#!/bin/sh
echo call >> "$FAKE_COUNT"
calls=$(wc -l < "$FAKE_COUNT")
if [ -n "${FAKE_MARKERS_FROM:-}" ] && [ "$calls" -ge "$FAKE_MARKERS_FROM" ]; then
  FAKE_MARKERS=1 FAKE_RC=0
  FAKE_LOG=/dev/null
fi
cat "$FAKE_LOG"
if [ "$FAKE_MARKERS" = 1 ]; then
  echo "victim 2 steps 12" > "$CUBE_TEST_RANK_LOST_DIR/survivor.0"
  echo "victim 2 steps 12" > "$CUBE_TEST_RANK_LOST_DIR/survivor.1"
fi
exit "$FAKE_RC"
FAKE
chmod +x "$dir/mpiexec"
# mpiexec's own crash as CI printed it (Open MPI 4.1.4, PMIx 4).
cat > "$dir/ompi_crash.log" <<'LOG'
[cube-host-a:23501] *** Process received signal ***
[cube-host-a:23501] Signal: Segmentation fault (11)
[cube-host-a:23501] [ 0] /lib/x86_64-linux-gnu/libc.so.6(+0x3c050)[0x7fc19c656050]
[cube-host-a:23501] [ 2] /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_rml_oob.so(orte_rml_oob_send_buffer_nb+0x375)[0x7fc199c3f425]
[cube-host-a:23501] [ 3] /lib/x86_64-linux-gnu/libopen-rte.so.40(pmix_server_log_fn+0x317)[0x7fc19c941eb7]
[cube-host-a:23501] *** End of error message ***
LOG
# A crash with cube's code in the backtrace.
sed 's#/lib/x86_64-linux-gnu/libopen-rte.so.40(pmix_server_log_fn+0x317)#/build/tests/test_rank_lost(cube__collective_wait+0x41)#' \
  "$dir/ompi_crash.log" > "$dir/cube_crash.log"
printf '%s\n' "WARNING: Open MPI failed to TCP connect to a peer MPI process.  This" \
  "should not happen." > "$dir/tcp.log"
: > "$dir/empty.log"
fail=0
# check <name> <log> <rc> <markers> <expected exit> <expected calls> [line expected]
# (FROM and SEED in the environment: FAKE_MARKERS_FROM and CUBE_TEST_SEED)
check() {
  rm -f "$dir/count"
  out=$(FAKE_COUNT=$dir/count FAKE_LOG=$dir/$2 FAKE_RC=$3 FAKE_MARKERS=$4 CUBE_TEST_TMPDIR=$dir \
        FAKE_MARKERS_FROM=${FROM:-} CUBE_TEST_SEED=${SEED:-} sh "$script" "$dir/mpiexec" /bin/true 2 2>&1)
  rc=$?
  calls=$(wc -l < "$dir/count")
  if [ "$rc" -ne "$5" ] || [ "$calls" -ne "$6" ]; then
    echo "FAIL $1: exit $rc (expected $5), mpiexec called $calls times (expected $6)"
    echo "$out"
    fail=1
  elif [ -n "${7:-}" ] && ! echo "$out" | grep -q "$7"; then
    echo "FAIL $1: no line '$7'"
    echo "$out"
    fail=1
  else
    echo "ok $1: exit $rc, $calls call(s)"
  fi
}
check "mpiexec's own crash every time: three runs, then fails" ompi_crash.log 139 0 1 3 \
  "mpiexec died of a signal inside Open MPI's runtime"
check "a TCP connect failure every time: three runs, then fails" tcp.log 1 0 1 3 \
  "Open MPI's TCP transport failed to connect"
FROM=3 check "two of Open MPI's failures, then a good run: passes" ompi_crash.log 139 0 0 3 \
  "run 3 of at most 3"
FROM=2 check "one of Open MPI's failures, then a good run: passes" tcp.log 1 0 0 2 \
  "run 2 of at most 3"
SEED=12345 check "the seed fixed: Open MPI's failure fails at once" ompi_crash.log 139 0 1 1
check "a crash through cube's code fails at once" cube_crash.log 139 0 1 1
check "no markers without a known cause fails at once" empty.log 0 0 1 1
check "mpiexec's crash with both markers written passes" ompi_crash.log 139 1 0 1
check "both markers pass" empty.log 0 1 0 1
exit $fail
