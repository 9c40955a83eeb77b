#!/bin/sh
# %post of the .rpm ($1: 1 on install, 2 on upgrade), with the %systemd_post
# macro's behaviour: on a first install the units follow the distribution's
# presets (Fedora and RHEL leave new services disabled until the admin
# enables them); an upgrade keeps the admin's choice. An upgrade restarts a
# running daemon (never its sockets, which hold the ports) and frps when its
# binary changed.
UNITS="tunnelsvc.socket tunnelsvc-plugin.socket tunnelsvc-gate.socket tunnelsvc-local.socket tunnelsvc-firewall.service"
FRPS=/usr/lib/tunnelsvc/frps

if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || :
fi
if [ "$1" -eq 1 ]; then
  # shellcheck disable=SC2086 # a list of unit names
  systemctl --no-reload preset $UNITS >/dev/null 2>&1 || :
fi
if [ "$1" -ge 2 ] && [ -d /run/systemd/system ]; then
  systemctl try-restart tunnelsvc.service >/dev/null 2>&1 || :
  pid=$(systemctl show -p MainPID --value revtunnel-server.service 2>/dev/null || echo 0)
  if [ "${pid:-0}" -gt 0 ] && ! cmp -s "/proc/$pid/exe" "$FRPS"; then
    systemctl try-restart revtunnel-server.service >/dev/null 2>&1 || :
  fi
fi
exit 0
