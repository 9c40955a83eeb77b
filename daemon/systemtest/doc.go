// Package systemtest holds the system tests: the built daemon and its units
// installed in a testbed host with a real systemd (see internal/testbed).
// They run as root in `make test`, alone with `make test-system`.
package systemtest
