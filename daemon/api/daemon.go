package api

import (
	"net/http"

	tunnelsvc "github.com/tunnelsvc/tunnelsvc"
	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/sso"
	"github.com/tunnelsvc/tunnelsvc/daemon/webui"
)

// ForDaemon is the dashboard's and the API's handler over the daemon a,
// as app.New built it: what Serve serves, and what the tests that build
// the daemon the way Serve does call.
func ForDaemon(a *app.App) http.Handler { return New(optionsFor(a)) }

// optionsFor are the Options of the daemon a's handler.
func optionsFor(a *app.App) Options {
	return Options{
		Config: a.Config, Auth: a.Auth, Audit: a.Audit, TOTP: a.TOTP, SSHKeys: a.SSHKeys, Log: a.Log, Now: a.Now,
		SSO:      &sso.Service{Store: a.Store, Sealer: a.Sealer, Now: a.Now},
		Machines: a.Machines, Revtunnel: a.Revtunnel, Reach: a.Reach,
		Setup: a.Setup, Net: a.Net, Hub: a.Hub,
		Banner: a.Banner, Firewall: a.Firewall,
		Health:     a.Healthz,
		Units:      a.Units,
		UI:         webui.Handler(tunnelsvc.UI()),
		Scripts:    Scripts{Bootstrap: tunnelsvc.BootstrapScript(), Uninstall: tunnelsvc.UninstallScript()},
		Agents:     a.Agents,
		Prober:     a.Prober,
		Gate:       a.Gate,
		Monitoring: Monitoring{Metrics: a.Metrics, Tokens: a.Tokens, Traffic: a.Traffic, Notify: a.Notifier},
		Fleet:      a.Fleet,
		Rollouts:   a.Rollouts,
		SpeedTests: a.SpeedTests,
		Edges:      a.Edges,
		Life:       a.Life(),
	}
}
