#!/bin/sh
# Runs after install and upgrade (deb and rpm). Reloads systemd and starts
# the dashboard socket; the daemon itself starts on the first connection.
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
  systemctl enable --now tunnelsvc.socket >/dev/null 2>&1 || true
  # An upgrade restarts a running daemon so the new binary serves.
  if systemctl is-active --quiet tunnelsvc.service; then
    systemctl restart tunnelsvc.service || true
  fi
fi
if [ -x /usr/bin/tunnelsvc ] && ! [ -e /var/lib/tunnelsvc/tunnelsvc.db ]; then
  echo "tunnelsvc: open the dashboard at http://127.0.0.1:7380 (or through SSH port forwarding) to set the password."
  echo "tunnelsvc: setting it up from another address needs the code printed by: tunnelsvc setup-code"
fi
