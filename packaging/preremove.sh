#!/bin/sh
# Runs before removal. deb passes "remove"/"upgrade", rpm passes the number
# of versions left (0 on removal). Only a real removal stops the service;
# data in /var/lib/tunnelsvc is kept (purge it by hand).
set -e
case "$1" in
  remove|0)
    if [ -d /run/systemd/system ]; then
      systemctl disable --now tunnelsvc.socket tunnelsvc.service >/dev/null 2>&1 || true
    fi
    # Public tcp tunnels' DNAT table and route_localnet go with the daemon.
    /usr/lib/tunnelsvc/unpublish.sh || true
    ;;
esac
