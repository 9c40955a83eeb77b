#!/usr/bin/env bash
# testbed.sh — a throwaway host with a real systemd as PID 1, for system tests.
#
# A host is a directory DIR. `up` boots /lib/systemd/systemd as PID 1 of new
# pid, mount, net and uts namespaces, chrooted into an overlay whose lower
# layer is the real `/`: every write lands in DIR/upper and the real `/` stays
# clean. Two hosts joined by `veth` are a VPS and a machine.
#
#   testbed.sh up DIR [NAME]       boot; wait until is-system-running says
#                                  running or degraded (TESTBED_BOOT_TIMEOUT s)
#   testbed.sh exec DIR CMD...     run CMD inside (cwd /, the host's root)
#   testbed.sh cp DIR SRC DST [MODE]  copy a file in (parents created)
#   testbed.sh veth DIR1 ADDR1 DIR2 ADDR2 [IF1 [IF2]]   join two hosts: ADDRs
#                                  are CIDRs on a private test subnet, e.g.
#                                  10.213.0.1/24; the link is eth0 on each, or
#                                  IF1 on the first (a VPS with several
#                                  machines) and IF2 on the second
#   testbed.sh halt DIR            power off, keeping the upper dir: `up DIR`
#                                  boots it again later
#   testbed.sh reboot DIR [NAME]   power off, then boot again over the same
#                                  upper dir (what the host wrote survives;
#                                  /run, /tmp and its network do not)
#   testbed.sh down DIR            pull the plug (no orderly shutdown), unmount, rm -rf
#
# Needs root, util-linux (unshare, nsenter), iproute2 and systemd installed on
# the outer machine. Units that reach the network, wait for terminals or are
# merely slow are masked inside; caddy and fail2ban are kept from starting at
# boot unless the host enabled them itself (not masked: tests start them
# when they need them).
set -euo pipefail

# Units masked inside every host: the network (apt, time sync, avahi), ttys,
# udev (it would rewrite the outer /dev, which is bind-mounted in), periodic
# housekeeping and servers the tests do not use (nginx, which the outer
# machine has for the PROXY protocol tests, would take port 80 from Caddy).
MASK=(
  apt-daily.timer apt-daily-upgrade.timer apt-daily.service apt-daily-upgrade.service
  dpkg-db-backup.timer man-db.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer
  systemd-tmpfiles-clean.timer systemd-timesyncd.service avahi-daemon.service avahi-daemon.socket
  getty@tty1.service console-getty.service getty.target serial-getty@.service
  systemd-udevd.service systemd-udev-trigger.service systemd-udev-settle.service
  systemd-udevd-control.socket systemd-udevd-kernel.socket systemd-pstore.service
  postgresql.service cron.service remote-fs.target ssh.service ssh.socket
  nginx.service
)
# Generators masked inside every host: each daemon-reload (dpkg and the
# daemon make about 150 in a run of the system tests) runs every generator,
# and these only look for disks, consoles, the kernel's command line,
# resume images and the outer machine's fstab, none of which a host has.
# systemd-sysv-generator stays: it is how init.d-only services exist.
MASK_GENERATORS=(
  systemd-cryptsetup-generator systemd-debug-generator systemd-fstab-generator
  systemd-getty-generator systemd-gpt-auto-generator systemd-hibernate-resume-generator
  systemd-integritysetup-generator systemd-veritysetup-generator systemd-rc-local-generator
  systemd-run-generator systemd-system-update-generator postgresql-generator
)
# Enabled on the outer machine but started by tests, not at boot.
NO_AUTOSTART=(caddy.service fail2ban.service)

die() { echo "testbed: $*" >&2; exit 1; }

pid_of() {
  local dir=$1
  [ -s "$dir/pid" ] || die "$dir is not a running testbed (no $dir/pid)"
  cat "$dir/pid"
}

enter() {
  local pid
  pid=$(pid_of "$1"); shift
  # -r -w: the host's root and cwd; without them writes hit the real /.
  nsenter -t "$pid" -m -p -n -u -r -w -- "$@"
}

# The part that runs inside the new namespaces, before systemd.
boot_inner() {
  local dir=$1 name=$2
  mount --make-rprivate /
  mount -t overlay overlay -o "lowerdir=/,upperdir=$dir/upper,workdir=$dir/work" "$dir/merged"
  local m=$dir/merged
  mount --rbind /dev "$m/dev"
  mount -t proc proc "$m/proc"
  mount -t sysfs sysfs "$m/sys"
  mount --rbind /sys/fs/cgroup "$m/sys/fs/cgroup"
  # Own /run and /tmp: the outer machine's (and other testbeds' dirs, which
  # live in /tmp) must not show through.
  mount -t tmpfs -o mode=755 tmpfs "$m/run"
  mount -t tmpfs -o mode=1777 tmpfs "$m/tmp"
  echo "$name" >"$m/etc/hostname"
  hostname "$name"
  for u in "${MASK[@]}"; do ln -sfn /dev/null "$m/etc/systemd/system/$u"; done
  mkdir -p "$m/etc/systemd/system-generators"
  for g in "${MASK_GENERATORS[@]}"; do ln -sfn /dev/null "$m/etc/systemd/system-generators/$g"; done
  # The outer machine's enablement of these is dropped; a host that enabled
  # one itself (its own link in the upper dir) keeps it across reboots.
  local u f
  for u in "${NO_AUTOSTART[@]}"; do
    for f in "$m"/etc/systemd/system/*.wants/"$u"; do
      [ -L "$f" ] || continue
      [ -L "$dir/upper${f#"$m"}" ] && continue
      rm -f "$f"
    done
  done
  # Shared propagation under the host's root, as systemd sets it up on a
  # real machine but not in a container: systemd prepares a unit's
  # credentials ($CREDENTIALS_DIRECTORY) in a mount namespace of its own
  # and moves them into place, which a private root never shows the unit.
  # The outer machine stays apart: everything here was made private first.
  mount --make-rshared "$m"
  # Boot into multi-user without a graphical or rescue detour.
  ln -sfn /lib/systemd/system/multi-user.target "$m/etc/systemd/system/default.target"
  exec env -i container=tunnelsvc-testbed TERM=dumb PATH=/usr/sbin:/usr/bin:/sbin:/bin /usr/sbin/chroot "$m" /lib/systemd/systemd --system --log-target=console
}

# cgroup_dirs prints the testbed's own cgroup on every hierarchy systemd uses,
# so that two testbeds (and the outer machine) never share system.slice.
cgroup_dirs() {
  local name=$1
  for h in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; do
    [ -d "$h" ] && echo "$h/$name"
  done
  # Pure cgroup v2: the root itself is the unified hierarchy.
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then echo "/sys/fs/cgroup/$name"; fi
}

up() {
  local dir=${1:?usage: testbed.sh up DIR [NAME]} name=${2:-testbed}
  [ "$(id -u)" = 0 ] || die "must run as root"
  [ -x /lib/systemd/systemd ] || die "no /lib/systemd/systemd on this machine"
  mkdir -p "$dir"/{upper,work,merged}
  dir=$(cd "$dir" && pwd)
  local cg
  cg="tunnelsvc-testbed-$(basename "$dir")"
  echo "$cg" >"$dir/cgroup"
  # The unshare'd child is moved into its own cgroup before it execs systemd:
  # a fresh shell writes its own pid, then becomes the namespaces' PID 1.
  # shellcheck disable=SC2016 # expanded by the inner bash
  setsid unshare --pid --fork --mount --net --uts --kill-child \
    bash -c '
      for d in $(bash "$0" cgroup-dirs "$2"); do mkdir -p "$d" && echo 0 >"$d/cgroup.procs"; done
      bash "$0" boot-inner "$1" "$3"' "$0" "$dir" "$cg" "$name" \
    </dev/null >"$dir/console.log" 2>&1 &
  local upid=$!
  echo "$upid" >"$dir/unshare.pid"
  # PID 1 inside is the unshare process's only child.
  local pid="" i
  for ((i = 0; i < 100; i++)); do
    pid=$(awk '{print $1}' "/proc/$upid/task/$upid/children" 2>/dev/null) || true
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = systemd ] && break
    kill -0 "$upid" 2>/dev/null || { cat "$dir/console.log" >&2; die "unshare exited before systemd started"; }
    sleep 0.1
  done
  [ -n "$pid" ] || die "systemd did not start (see $dir/console.log)"
  echo "$pid" >"$dir/pid"
  local timeout=${TESTBED_BOOT_TIMEOUT:-60} state=""
  for ((i = 0; i < timeout * 4; i++)); do
    state=$(enter "$dir" systemctl is-system-running 2>/dev/null) || true
    case $state in
      running | degraded) echo "testbed: $name is $state (pid $pid)"; return 0 ;;
    esac
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.25
  done
  echo "testbed: $name did not boot within ${timeout}s (last state: ${state:-none}); console:" >&2
  tail -n 40 "$dir/console.log" >&2 || true
  enter "$dir" systemctl --no-pager --failed >&2 2>/dev/null || true
  enter "$dir" systemctl --no-pager list-jobs >&2 2>/dev/null || true
  return 1
}

copy_in() {
  local dir=$1 src=$2 dst=$3 mode=${4:-}
  [ -n "$mode" ] || mode=$(stat -c %a "$src")
  # shellcheck disable=SC2016 # expanded by the inner sh
  enter "$dir" sh -c 'mkdir -p "$(dirname "$1")" && cat >"$1" && chmod "$2" "$1"' sh "$dst" "$mode" <"$src"
}

veth() {
  local d1=$1 a1=$2 d2=$3 a2=$4 if1=${5:-eth0} if2=${6:-eth0}
  local p1 p2 n1 n2
  p1=$(pid_of "$d1"); p2=$(pid_of "$d2")
  # Names unique on the outer machine for the instant they live there.
  n1="tb$p1"; n2="tb$p2"
  ip link add "$n1" type veth peer name "$n2"
  ip link set "$n1" netns "$p1"
  ip link set "$n2" netns "$p2"
  enter "$d1" sh -c "ip link set $n1 name $if1 && ip addr add $a1 dev $if1 && ip link set $if1 up"
  enter "$d2" sh -c "ip link set $n2 name $if2 && ip addr add $a2 dev $if2 && ip link set $if2 up"
}

# halt powers a host off and removes its processes, mounts and cgroups, but
# keeps its directory. With "now" it pulls the plug instead of shutting
# down: for a host about to be removed, whose orderly shutdown (every
# unit stopped, then systemd-shutdown's sync and unmount rounds) would
# only cost time.
halt() {
  local dir=$1 now=${2:-}
  local pid="" upid="" i
  [ -s "$dir/pid" ] && pid=$(cat "$dir/pid")
  [ -s "$dir/unshare.pid" ] && upid=$(cat "$dir/unshare.pid")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    # SIGRTMIN+4 asks systemd for a poweroff; in a pid namespace that ends
    # the namespace, never the outer machine.
    if [ -z "$now" ]; then
      kill -s SIGRTMIN+4 "$pid" 2>/dev/null || true
      for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    # Killing PID 1 of a pid namespace kills everything in it.
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  fi
  if [ -n "$upid" ]; then
    for ((i = 0; i < 50; i++)); do kill -0 "$upid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$upid" 2>/dev/null; then kill -9 "$upid" 2>/dev/null || true; fi
  fi
  # The mounts lived in the dead mount namespace; nothing to unmount outside
  # unless something leaked, which we refuse to hide.
  if findmnt -rn -o TARGET | grep -qF "$dir/"; then
    findmnt -rn -o TARGET | grep -F "$dir/" | sort -r | xargs -r -n1 umount -l
  fi
  # The testbed's cgroups, deepest first (they are empty once PID 1 is gone).
  if [ -s "$dir/cgroup" ]; then
    local cg
    cg=$(cat "$dir/cgroup")
    for d in $(cgroup_dirs "$cg"); do
      [ -d "$d" ] || continue
      for ((i = 0; i < 50; i++)); do
        find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
        [ -d "$d" ] || break
        sleep 0.1
      done
      [ -d "$d" ] && echo "testbed: could not remove cgroup $d" >&2
    done
  fi
  rm -f "$dir/pid" "$dir/unshare.pid"
}

down() {
  local dir=${1:?usage: testbed.sh down DIR}
  [ -d "$dir" ] || return 0
  dir=$(cd "$dir" && pwd)
  halt "$dir" now
  rm -rf "$dir"
}

reboot() {
  local dir=${1:?usage: testbed.sh reboot DIR [NAME]} name=${2:-testbed}
  [ -d "$dir/upper" ] || die "$dir is not a testbed"
  dir=$(cd "$dir" && pwd)
  halt "$dir"
  up "$dir" "$name"
}

cmd=${1:-}
shift || true
case $cmd in
  up) up "$@" ;;
  exec) d=$1; shift; enter "$d" "$@" ;;
  cp) copy_in "$@" ;;
  veth) veth "$@" ;;
  down) down "$@" ;;
  reboot) reboot "$@" ;;
  halt) [ -d "${1:?usage: testbed.sh halt DIR}/upper" ] || die "$1 is not a testbed"; halt "$(cd "$1" && pwd)" ;;
  boot-inner) boot_inner "$@" ;;
  cgroup-dirs) cgroup_dirs "$@" ;;
  *) sed -n '2,25p' "$0" >&2; exit 2 ;;
esac
