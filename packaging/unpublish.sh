#!/bin/sh
# unpublish.sh — run by the package's preremove on removal: take away what
# the daemon set up for public tcp tunnels (README, "Public tcp tunnels").
# The daemon loads table ip tunnelsvc_publish and turns on
# net.ipv4.conf.all.route_localnet only while a public tunnel exists. The
# table's guard chain is what keeps neighbours away from loopback services
# while route_localnet is on, so when the table goes, route_localnet goes
# off with it.
set -u
if command -v nft >/dev/null 2>&1 && nft list table ip tunnelsvc_publish >/dev/null 2>&1; then
  nft delete table ip tunnelsvc_publish || echo "tunnelsvc: could not delete table ip tunnelsvc_publish" >&2
  sysctl -q -w net.ipv4.conf.all.route_localnet=0 || echo "tunnelsvc: could not turn net.ipv4.conf.all.route_localnet off" >&2
fi
# (The tests point this at their own file.)
rm -f "${TUNNELSVC_PUBLISH_NFT:-/etc/tunnelsvc/publish.nft}"
exit 0
