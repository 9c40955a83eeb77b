package agent

import (
	"fmt"
	"strings"
)

// The rollback units. apply-update starts the timer before it replaces
// anything; confirm-update stops it and removes both once the control server
// saw the new agent; otherwise the service runs rollback.sh.
const (
	rollbackTimer   = "tunnelsvc-rollback.timer"
	rollbackService = "tunnelsvc-rollback.service"
)

// RollbackSeconds is how long the new agent has to be seen by the control
// server (which then confirms) before the previous bundle comes back.
const RollbackSeconds = 60

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// rollbackScript is LIB/rollback.sh for an update from prev to version.
// It must work when the new binaries do not (that is when it runs), so it
// uses only sh, coreutils and systemctl, and every path is written into it.
func (u *Updater) rollbackScript(version string) string {
	var puts strings.Builder
	for _, f := range bundleFiles {
		if f.Target == "" {
			continue
		}
		line := fmt.Sprintf("put %s %s %04o\n", f.Name, shQuote(u.path(f.Target)), f.Mode)
		if f.Name == "sudoers-tunnel-agent" {
			// No sudo on this machine: apply-update installed no rules.
			line = "if [ -d " + shQuote(u.path("/etc/sudoers.d")) + " ]; then\n\t" + line + "fi\n"
		}
		puts.WriteString(line)
	}
	return `#!/bin/sh
# tunnelsvc: puts back the machine bundle saved in previous/ by
# "tunnel-agent apply-update" before it installed bundle ` + version + `.
# tunnelsvc-rollback.timer runs it ` + fmt.Sprint(RollbackSeconds) + ` s after that update unless
# "tunnel-agent confirm-update" (the new agent, once the control server saw
# it) disarms the timer first.
#
# It runs when the new binaries may not work, so it uses only sh, coreutils
# and systemctl. An argument replaces the reason it records.
set -u

LIB=` + shQuote(u.path(LibDir)) + `
UNITS=` + shQuote(u.path("/etc/systemd/system")) + `
NEW=` + version + `
PREV=$LIB/previous
reason=${1:-"the new agent ($NEW) did not check in within ` + fmt.Sprint(RollbackSeconds) + ` s"}
failed=""

prev=$(head -n 1 "$PREV/VERSION" 2>/dev/null) || prev=""
[ -n "$prev" ] || prev=unknown

# put NAME TARGET MODE puts the saved NAME back at TARGET through a
# temporary file beside it (synced, then renamed: a reader never sees half a
# file), or removes TARGET when the machine had no such file before.
put() {
	if [ -f "$PREV/$1" ]; then
		tmp="$2.rollback-$$"
		if cp "$PREV/$1" "$tmp" && chmod "$3" "$tmp" && sync && mv -f "$tmp" "$2"; then
			return 0
		fi
		rm -f "$tmp"
		failed="$failed $2"
	else
		rm -f "$2"
	fi
}

` + puts.String() + `
tmp="$LIB/bundle-version.rollback-$$"
if ! { printf '%s\n' "$prev" >"$tmp" && mv -f "$tmp" "$LIB/bundle-version"; }; then
	rm -f "$tmp"
	failed="$failed $LIB/bundle-version"
fi

if [ -n "$failed" ]; then
	msg="$reason; restoring bundle $prev failed for:$failed"
else
	msg="$reason; bundle $prev was restored"
fi
tmp="$LIB/update-state.rollback-$$"
{
	printf 'state=rolled_back\n'
	printf 'version=%s\n' "$NEW"
	printf 'error=%s\n' "$msg"
	printf 'at=%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
} >"$tmp" && chmod 0644 "$tmp" && mv -f "$tmp" "$LIB/update-state"

# The rollback is done: it must not run again.
systemctl stop ` + rollbackTimer + ` || true
rm -f "$UNITS/` + rollbackTimer + `" "$UNITS/` + rollbackService + `"
systemctl daemon-reload || failed="$failed daemon-reload"
systemctl restart revtunnel-client.service || failed="$failed revtunnel-client.service"
for f in ` + shQuote(u.path("/etc/revtunnel")) + `/client-*.toml; do
	[ -f "$f" ] || continue
	edge=${f##*/client-}
	edge=${edge%.toml}
	systemctl restart "revtunnel-client@$edge.service" || failed="$failed revtunnel-client@$edge.service"
done
systemctl restart tunnel-agent.service || failed="$failed tunnel-agent.service"

if [ -n "$failed" ]; then
	echo "rollback.sh: $msg; failed:$failed" >&2
	exit 1
fi
echo "rollback.sh: $msg"
`
}

// rollbackServiceUnit runs rollback.sh once.
func (u *Updater) rollbackServiceUnit(version string) string {
	return `# tunnelsvc: written by "tunnel-agent apply-update" (bundle ` + version + `); removed by
# "tunnel-agent confirm-update" or by rollback.sh once it ran.
[Unit]
Description=tunnelsvc: put back the machine bundle from before the update to ` + version + `

[Service]
Type=oneshot
ExecStart=/bin/sh ` + u.path(LibDir) + `/rollback.sh
`
}

// rollbackTimerUnit fires RollbackSeconds after it is started. It is only
// started, never enabled: it belongs to one update, not to every boot.
func (u *Updater) rollbackTimerUnit(version string) string {
	return `# tunnelsvc: written by "tunnel-agent apply-update" (bundle ` + version + `); stopped and
# removed by "tunnel-agent confirm-update" once the new agent is seen.
[Unit]
Description=tunnelsvc: roll back the update to ` + version + ` unless it is confirmed within ` + fmt.Sprint(RollbackSeconds) + ` s

[Timer]
OnActiveSec=` + fmt.Sprint(RollbackSeconds) + `s
AccuracySec=1s
Unit=` + rollbackService + `
`
}
