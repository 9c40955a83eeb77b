#!/bin/sh
# %preun of the .rpm ($1: 0 on removal, 1 on upgrade), with the
# %systemd_preun macro's behaviour: a removal disables and stops our units
# before their files go, and deletes our nftables table (and no other).
UNITS="tunnelsvc.socket tunnelsvc-plugin.socket tunnelsvc-gate.socket tunnelsvc-local.socket tunnelsvc.service revtunnel-server.service tunnelsvc-firewall.service"
if [ "$1" -eq 0 ]; then
  # shellcheck disable=SC2086 # a list of unit names
  systemctl --no-reload disable --now $UNITS >/dev/null 2>&1 || :
  if command -v nft >/dev/null 2>&1; then
    nft delete table inet tunnelsvc >/dev/null 2>&1 || :
  fi
  # Public tcp tunnels' DNAT table and route_localnet go with the daemon.
  /usr/lib/tunnelsvc/unpublish.sh || :
fi
exit 0
