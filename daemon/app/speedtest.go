package app

import (
	"context"
	"fmt"

	"github.com/tunnelsvc/tunnelsvc/daemon/speedtest"
)

// speedTestService builds the speed tests, which run through this edge's
// tunnel server to the machine's agent (agentServices comes first).
func (a *App) speedTestService() {
	a.SpeedTests = &speedtest.Service{Store: a.Store, Agents: a.Agents, Edge: a.Config.EdgeName,
		Host: a.speedTestHost, Log: a.Log, Now: a.Now, Life: a.life}
}

// speedTestHost is where machine id's tunnel client dials this edge: the
// path MTU is read toward it. On one edge of several, this edge's address;
// alone, where the machine's config dials (machines.Service.Dial).
func (a *App) speedTestHost(ctx context.Context, id int64) (string, error) {
	if a.Machines.ClusterEdges != nil {
		es, err := a.Machines.ClusterEdges(ctx)
		if err != nil {
			return "", err
		}
		if len(es) > 1 {
			for _, e := range es {
				if e.Name == a.Config.EdgeName && e.Host != "" {
					return e.Host, nil
				}
			}
			return "", fmt.Errorf("this edge (%s) has not said where machines reach it", a.Config.EdgeName)
		}
	}
	m, err := a.Store.GetMachine(ctx, id)
	if err != nil {
		return "", err
	}
	t, err := a.Machines.Dial(ctx, m, "")
	if err != nil {
		return "", err
	}
	return t.Host, nil
}
