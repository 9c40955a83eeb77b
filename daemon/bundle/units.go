// Package bundle is what the daemon ships to machines: the agent and the
// tunnel client for one architecture, their two unit files and the agent's
// sudo rules, as one gzip-compressed tar (contract of issue 26, §1).
//
// The unit files and the sudo rules live here and nowhere else: the bundle
// carries them, the daemon serves them alone under /static/units for
// bootstrap.sh, and so a machine joined today and a machine updated today
// run the very same text.
package bundle

import "strings"

// SystemctlPlaceholder stands where the sudo rules name systemctl: its path
// differs between distributions (/usr/bin, /bin), so the machine puts in
// `command -v systemctl` before installing the rules.
const SystemctlPlaceholder = "@SYSTEMCTL@"

const clientUnit = `# Installed by tunnelsvc (bootstrap.sh or a fleet update); removed by tunnel-uninstall.
[Unit]
Description=tunnelsvc reverse tunnel client
After=network-online.target
Wants=network-online.target
StartLimitIntervalSec=0

[Service]
ExecStart=/usr/local/bin/revtunnel-client -c /etc/revtunnel/client.toml
# One thread runs frpc's Go code: a hand-over between goroutines then wakes
# no other thread, which made tunnels much faster (see the server's unit).
Environment=GOMAXPROCS=1
Restart=always
RestartSec=5s
# frpc only dials the tunnel server and this machine's own ports: no root,
# no capabilities, a read-only system, nothing of the users' homes.
# (PrivateUsers= is left out: with it systemd could not start the unit in
# the test hosts, status 217/USER.)
User=revtunnel
Group=revtunnel
CapabilityBoundingSet=
AmbientCapabilities=
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
PrivateMounts=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
ProcSubset=pid
RestrictAddressFamilies=AF_INET AF_INET6
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
RemoveIPC=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @resources
SystemCallErrorNumber=EPERM
UMask=0077

[Install]
WantedBy=multi-user.target
`

// The agent's port is in its config.env, not in the Description: a unit
// that names the port would differ between machines, and one bundle serves
// them all.
const agentUnit = `# Installed by tunnelsvc (bootstrap.sh or a fleet update); removed by tunnel-uninstall.
[Unit]
Description=tunnelsvc machine agent
After=network.target revtunnel-client.service
StartLimitIntervalSec=0

[Service]
User=tunnel
Group=tunnel
EnvironmentFile=/etc/tunnel-agent/config.env
ExecStart=/usr/local/bin/tunnel-agent serve
Restart=always
RestartSec=5s
# sudo (for its few commands) needs setuid: no NoNewPrivileges, nor the
# options that imply it for a non-root user (RestrictAddressFamilies,
# SystemCallFilter, ProtectKernel*...), and no read-only /etc.
PrivateTmp=yes
ProtectHome=yes
ProtectControlGroups=yes

[Install]
WantedBy=multi-user.target
`

const agentSudoers = `Defaults:tunnel !requiretty
tunnel ALL=(root) NOPASSWD: @SYSTEMCTL@ restart revtunnel-client.service
tunnel ALL=(root) NOPASSWD: /usr/local/bin/tunnel-agent apply-config
tunnel ALL=(root) NOPASSWD: /usr/local/bin/tunnel-agent apply-clients
tunnel ALL=(root) NOPASSWD: /usr/local/bin/tunnel-agent apply-update
tunnel ALL=(root) NOPASSWD: /usr/local/bin/tunnel-agent confirm-update
tunnel ALL=(root) NOPASSWD: /usr/local/bin/tunnel-uninstall --detach
`

// ClientUnit is /etc/systemd/system/revtunnel-client.service.
func ClientUnit() string { return clientUnit }

// EdgeClientUnit is /etc/systemd/system/revtunnel-client@.service: the
// tunnel client of one more edge (the instance is the edge's name), the
// same unit but for its description and config file. The agent's root
// helper installs it when a machine gets a second edge (`tunnel-agent
// apply-clients`), so a bundle keeps the same files.
func EdgeClientUnit() string {
	u := strings.Replace(clientUnit, "Description=tunnelsvc reverse tunnel client\n", "Description=tunnelsvc reverse tunnel client for edge %i\n", 1)
	return strings.Replace(u, "-c /etc/revtunnel/client.toml\n", "-c /etc/revtunnel/client-%i.toml\n", 1)
}

// AgentUnit is /etc/systemd/system/tunnel-agent.service.
func AgentUnit() string { return agentUnit }

// AgentSudoers is /etc/sudoers.d/tunnel-agent with SystemctlPlaceholder
// where systemctl's absolute path goes.
func AgentSudoers() string { return agentSudoers }
