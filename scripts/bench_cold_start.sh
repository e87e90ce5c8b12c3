#!/bin/sh
# The demo's cold start with and without an imported bundle (docs/autotune.md,
# "Bundles"; docs/benchmarks.md). Alternating rounds, each in a fresh, empty
# kernel cache directory:
#   cold    `cube demo`                       (compiles every dialect kernel)
#   bundle  `cube bundle import F`, then `cube demo` (F exported once, before)
# Prints each round, then medians with min-max, and the ratio of the demo's
# run after an import to a cold run (target <= 0.05), also counting the import.
#   scripts/bench_cold_start.sh [BUILD_DIR] [ROUNDS]     (defaults: build, 7)
# CUBE_BACKEND chooses the device as for the tool (default cpu).
set -eu
build=${1:-build}
rounds=${2:-7}
tool="$build/cube"
[ -x "$tool" ] || { echo "bench_cold_start: no $tool (build the cube tool first)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/cube-cold-start-XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
now() { date +%s%N; }
ms() { echo "$1 $2" | awk '{ printf "%.1f", ($2 - $1) / 1e6 }'; }

# The bundle, from one warm-up run.
CUBE_CACHE_DIR="$work/warm" "$tool" demo > "$work/warm.out"
CUBE_CACHE_DIR="$work/warm" "$tool" bundle export "$work/app.cubebundle" > "$work/export.out"
grep -m1 'entries' "$work/export.out"

echo "round  cold_ms  import_ms  demo_after_import_ms"
: > "$work/cold"; : > "$work/import"; : > "$work/after"
i=1
while [ "$i" -le "$rounds" ]; do
  # Alternate which goes first.
  for which in $( [ $((i % 2)) -eq 1 ] && echo "cold bundle" || echo "bundle cold"); do
    dir="$work/$which-$i"
    if [ "$which" = cold ]; then
      t0=$(now); CUBE_CACHE_DIR="$dir" "$tool" demo > "$work/out"; t1=$(now)
      grep -q 'demo: all checks passed' "$work/out" || { echo "cold demo failed" >&2; cat "$work/out" >&2; exit 1; }
      c=$(ms "$t0" "$t1"); echo "$c" >> "$work/cold"
    else
      t0=$(now); CUBE_CACHE_DIR="$dir" "$tool" bundle import "$work/app.cubebundle" > /dev/null; t1=$(now)
      CUBE_CACHE_DIR="$dir" "$tool" demo > "$work/out"; t2=$(now)
      grep -q 'kernel cache: 0 compiled' "$work/out" || { echo "the demo after an import compiled" >&2; cat "$work/out" >&2; exit 1; }
      im=$(ms "$t0" "$t1"); af=$(ms "$t1" "$t2"); echo "$im" >> "$work/import"; echo "$af" >> "$work/after"
    fi
    rm -rf "$dir"
  done
  echo "$i      $(tail -n1 "$work/cold")    $(tail -n1 "$work/import")       $(tail -n1 "$work/after")"
  i=$((i + 1))
done
stats() { sort -n "$1" | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f %.1f %.1f", m, v[1], v[NR] }'; }
set -- $(stats "$work/cold"); cm=$1; cl=$2; ch=$3
set -- $(stats "$work/import"); im=$1; il=$2; ih=$3
set -- $(stats "$work/after"); am=$1; al=$2; ah=$3
echo "median (min-max) over $rounds alternating rounds:"
echo "  cold start, empty cache:        $cm ms ($cl-$ch)"
echo "  bundle import:                  $im ms ($il-$ih)"
echo "  demo after the import:          $am ms ($al-$ah)"
echo "$cm $am $im" | awk '{ printf "  demo after import / cold start: %.3f (target <= 0.05: %s); import + demo / cold start: %.3f\n", $2 / $1, ($2 / $1 <= 0.05 ? "met" : "NOT met"), ($2 + $3) / $1 }'
