#!/usr/bin/env bash
# fuzz-brief.sh PKG:TARGET:BUDGET... — each fuzz target for its budget
# (FUZZ_TIME, when set, replaces every budget). One instrumented test binary
# per package, built once (two packages at a time) and run for each of its targets from the package's
# directory, as `go test -fuzz` would run it: the committed corpus in
# testdata/fuzz, new crashers written there. Stops at the first target
# that fails.
#
# The interesting inputs a run finds go to a cache of its own, removed at
# the end: in Go's fuzz cache they piled up run after run, and each run
# first replays them all (its "baseline coverage"), so the brief pass grew
# longer with every run on the same machine. With FUZZ_TIME set (a
# deliberate longer fuzz) they are kept in Go's fuzz cache, so each such
# run starts from what the last one found.
set -euo pipefail
GO=${GO:-go}
bins=$(mktemp -d)
trap 'rm -rf "$bins"' EXIT
cache=$bins/fuzzcache
[ -z "${FUZZ_TIME:-}" ] || cache=$($GO env GOCACHE)/fuzz
# The instrumented binaries first, two at a time: most of their time is
# the linker's, which uses one processor.
binof() { echo "$bins/$(echo "$1" | tr '/.' '__').test"; }
build() {
  local pkg=$1 name=$2
  echo "fuzz: building $pkg with coverage instrumentation"
  # As make test builds test binaries: -trimpath, so the build cache
  # serves a new clone too, and no DWARF (half the link time).
  $GO test -c -fuzz "^$name\$" -trimpath -ldflags='-s -w' -o "$(binof "$pkg")" "$pkg"
}
export -f build binof
export GO bins
last=""
for t in "$@"; do
  pkg=${t%%:*} rest=${t#*:}
  [ "$pkg" = "$last" ] || printf '%s %s\n' "$pkg" "${rest%%:*}"
  last=$pkg
done | xargs -P 2 -L 1 bash -c 'build "$0" "$1"'
# Each package's import path, from one go list (one a target cost 0.4 s).
module=$($GO list -m)
for t in "$@"; do
  pkg=${t%%:*} rest=${t#*:}
  name=${rest%%:*} budget=${rest#*:}
  budget=${FUZZ_TIME:-$budget}
  bin=$(binof "$pkg")
  importpath=$module/${pkg#./}
  echo "fuzz $name ($budget)"
  start=$(date +%s%N)
  (cd "$pkg" && "$bin" -test.run '^$' -test.fuzz "^$name\$" -test.fuzztime "$budget" \
    -test.fuzzcachedir "$cache/$importpath") || { echo "fuzz $name: FAILED (see above; a crasher is in $pkg/testdata/fuzz/$name)"; exit 1; }
  ms=$((($(date +%s%N) - start) / 1000000))
  printf 'ok  \t%s %s\t%d.%03ds\n' "$importpath" "$name" $((ms / 1000)) $((ms % 1000))
done
