#!/usr/bin/env bash
# Runs the brief fuzzing and then the dashboard's tests (make test-fuzz
# test-ui) side by side with the Go tests (make test-go): much of either
# side is waiting (for a browser, a daemon, a timer, a booting testbed), so
# together they take less than their sum.
#
# Both stream as they run, each line marked [ui] or [go]; each suite's whole
# output is also kept in bin/test-ui.log and bin/test-go.log. At the end the
# runners' own summaries are printed again, unmarked and one after the
# other: node's failing tests and its "ui tests:" line, then gotestsum's
# failures and its "DONE N tests" line. Exits non-zero when either failed.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
make="${MAKE:-make}"

start=$SECONDS
run() { # name target...
  local name=$1 rc=0
  shift
  "$make" --no-print-directory "$@" >"bin/test-$name.log" 2>&1 || rc=$?
  echo "make $*: exit $rc after $((SECONDS - start)) s" >>"bin/test-$name.log"
  echo $rc >"bin/test-$name.rc"
}
rm -f bin/test-ui.rc bin/test-go.rc
: >bin/test-ui.log; : >bin/test-go.log
run ui test-fuzz test-ui & ui=$!
run go test-go & go=$!
tail -n +1 -F bin/test-ui.log 2>/dev/null | sed -u 's/^/[ui] /' & tui=$!
tail -n +1 -F bin/test-go.log 2>/dev/null | sed -u 's/^/[go] /' & tgo=$!
wait "$ui" "$go"
sleep 1 # let tail print the last lines
kill "$tui" "$tgo" 2>/dev/null
wait "$tui" "$tgo" 2>/dev/null

ui_rc=$(cat bin/test-ui.rc 2>/dev/null || echo 1)
go_rc=$(cat bin/test-go.rc 2>/dev/null || echo 1)
echo
echo "── fuzzing and dashboard tests (make test-fuzz test-ui, exit $ui_rc; whole output in bin/test-ui.log) ──"
grep -E '^make test-fuzz test-ui: ' bin/test-ui.log
# node's spec reporter ends with "ℹ tests N" ... and, when a test failed,
# "✖ failing tests:" and each failure; the summary reporter's line is last.
awk '/^✖ failing tests:/{p=1} p' bin/test-ui.log
grep -E '^ui tests: ' bin/test-ui.log || tail -n 20 bin/test-ui.log
echo
echo "── Go tests (make test-go, exit $go_rc; whole output in bin/test-go.log) ──"
grep -E '^make test-go: ' bin/test-go.log
# gotestsum ends with "=== Failed"/"=== Errors" sections, when there are
# any, and "DONE N tests ...".
awk '/^=== (Failed|Errors|Skipped)/{p=1} p' bin/test-go.log | grep -v '^DONE ' || true
grep -E '^DONE ' bin/test-go.log || tail -n 20 bin/test-go.log
[ "$ui_rc" = 0 ] && [ "$go_rc" = 0 ]
