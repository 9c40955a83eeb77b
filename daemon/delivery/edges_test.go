package delivery_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/delivery"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// edgeConfigs renders a client per edge besides the home edge.
type edgeConfigs struct {
	*configs
	mu    sync.Mutex
	edges []string
}

func (c *edgeConfigs) setEdges(e ...string) {
	c.mu.Lock()
	c.edges = e
	c.mu.Unlock()
}

func (c *edgeConfigs) DesiredEdges(ctx context.Context, m store.Machine) ([]agent.EdgeClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []agent.EdgeClient
	for _, e := range c.edges {
		out = append(out, agent.EdgeClient{Edge: e, Config: fmt.Sprintf("serverAddr = '%s.example.com'\n", e)})
	}
	return out, nil
}

// edgeAgents take sets, but for the machines whose agent runs one client.
type edgeAgents struct {
	*agents
	mu   sync.Mutex
	one  map[int64]bool
	sets map[int64][]agent.ClientSet
}

func (a *edgeAgents) PutClients(_ context.Context, id int64, set agent.ClientSet) (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.one[id] {
		return 0, agentclient.ErrOneClient
	}
	for _, c := range append([]string{set.Primary}, func() (s []string) {
		for _, e := range set.Edges {
			s = append(s, e.Config)
		}
		return
	}()...) {
		if g, ok := agent.Generation([]byte(c)); !ok || g != set.Generation {
			return 0, fmt.Errorf("a config of the set lacks generation %d:\n%s", set.Generation, c)
		}
	}
	a.sets[id] = append(a.sets[id], set)
	return set.Generation, nil
}

func (a *edgeAgents) last(id int64) (agent.ClientSet, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := len(a.sets[id])
	if n == 0 {
		return agent.ClientSet{}, 0
	}
	return a.sets[id][n-1], n
}

func names(set agent.ClientSet) string {
	var out []string
	for _, e := range set.Edges {
		out = append(out, e.Edge)
	}
	return strings.Join(out, ",")
}

// TestEdgesDelivered: a new edge in the cluster is a new generation whose
// set gives every machine a client for it; a retired edge is dropped from
// the set (an agent that takes sets gets one with no other edge, which
// removes the client); an agent that runs one client gets the main config
// and the machine says, in words, that the other edges do not reach it.
func TestEdgesDelivered(t *testing.T) {
	var cfg *edgeConfigs
	var ag *edgeAgents
	r := newRigWith(t, "a.example.com", func(c *configs, a *agents) (delivery.Configs, delivery.Agents) {
		cfg = &edgeConfigs{configs: c}
		ag = &edgeAgents{agents: a, one: map[int64]bool{}, sets: map[int64][]agent.ClientSet{}}
		return cfg, ag
	})
	st, rec, clk := r.st, r.rec, r.clk
	nas, old := r.machine("nas"), r.machine("old")
	ag.mu.Lock()
	ag.one[old.ID] = true
	ag.mu.Unlock()

	cfg.setEdges("b")
	rec.Changed(store.TopicEdges)
	testutil.Eventually(t, 10*time.Second, "nas gets a set with edge b", func() error {
		if set, _ := ag.last(nas.ID); names(set) != "b" || !strings.Contains(set.Edges[0].Config, "b.example.com") {
			return fmt.Errorf("last set %+v", set)
		}
		return inStep(st, nas.ID)
	})
	testutil.Eventually(t, 10*time.Second, "old gets its main config, and says why b does not reach it", func() error {
		m, err := st.GetMachine(context.Background(), old.ID)
		if err != nil {
			return err
		}
		if m.ConfigPush == nil || !strings.Contains(m.ConfigPush.Message, "its agent runs one tunnel client, so it is not reachable through the other 1 edge(s); update the machine") {
			return fmt.Errorf("push %+v", m.ConfigPush)
		}
		return inStep(st, old.ID)
	})
	if got, _, _ := ag.state(old.ID); len(got) == 0 || !strings.Contains(got[len(got)-1], "serverAddr = 'a.example.com'") {
		t.Fatalf("old's main config: %q", got)
	}

	// The agent said it takes sets; b is retired: a set with no edge.
	if err := st.SetAgentReport(context.Background(), nas.ID, store.AgentReport{Capabilities: []string{"update", agent.ClientsCapability}, At: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	_, before := ag.last(nas.ID)
	cfg.setEdges()
	rec.Changed(store.TopicEdges)
	testutil.Eventually(t, 10*time.Second, "nas gets a set without b", func() error {
		set, n := ag.last(nas.ID)
		if n == before || names(set) != "" || set.Primary == "" {
			return fmt.Errorf("%d sets, last %+v", n, set)
		}
		return inStep(st, nas.ID)
	})
}

func inStep(st *store.Store, id int64) error {
	m, err := st.GetMachine(context.Background(), id)
	if err != nil {
		return err
	}
	if !m.Config.InStep() {
		return fmt.Errorf("desired %d, applied %d", m.Config.DesiredGen, m.Config.AppliedGen)
	}
	return nil
}
