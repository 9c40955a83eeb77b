#!/usr/bin/env bash
# Installs what `make test` needs on a fresh Debian 12 machine, as root, and
# only what is missing: Debian packages by the command they provide, the Go
# test runner, and the UI's npm packages. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# command -> Debian package that provides it
declare -A need=(
  [gcc]=gcc                   # cgo for mattn/go-sqlite3
  [sqlite3]=sqlite3
  [ip]=iproute2               # network namespaces in system tests
  [sysctl]=procps             # the bind-ip and publish tests set sysctls in their namespaces
  [unshare]=util-linux         # the testbed: namespaces, and entering them
  [nsenter]=util-linux
  [systemctl]=systemd          # the testbed boots /lib/systemd/systemd as PID 1
  [chroot]=coreutils
  [ssh-keygen]=openssh-client
  [shellcheck]=shellcheck
  [sudo]=sudo                  # the machine testbed: bootstrap.sh as a sudo user, the agent's sudo rules
  [script]=bsdutils            # bootstrap.sh under a pseudo-terminal in the system test
  [curl]=curl                  # bootstrap.sh downloads with curl
  [python3]=python3            # a tiny web site on the machine testbed (python3 -m http.server)
  [caddy]=caddy
  [fail2ban-server]=fail2ban
  [nft]=nftables
  [dbus-daemon]=dbus
  [chromium-headless-shell]=chromium-headless-shell  # the dashboard tests' browser
  [iperf3]=iperf3             # make bench and its smoke test: TCP through the tunnel
  [systemd-socket-activate]=systemd  # make bench: cold start through socket activation
  [dropbear]=dropbear-bin      # a real sshd on the machine testbed (binaries only, no service)
  [rpm]=rpm                    # the package test reads the .rpm's metadata with rpm -qp
  [sshd]=openssh-server        # make bench: the OpenSSH reverse tunnel peer (its own sshd on a test port, never 22)
  [wrk]=wrk                    # make bench: the load generator lighter than the servers it measures
  [jq]=jq                      # the API tokens test runs docs/api.md's CI script, which reads answers with jq
  [nginx]=nginx                # a service that reads the PROXY protocol, behind tcp and http tunnels
)
missing=()
for cmd in "${!need[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${need[$cmd]}")
done
# The store tests' throwaway PostgreSQL 15: Debian's postgresql package
# keeps initdb and postgres off PATH, in its versioned directory.
[ -x /usr/lib/postgresql/15/bin/initdb ] || missing+=(postgresql)
# fail2ban's journal backend, which the ban tool's jails use: the system
# test sets the ban tool up in a testbed host and reads its jails.
[ -e /usr/lib/python3/dist-packages/systemd/journal.py ] || missing+=(python3-systemd)
if ((${#missing[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing packages ${missing[*]}; run as root (apt-get install ${missing[*]})" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # No service starts on install (openssh-server would listen on port 22,
  # caddy on 80): the tests and the bench start their own instances, on
  # their own ports. policy-rc.d is Debian's switch for that; one the
  # machine already has is left alone.
  own_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
  fi
  rc=0
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
  [ -z "$own_policy" ] || rm -f /usr/sbin/policy-rc.d
  [ "$rc" = 0 ] || exit "$rc"
fi

# Debian's caddy and fail2ban may already run, installed before this script
# or by hand; the tests run their own instances and must own the ports.
for unit in caddy fail2ban; do
  if command -v systemctl >/dev/null && systemctl is-active --quiet "$unit" 2>/dev/null; then
    systemctl stop "$unit" || true
  fi
done

GOBIN="$(go env GOPATH)/bin"
if ! [ -x "$GOBIN/gotestsum" ]; then
  echo "install-deps: installing gotestsum"
  go install gotest.tools/gotestsum@v1.13.0
fi

# nfpm builds the .deb and .rpm (`make package` and the package test).
# Its module version, as Go recorded it: `go install` leaves nfpm's own
# --version at "dev", which made every run install it again.
if ! go version -m "$GOBIN/nfpm" 2>/dev/null | grep -qE '^\s+mod\s+github.com/goreleaser/nfpm/v2\s+v2\.44\.0\s'; then
  echo "install-deps: installing nfpm"
  go install github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.44.0
fi

# Again whenever the lock file changed since npm last installed (npm writes
# node_modules/.package-lock.json): a new devDependency must not be missed.
if [ -f ui/package.json ] && [ ui/package-lock.json -nt ui/node_modules/.package-lock.json ]; then
  echo "install-deps: installing the UI's npm packages"
  (cd ui && npm ci --no-audit --no-fund --loglevel=error)
fi
