// Package systemtest holds the system tests: the built daemon and its units
// installed in a testbed host with a real systemd (see internal/testbed).
// They run as root in `make test`, alone with `make test-system`.
//
// Every test is parallel, and go test starts them in the order of their
// files' names, two at a time (-parallel): the files are named so that the
// longest, TestTwoEdges and TestFleetUpdate, start among the first. Started
// third, TestTwoEdges was still running alone for the suite's last three
// minutes.
package systemtest
