// Package revtunnel drives the tunnel engine, frp, on the VPS: it checks
// configs with the real frps/frpc, deploys the server's config, and answers
// frps's server-plugin calls that decide, per machine, who may log in and
// which ports it may bind.
package revtunnel
