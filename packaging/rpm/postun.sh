#!/bin/sh
# %postun of the .rpm ($1: 0 on removal, 1 on upgrade), with the
# %systemd_postun macro's behaviour: systemd forgets removed units. After a
# removal caddy gets its own configuration back (our drop-in is gone;
# restarted only if it was running). rpm has no purge: the database, secret
# key and generated configuration stay in /var/lib/tunnelsvc, /etc/tunnelsvc
# and /etc/revtunnel (the README says how to delete them).
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || :
  if [ "$1" -eq 0 ]; then
    systemctl try-restart caddy.service >/dev/null 2>&1 || :
  fi
fi
exit 0
