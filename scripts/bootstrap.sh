#!/usr/bin/env bash
# tunnelsvc machine bootstrap: joins this machine to the control server at
# {base_url} and gives it reverse tunnels.
#
#   bash bootstrap.sh <TOKEN>
#   curl -fsSL {base_url}/static/bootstrap.sh | bash -s -- <TOKEN>
#
# A machine already joined runs the join again, keeping its id, name, ports
# and tunnels (a new agent and tunnel client, a fresh credential), with:
#
#   curl -fsSL {base_url}/static/bootstrap.sh | sudo bash -s -- --rejoin
#
# Environment:
#   TUNNEL_MACHINE_NAME  machine name; skips the prompt (unattended installs)
#   TUNNEL_ASSUME_YES=1  replace an existing /etc/revtunnel/client.toml without asking
#
# Runs as root or as a user who may use sudo. Everything it downloads comes
# from the control server and is checked against its SHA-256.
set -euo pipefail

BASE_URL='{base_url}'
UNIT=revtunnel-client
CLIENT_BIN=/usr/local/bin/revtunnel-client
CLIENT_USER=revtunnel
CONF_DIR=/etc/revtunnel
CONF=$CONF_DIR/client.toml
STATE=$CONF_DIR/machine.env
AGENT_BIN=/usr/local/bin/tunnel-agent
AGENT_DIR=/etc/tunnel-agent
UNINSTALL_BIN=/usr/local/bin/tunnel-uninstall
LIB_DIR=/usr/local/lib/tunnelsvc

# A rejoin may run over SSH through this machine's own tunnel, which it
# restarts: its output then goes nowhere, so output never fails the run,
# and (as root) every line also goes to REJOIN_LOG.
REJOIN_LOG=/var/log/tunnelsvc-rejoin.log
LOG=""
say() {
	[ -z "$LOG" ] || printf '%s %s\n' "$(date -u +%FT%TZ)" "$2" >>"$LOG" 2>/dev/null || true
	if [ "$1" = 2 ]; then
		printf '%s\n' "$2" >&2 2>/dev/null || true
	else
		printf '%s\n' "$2" 2>/dev/null || true
	fi
}
info() { say 1 "bootstrap: $*"; }
warn() { say 2 "bootstrap: warning: $*"; }
die() {
	say 2 "bootstrap: error: $*"
	exit 1
}
usage() {
	cat >&2 <<EOF
usage: bash bootstrap.sh <TOKEN>
       sudo bash bootstrap.sh --rejoin

Joins this machine to the tunnel server at $BASE_URL.
Create a token in the dashboard (Machines > Add machine); it is valid once.
Set TUNNEL_MACHINE_NAME to skip the name prompt.

--rejoin runs the join again on a machine already joined, with the
credential it holds ($STATE): it keeps its id, name, ports and
tunnels, and gets the server's agent and tunnel client.
EOF
}

# --- step 1: a token and a terminal --------------------------------------
if [ $# -lt 1 ] || [ -z "${1:-}" ]; then
	usage
	exit 2
fi
REJOIN=0
TOKEN=$1
if [ "$1" = --rejoin ]; then
	if [ $# -ne 1 ]; then
		usage
		exit 2
	fi
	REJOIN=1 TOKEN=""
	# The file is root's (0600) but its directory is not: no root needed
	# to see it is missing.
	[ -f "$STATE" ] || die "$STATE not found: this machine is not joined to a tunnel server (or was uninstalled), so there is nothing to rejoin; join it with a token instead: create one in the dashboard (Machines > Add machine) and run the command it shows"
	trap '' HUP PIPE
fi
case $TOKEN in
*[!A-Za-z0-9_-]*) die "the token contains characters a token never has; copy it again from the dashboard" ;;
esac
HAVE_TTY=0
if { : </dev/tty; } 2>/dev/null; then
	HAVE_TTY=1
fi
if [ "$REJOIN" = 0 ] && [ "$HAVE_TTY" = 0 ] && [ -z "${TUNNEL_MACHINE_NAME:-}" ]; then
	die "no terminal (/dev/tty) to ask for the machine name; run it in a terminal, or set TUNNEL_MACHINE_NAME for an unattended install"
fi

for tool in curl sha256sum systemctl awk timeout; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool is required but not installed (install it with your package manager)"
done
SYSTEMCTL=$(command -v systemctl)
[ -d /run/systemd/system ] || die "systemd is not running on this machine; the tunnel client runs as a systemd service"

if [ "$(id -u)" -eq 0 ]; then
	SUDO=()
else
	command -v sudo >/dev/null 2>&1 || die "run this as root, or install sudo and run it as a user who may use it"
	SUDO=(sudo)
	info "some steps need root: sudo may ask for your password"
	sudo -v || die "sudo refused; run this as root or as a user who may use sudo"
fi
as_root() { "${SUDO[@]}" "$@"; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# state_value KEY prints KEY's (first) value in $STATE, which is root's.
state_value() { as_root sed -n "s/^$1=//p" "$STATE" | head -n 1; }

# --- step 2: name and user -----------------------------------------------
STATE_USER=""
if [ "$REJOIN" = 1 ]; then
	[ "$(id -u)" -ne 0 ] || LOG=$REJOIN_LOG
	TOKEN=$(state_value TUNNEL_AGENT_TOKEN)
	JOINED_URL=$(state_value TUNNEL_SERVER_URL)
	STATE_USER=$(state_value TUNNEL_USER)
	[ -n "$TOKEN" ] || die "$STATE holds no agent token (TUNNEL_AGENT_TOKEN), so this machine cannot prove who it is; join it with a token instead: create one in the dashboard (Machines > Add machine) and run the command it shows"
	case $TOKEN in
	*[!A-Za-z0-9_-]*) die "the agent token in $STATE is damaged; join this machine with a token from the dashboard instead" ;;
	esac
	if [ -n "$JOINED_URL" ] && [ "$JOINED_URL" != "$BASE_URL" ]; then
		info "this machine joined at $JOINED_URL; rejoining at $BASE_URL"
	fi
fi
NAME=${TUNNEL_MACHINE_NAME:-}
[ "$REJOIN" = 0 ] || NAME="(rejoin)"
tries=0
while [ -z "${NAME//[[:space:]]/}" ]; do
	tries=$((tries + 1))
	[ "$tries" -le 5 ] || die "no machine name given"
	printf 'Machine name (as shown in the dashboard): ' >/dev/tty
	IFS= read -r NAME </dev/tty || die "could not read the machine name from the terminal"
	[ -n "${NAME//[[:space:]]/}" ] || printf 'The name must not be empty.\n' >/dev/tty
done
USERNAME=$(id -un)
if [ "$USERNAME" = root ] && [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
	USERNAME=$SUDO_USER
fi
# A rejoin keeps the user the machine joined with.
[ -z "$STATE_USER" ] || USERNAME=$STATE_USER
USER_HOME=$(getent passwd "$USERNAME" | cut -d: -f6)
if [ -z "$USER_HOME" ] || [ ! -d "$USER_HOME" ]; then
	die "cannot find the home directory of $USERNAME"
fi

# json_str escapes a string for a JSON document.
json_str() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	s=${s//$'\t'/\\t}
	s=${s//$'\n'/\\n}
	s=${s//$'\r'/\\r}
	printf '"%s"' "$s"
}

# json_get KEY FILE prints the string or number value of KEY (first match),
# unescaped; exits non-zero when KEY is absent.
json_get() {
	awk -v key="$1" '
	function hexval(h,   i, c, v) {
		v = 0
		for (i = 1; i <= length(h); i++) {
			c = index("0123456789abcdef", tolower(substr(h, i, 1))) - 1
			v = v * 16 + c
		}
		return v
	}
	{ doc = doc $0 "\n" }
	END {
		k = "\"" key "\":"
		i = index(doc, k)
		if (!i) exit 1
		s = substr(doc, i + length(k))
		sub(/^[ \t\r\n]*/, "", s)
		if (substr(s, 1, 1) != "\"") {
			if (match(s, /^-?[0-9]+/)) { print substr(s, 1, RLENGTH); exit 0 }
			exit 1
		}
		out = ""
		n = length(s)
		for (j = 2; j <= n; j++) {
			c = substr(s, j, 1)
			if (c == "\\") {
				j++
				e = substr(s, j, 1)
				if (e == "n") out = out "\n"
				else if (e == "t") out = out "\t"
				else if (e == "r") out = out "\r"
				else if (e == "u") { out = out sprintf("%c", hexval(substr(s, j + 1, 4))); j += 4 }
				else out = out e
			} else if (c == "\"") {
				printf "%s", out
				exit 0
			} else out = out c
		}
		exit 1
	}' "$2"
}

# fetch URL DEST downloads from the control server. A rejoin downloads
# everything before it replaces the credential (see step 3), and later
# steps take those files.
fetch() {
	if [ "$REJOIN" = 1 ] && [ -s "$2" ]; then
		return 0
	fi
	curl -fsSL --retry 2 --connect-timeout 15 --max-time 300 -o "$2" "$1"
}

# fetch_checked URL DEST downloads URL and URL.sha256 and checks the sum.
fetch_checked() {
	local url=$1 dest=$2 want got
	fetch "$url" "$dest" || return 1
	fetch "$url.sha256" "$dest.sha256" || return 1
	want=$(awk '{print $1; exit}' "$dest.sha256")
	got=$(sha256sum "$dest" | awk '{print $1}')
	if [ -z "$want" ] || [ "$want" != "$got" ]; then
		warn "SHA-256 mismatch for $url: expected ${want:-nothing}, got $got"
		return 1
	fi
}

case $(uname -m) in
x86_64 | amd64) ARCH=amd64 ;;
aarch64 | arm64) ARCH=arm64 ;;
armv7l) ARCH=arm ;;
*) die "unsupported architecture $(uname -m): tunnelsvc supports x86_64, aarch64 and armv7l" ;;
esac

# write_state writes $STATE: where this machine joined, its agent token and
# every authorized_keys file a registration wrote to.
write_state() {
	{
		printf 'TUNNEL_SERVER_URL=%s\n' "$BASE_URL"
		printf 'TUNNEL_AGENT_TOKEN=%s\n' "$AGENT_TOKEN"
		printf 'TUNNEL_USER=%s\n' "$USERNAME"
		printf '%s\n%s\n' "$OLD_KEYS" "$AUTH_KEYS" | awk 'NF && !seen[$0]++ { print "TUNNEL_AUTHORIZED_KEYS=" $0 }'
	} >"$TMP/machine.env"
	as_root install -d -m 0755 "$CONF_DIR"
	as_root install -m 0600 "$TMP/machine.env" "$STATE"
}
OLD_KEYS=""
AUTH_KEYS=$USER_HOME/.ssh/authorized_keys

# --- step 3: register ----------------------------------------------------
if [ "$REJOIN" = 1 ]; then
	# The rejoin replaces the credential at once: the old one stops working.
	# So everything it installs is downloaded first, and the new agent
	# token is saved as soon as it arrives (a second run then uses it).
	info "downloading the tunnel client, the agent and the uninstall script from $BASE_URL"
	fetch_checked "$BASE_URL/static/revtunnel/revtunnel-client-linux-$ARCH" "$TMP/revtunnel-client" ||
		die "could not download a verified tunnel client from $BASE_URL/static/revtunnel/revtunnel-client-linux-$ARCH; nothing was changed"
	case $ARCH in
	amd64 | arm64)
		fetch_checked "$BASE_URL/static/agents/tunnel-agent-linux-$ARCH" "$TMP/tunnel-agent" ||
			die "could not download a verified agent from $BASE_URL/static/agents/tunnel-agent-linux-$ARCH; nothing was changed"
		;;
	esac
	fetch "$BASE_URL/static/tunnel-uninstall.sh" "$TMP/tunnel-uninstall" ||
		die "could not download $BASE_URL/static/tunnel-uninstall.sh; nothing was changed"
	info "rejoining $BASE_URL with this machine's credential (user $USERNAME)"
	# The token goes in a file, not on curl's command line (ps shows that).
	printf 'Authorization: Bearer %s\n' "$TOKEN" >"$TMP/auth.header"
	status=$(curl -sS --connect-timeout 15 --max-time 60 -o "$TMP/response.json" -w '%{http_code}' \
		-X POST -H @"$TMP/auth.header" "$BASE_URL/api/machines/rejoin") ||
		die "could not reach $BASE_URL (is the address right and the server up?); nothing was changed"
	if [ "$status" != 200 ]; then
		msg=$(json_get error "$TMP/response.json" 2>/dev/null || head -c 300 "$TMP/response.json")
		die "rejoin refused (HTTP $status): ${msg:-no message}"
	fi
	NAME=$(json_get name "$TMP/response.json") || die "the server's answer has no name; nothing was installed"
	MACHINE_ID=$(json_get machine_id "$TMP/response.json" || true)
	AGENT_TOKEN=$(json_get agent_token "$TMP/response.json") || die "the server's answer has no agent_token; nothing was installed"
	OLD_KEYS=$(as_root sed -n 's/^TUNNEL_AUTHORIZED_KEYS=//p' "$STATE")
	write_state
	info "rejoined as \"$NAME\" (machine ${MACHINE_ID:-?}): same name, ports and tunnels; the old credential no longer works, the new one is in $STATE"
else
	info "registering \"$NAME\" (user $USERNAME) with $BASE_URL"
	printf '{"token":%s,"name":%s,"username":%s}' "$(json_str "$TOKEN")" "$(json_str "$NAME")" "$(json_str "$USERNAME")" >"$TMP/request.json"
	status=$(curl -sS --connect-timeout 15 --max-time 60 -o "$TMP/response.json" -w '%{http_code}' \
		-H 'Content-Type: application/json' --data-binary @"$TMP/request.json" "$BASE_URL/api/bootstrap") ||
		die "could not reach $BASE_URL (is the address right and the server up?)"
	if [ "$status" != 200 ]; then
		msg=$(json_get error "$TMP/response.json" 2>/dev/null || head -c 300 "$TMP/response.json")
		die "registration refused (HTTP $status): ${msg:-no message}"
	fi
fi
TUNNEL_PORT=$(json_get tunnel_port "$TMP/response.json") || die "the server's answer has no tunnel_port; nothing was installed"
VPS_KEY=$(json_get vps_ssh_public_key "$TMP/response.json") || die "the server's answer has no vps_ssh_public_key"
json_get revtunnel_client_config "$TMP/response.json" >"$TMP/client.toml" || die "the server's answer has no revtunnel_client_config"
AGENT_TOKEN=$(json_get agent_token "$TMP/response.json" || true)
AGENT_PORT=$(json_get agent_local_port "$TMP/response.json" || true)
info "registered: SSH reaches this machine through port $TUNNEL_PORT on the server"

# --- how the tunnel client gets out ----------------------------------------
# The tunnel server's own port first. A network that lets only HTTPS out
# gets the wss transport: the same tunnel server, reached through the web
# proxy on port 443, with the same credential and the same pinned CA.
can_reach() {
	# shellcheck disable=SC2016 # $0 and $1 are the inner shell's arguments
	timeout 5 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2" 2>/dev/null
}
TRANSPORT=$(json_get transport "$TMP/response.json" || echo tcp)
TS_HOST=$(json_get host "$TMP/response.json" || true)
TS_PORT=$(json_get port "$TMP/response.json" || true)
WSS_PORT=$(json_get wss_port "$TMP/response.json" || true)
WANT=$TRANSPORT
if [ -n "$TS_HOST" ] && [ -n "$TS_PORT" ] && [ -n "$WSS_PORT" ]; then
	if can_reach "$TS_HOST" "$TS_PORT"; then
		WANT=tcp
		info "the tunnel server answers at $TS_HOST:$TS_PORT: the tunnel client connects to it directly"
	elif can_reach "$TS_HOST" "$WSS_PORT"; then
		WANT=wss
		info "$TS_HOST:$TS_PORT does not answer from here but $TS_HOST:$WSS_PORT does: the tunnel client connects over port $WSS_PORT (wss, through the web proxy)"
	else
		warn "neither $TS_HOST:$TS_PORT nor $TS_HOST:$WSS_PORT answers from here (a firewall on the way?): the tunnel client keeps trying $TRANSPORT"
	fi
fi
if [ "$WANT" != "$TRANSPORT" ]; then
	printf 'Authorization: Bearer %s\n' "$AGENT_TOKEN" >"$TMP/auth.header"
	printf '{"transport":"%s"}' "$WANT" >"$TMP/transport.json"
	status=$(curl -sS --connect-timeout 15 --max-time 60 -o "$TMP/transport-response.json" -w '%{http_code}' \
		-X POST -H @"$TMP/auth.header" -H 'Content-Type: application/json' --data-binary @"$TMP/transport.json" \
		"$BASE_URL/api/machines/transport") ||
		die "could not reach $BASE_URL to switch the tunnel client to $WANT; run the join again"
	if [ "$status" != 200 ]; then
		msg=$(json_get error "$TMP/transport-response.json" 2>/dev/null || head -c 300 "$TMP/transport-response.json")
		die "the server refused the $WANT transport (HTTP $status): ${msg:-no message}"
	fi
	json_get revtunnel_client_config "$TMP/transport-response.json" >"$TMP/client.toml" ||
		die "the server's answer has no revtunnel_client_config"
	TRANSPORT=$WANT
fi

# --- step 4: the server's key in authorized_keys -------------------------
run_as_user() {
	if [ "$(id -un)" = "$USERNAME" ]; then "$@"; else as_root runuser -u "$USERNAME" -- "$@"; fi
}
run_as_user mkdir -p "$USER_HOME/.ssh"
run_as_user chmod 700 "$USER_HOME/.ssh"
run_as_user touch "$AUTH_KEYS"
run_as_user chmod 600 "$AUTH_KEYS"
if run_as_user grep -qxF -- "$VPS_KEY" "$AUTH_KEYS"; then
	info "the server's key is already in $AUTH_KEYS"
else
	printf '%s\n' "$VPS_KEY" | run_as_user tee -a "$AUTH_KEYS" >/dev/null
	info "added the server's key to $AUTH_KEYS"
fi

# --- step 5: the tunnel client and its config ----------------------------
if [ -x "$CLIENT_BIN" ] && [ "$REJOIN" = 0 ]; then
	info "tunnel client already installed at $CLIENT_BIN"
else
	info "downloading the tunnel client (linux-$ARCH) from $BASE_URL"
	fetch_checked "$BASE_URL/static/revtunnel/revtunnel-client-linux-$ARCH" "$TMP/revtunnel-client" ||
		die "could not download a verified tunnel client from $BASE_URL/static/revtunnel/revtunnel-client-linux-$ARCH (the server builds it with 'make build')"
	as_root install -m 0755 "$TMP/revtunnel-client" "$CLIENT_BIN"
fi
"$CLIENT_BIN" verify -c "$TMP/client.toml" >"$TMP/verify.log" 2>&1 ||
	die "the tunnel client refused the configuration from the server: $(cat "$TMP/verify.log")"

OLD_TOKEN="" OLD_URL=""
if as_root test -f "$CONF"; then
	if as_root test -f "$STATE"; then
		OLD_TOKEN=$(as_root sed -n 's/^TUNNEL_AGENT_TOKEN=//p' "$STATE")
		OLD_URL=$(as_root sed -n 's/^TUNNEL_SERVER_URL=//p' "$STATE")
		# Every authorized_keys file a registration wrote to, so that the
		# uninstall finds them all even after a re-run as another user.
		OLD_KEYS=$(as_root sed -n 's/^TUNNEL_AUTHORIZED_KEYS=//p' "$STATE")
	fi
	if [ "${TUNNEL_ASSUME_YES:-}" != 1 ] && [ "$REJOIN" = 0 ]; then
		[ "$HAVE_TTY" = 1 ] || die "$CONF exists; set TUNNEL_ASSUME_YES=1 to replace it unattended"
		printf '%s exists (this machine was joined before). Replace it with the new registration? [y/N] ' "$CONF" >/dev/tty
		read -r answer </dev/tty || answer=""
		case $answer in
		y | Y | yes | YES) ;;
		*) die "kept $CONF; the new registration is unused: delete machine \"$NAME\" in the dashboard" ;;
		esac
	fi
fi
# The tunnel client runs as a system user of its own that may read its
# config (root:revtunnel 0640) but not change it; only root (the agent's
# apply-config) writes it.
if ! id -u "$CLIENT_USER" >/dev/null 2>&1; then
	as_root useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$CLIENT_USER" ||
		die "could not create the system user $CLIENT_USER"
fi
as_root install -d -m 0755 "$CONF_DIR"
as_root install -m 0640 -o root -g "$CLIENT_USER" "$TMP/client.toml" "$CONF"
printf '%s\n' "$VPS_KEY" >"$TMP/vps_key.pub"
as_root install -m 0644 "$TMP/vps_key.pub" "$CONF_DIR/vps_key.pub"
write_state
info "wrote $CONF"

# A re-run with a new token replaces the old registration on the server (a
# rejoin is the same registration).
if [ "$REJOIN" = 0 ] && [ -n "$OLD_TOKEN" ] && [ -n "$OLD_URL" ] && [ "$OLD_TOKEN" != "$AGENT_TOKEN" ]; then
	if curl -fsS --connect-timeout 15 --max-time 30 -o /dev/null -X POST \
		-H "Authorization: Bearer $OLD_TOKEN" "$OLD_URL/api/machines/self-delete"; then
		info "removed this machine's previous registration from $OLD_URL"
	else
		warn "could not remove the previous registration from $OLD_URL; delete the old machine in the dashboard"
	fi
fi

# --- step 6: uninstall script, sudo rules, the client service ------------
fetch "$BASE_URL/static/tunnel-uninstall.sh" "$TMP/tunnel-uninstall" ||
	die "could not download $BASE_URL/static/tunnel-uninstall.sh"
as_root install -m 0755 "$TMP/tunnel-uninstall" "$UNINSTALL_BIN"

# install_sudoers NAME FILE validates FILE with visudo and installs it.
install_sudoers() {
	if ! as_root test -d /etc/sudoers.d; then
		warn "/etc/sudoers.d does not exist (sudo not installed): skipped the sudo rules $1"
		return 0
	fi
	if command -v visudo >/dev/null 2>&1; then
		as_root visudo -cqf "$2" >/dev/null || die "visudo refused the sudo rules for $1"
	fi
	as_root install -m 0440 "$2" "/etc/sudoers.d/$1"
}
if [ "$USERNAME" != root ]; then
	{
		printf '# tunnelsvc: %s may restart the tunnel client and uninstall it.\n' "$USERNAME"
		for verb in start restart reset-failed; do
			printf '%s ALL=(root) NOPASSWD: %s %s %s\n' "$USERNAME" "$SYSTEMCTL" "$verb" "$UNIT"
			printf '%s ALL=(root) NOPASSWD: %s %s %s.service\n' "$USERNAME" "$SYSTEMCTL" "$verb" "$UNIT"
		done
		printf '%s ALL=(root) NOPASSWD: %s\n' "$USERNAME" "$UNINSTALL_BIN"
	} >"$TMP/sudoers-client"
	install_sudoers revtunnel-client "$TMP/sudoers-client"
fi

# The unit files and the agent's sudo rules come from the server, as the
# machine bundle of a fleet update carries them: one text for both paths.
fetch "$BASE_URL/static/units/$UNIT.service" "$TMP/$UNIT.service" ||
	die "could not download $BASE_URL/static/units/$UNIT.service"
as_root install -m 0644 "$TMP/$UNIT.service" "/etc/systemd/system/$UNIT.service"
as_root "$SYSTEMCTL" daemon-reload
as_root "$SYSTEMCTL" enable "$UNIT.service" >/dev/null 2>&1 || die "could not enable $UNIT.service"
as_root "$SYSTEMCTL" restart "$UNIT.service" ||
	die "$UNIT.service did not start: see 'journalctl -u $UNIT'"
info "started $UNIT.service"

# --- step 7: the agent -----------------------------------------------------
install_agent() {
	if [ -z "$AGENT_TOKEN" ] || [ -z "$AGENT_PORT" ]; then
		info "the server offered no agent: skipped"
		return 0
	fi
	case $ARCH in
	amd64 | arm64) ;;
	*)
		info "no agent for linux-$ARCH: skipped (tunnels still work; config changes then need a re-run)"
		return 0
		;;
	esac
	if ! command -v sudo >/dev/null 2>&1; then
		warn "sudo is not installed: the agent (which runs as user tunnel and uses sudo for exactly its few commands) is skipped"
		return 0
	fi
	if ! fetch_checked "$BASE_URL/static/agents/tunnel-agent-linux-$ARCH" "$TMP/tunnel-agent"; then
		warn "could not download a verified agent from $BASE_URL/static/agents/tunnel-agent-linux-$ARCH: skipped the agent (tunnels still work)"
		return 0
	fi
	if ! id -u tunnel >/dev/null 2>&1; then
		as_root useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin tunnel ||
			die "could not create the system user tunnel"
	fi
	as_root install -m 0755 "$TMP/tunnel-agent" "$AGENT_BIN"
	{
		printf 'TUNNEL_AGENT_TOKEN=%s\n' "$AGENT_TOKEN"
		printf 'TUNNEL_AGENT_PORT=%s\n' "$AGENT_PORT"
		printf 'TUNNEL_AGENT_UNIT=%s.service\n' "$UNIT"
		printf 'TUNNEL_AGENT_FRPC=%s\n' "$CLIENT_BIN"
		printf 'TUNNEL_AGENT_CLIENT_CONFIG=%s\n' "$CONF"
	} >"$TMP/config.env"
	as_root install -d -m 0755 "$AGENT_DIR"
	as_root install -m 0600 "$TMP/config.env" "$AGENT_DIR/config.env"
	fetch "$BASE_URL/static/units/sudoers-tunnel-agent" "$TMP/sudoers-agent.in" ||
		die "could not download $BASE_URL/static/units/sudoers-tunnel-agent"
	# The rules name systemctl by its path, which differs between
	# distributions: the server leaves @SYSTEMCTL@ for the one found here.
	sed "s|@SYSTEMCTL@|$SYSTEMCTL|g" "$TMP/sudoers-agent.in" >"$TMP/sudoers-agent"
	install_sudoers tunnel-agent "$TMP/sudoers-agent"
	fetch "$BASE_URL/static/units/tunnel-agent.service" "$TMP/tunnel-agent.service" ||
		die "could not download $BASE_URL/static/units/tunnel-agent.service"
	as_root install -m 0644 "$TMP/tunnel-agent.service" /etc/systemd/system/tunnel-agent.service
	as_root "$SYSTEMCTL" daemon-reload
	as_root "$SYSTEMCTL" enable tunnel-agent.service >/dev/null 2>&1 || die "could not enable tunnel-agent.service"
	as_root "$SYSTEMCTL" restart tunnel-agent.service ||
		die "tunnel-agent.service did not start: see 'journalctl -u tunnel-agent'"
	info "started tunnel-agent.service on 127.0.0.1:$AGENT_PORT"
	# The agent reports the bundle version it was installed with; the
	# dashboard compares it with the server's to offer an update.
	if fetch "$BASE_URL/static/bundles/VERSION" "$TMP/bundle-version"; then
		as_root install -d -m 0755 "$LIB_DIR"
		as_root install -m 0644 "$TMP/bundle-version" "$LIB_DIR/bundle-version"
	else
		warn "could not learn the server's bundle version: the agent reports its own"
	fi
}
install_agent

# --- step 8: done ----------------------------------------------------------
if [ "$TRANSPORT" = wss ]; then
	info "the tunnel client reaches the tunnel server over port ${WSS_PORT:-443} (wss, through the web proxy)"
fi
if [ "$REJOIN" = 1 ]; then
	info "done: \"$NAME\" rejoined $BASE_URL with the server's agent and tunnel client; it kept its id, ports and tunnels, and the server now sends it its config"
	[ -z "$LOG" ] || info "this run is logged in $LOG"
else
	info "done: \"$NAME\" is joined to $BASE_URL"
fi
info "uninstall with: sudo $UNINSTALL_BIN"
