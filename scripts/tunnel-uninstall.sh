#!/usr/bin/env bash
# tunnelsvc: removes this machine's tunnel client and agent, and the machine
# from the control server. Installed by bootstrap.sh as
# /usr/local/bin/tunnel-uninstall. Safe to run twice.
#
#   sudo tunnel-uninstall           remove everything
#   tunnel-uninstall --detach       (the agent) run it as its own transient
#                                   unit, since it stops the agent itself
set -euo pipefail

UNIT=revtunnel-client
CONF_DIR=/etc/revtunnel
STATE=$CONF_DIR/machine.env
AGENT_DIR=/etc/tunnel-agent
SELF=/usr/local/bin/tunnel-uninstall
# The bundle before the last update, its rollback script and update state.
LIB_DIR=/usr/local/lib/tunnelsvc

info() { printf 'tunnel-uninstall: %s\n' "$*"; }
warn() { printf 'tunnel-uninstall: warning: %s\n' "$*" >&2; }
die() {
	printf 'tunnel-uninstall: error: %s\n' "$*" >&2
	exit 1
}

if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || die "run this as root"
	exec sudo -- "$0" "$@"
fi

if [ "${1:-}" = --detach ]; then
	# Stopping tunnel-agent.service would kill this script with it if it ran
	# in the agent's cgroup: hand it to systemd as a unit of its own.
	exec systemd-run --unit="tunnel-uninstall-$$" --collect --quiet "$(readlink -f "$0")"
fi

get() { sed -n "s/^$1=//p" "$STATE" 2>/dev/null | head -n 1; }

# 1. The machine leaves the control server (needs the agent token).
if [ -f "$STATE" ]; then
	url=$(get TUNNEL_SERVER_URL)
	token=$(get TUNNEL_AGENT_TOKEN)
	if [ -n "$url" ] && [ -n "$token" ]; then
		code=$(curl -sS --connect-timeout 15 --max-time 30 -o /dev/null -w '%{http_code}' -X POST \
			-H "Authorization: Bearer $token" "$url/api/machines/self-delete" 2>/dev/null || true)
		case $code in
		200) info "this machine was deleted on $url" ;;
		401) info "$url does not know this machine any more (already deleted)" ;;
		*) warn "could not delete this machine on $url (HTTP ${code:-no answer}); delete it in the dashboard" ;;
		esac
	fi
	auth_keys=$(sed -n 's/^TUNNEL_AUTHORIZED_KEYS=//p' "$STATE")
else
	info "no $STATE: the control server is not contacted"
	auth_keys=""
fi

# 2. Services. The rollback timer of an unconfirmed update goes first: it
# would otherwise put the files back after they are removed.
for u in tunnelsvc-rollback.timer tunnelsvc-rollback.service; do
	if [ -f "/etc/systemd/system/$u" ]; then
		systemctl stop "$u" >/dev/null 2>&1 || true
		rm -f "/etc/systemd/system/$u"
		info "stopped and removed $u"
	fi
done
for u in tunnel-agent "$UNIT"; do
	if [ -f "/etc/systemd/system/$u.service" ]; then
		systemctl disable --now "$u.service" >/dev/null 2>&1 || true
		rm -f "/etc/systemd/system/$u.service"
		info "stopped and removed $u.service"
	fi
done
# The clients of the other edges of a cluster, and their template.
for f in "$CONF_DIR"/client-*.toml; do
	[ -f "$f" ] || continue
	edge=${f#"$CONF_DIR"/client-}
	edge=${edge%.toml}
	systemctl disable --now "$UNIT@$edge.service" >/dev/null 2>&1 || true
	info "stopped and removed $UNIT@$edge.service"
done
rm -f "/etc/systemd/system/$UNIT@.service"
systemctl daemon-reload || true
systemctl reset-failed tunnel-agent.service "$UNIT.service" "$UNIT@*.service" tunnelsvc-rollback.service >/dev/null 2>&1 || true

# 3. The server's key line in every authorized_keys a registration wrote to.
if [ -n "$auth_keys" ] && [ -s "$CONF_DIR/vps_key.pub" ]; then
	key=$(head -n 1 "$CONF_DIR/vps_key.pub")
	while IFS= read -r f; do
		if [ -f "$f" ] && grep -qxF -- "$key" "$f"; then
			tmp=$(mktemp)
			grep -vxF -- "$key" "$f" >"$tmp" || true
			# Rewrite in place: keeps the file's owner and mode.
			cat "$tmp" >"$f"
			rm -f "$tmp"
			info "removed the server's key from $f"
		fi
	done <<<"$auth_keys"
fi

# 4. Files, the previous bundle, the log of a rejoin, sudo rules, the
# agent's and the tunnel client's users, this script.
rm -rf "$CONF_DIR" "$AGENT_DIR" "$LIB_DIR"
rm -f /usr/local/bin/revtunnel-client /usr/local/bin/tunnel-agent \
	/etc/sudoers.d/revtunnel-client /etc/sudoers.d/tunnel-agent /var/log/tunnelsvc-rejoin.log
for u in tunnel revtunnel; do
	if id -u "$u" >/dev/null 2>&1; then
		userdel "$u" >/dev/null 2>&1 || warn "could not remove the user $u"
	fi
done
rm -f "$SELF"
info "done: the tunnel client, the agent and their files are gone"
