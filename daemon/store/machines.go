package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// ErrTokenInvalid means a bootstrap token is unknown, used, revoked or expired.
var ErrTokenInvalid = errors.New("invalid or expired token")

// ErrNoFreePort means every port of the configured range is taken.
var ErrNoFreePort = errors.New("no free port left in the tunnel port range")

// ErrNameTaken is a machine name that another machine already has.
var ErrNameTaken = errors.New("machine name already in use")

// ErrConflict is a uniqueness violation the caller can name (a duplicate
// tunnel name or subdomain).
var ErrConflict = errors.New("conflict")

// PortRange is the inclusive range remote ports are allocated from.
type PortRange struct{ Lo, Hi int }

// BootstrapToken is a pending token as listed (the secret is never stored).
type BootstrapToken struct {
	ID        int64     `json:"id"`
	Label     string    `json:"label"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// TokenState is one token, pending or not, as a join is followed.
type TokenState struct {
	BootstrapToken
	State     string `json:"state"` // pending, used, expired
	MachineID *int64 `json:"machine_id"`
}

// InsertBootstrapToken stores a token's hash.
func (s *Store) InsertBootstrapToken(ctx context.Context, hash, label string, created, expires time.Time) (int64, error) {
	id, err := s.insertID(ctx,
		"INSERT INTO bootstrap_tokens(token_hash, label, created_at, expires_at) VALUES (?, ?, ?, ?)",
		hash, label, created.UnixMilli(), expires.UnixMilli())
	if err != nil {
		return 0, err
	}
	s.changed(TopicTokens)
	return id, nil
}

// GetBootstrapToken returns one token (revoked ones are gone: ErrNotFound).
func (s *Store) GetBootstrapToken(ctx context.Context, id int64, now time.Time) (TokenState, error) {
	var t TokenState
	var c, e int64
	var used, machine sql.NullInt64
	err := s.queryRow(ctx, "SELECT id, label, created_at, expires_at, used_at, machine_id FROM bootstrap_tokens WHERE id = ?", id).
		Scan(&t.ID, &t.Label, &c, &e, &used, &machine)
	if errors.Is(err, sql.ErrNoRows) {
		return t, ErrNotFound
	}
	if err != nil {
		return t, err
	}
	t.CreatedAt, t.ExpiresAt = time.UnixMilli(c).UTC(), time.UnixMilli(e).UTC()
	switch {
	case used.Valid:
		t.State = "used"
	case e <= now.UnixMilli():
		t.State = "expired"
	default:
		t.State = "pending"
	}
	if machine.Valid {
		t.MachineID = &machine.Int64
	}
	return t, nil
}

// ListPendingBootstrapTokens returns unused, unexpired tokens, newest first.
func (s *Store) ListPendingBootstrapTokens(ctx context.Context, now time.Time) ([]BootstrapToken, error) {
	rows, err := s.query(ctx,
		"SELECT id, label, created_at, expires_at FROM bootstrap_tokens WHERE used_at IS NULL AND expires_at > ? ORDER BY created_at DESC, id DESC",
		now.UnixMilli())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []BootstrapToken{}
	for rows.Next() {
		var t BootstrapToken
		var c, e int64
		if err := rows.Scan(&t.ID, &t.Label, &c, &e); err != nil {
			return nil, err
		}
		t.CreatedAt, t.ExpiresAt = time.UnixMilli(c).UTC(), time.UnixMilli(e).UTC()
		out = append(out, t)
	}
	return out, rows.Err()
}

// DeleteBootstrapToken revokes a pending token; ErrNotFound when there is none.
func (s *Store) DeleteBootstrapToken(ctx context.Context, id int64) error {
	res, err := s.exec(ctx, "DELETE FROM bootstrap_tokens WHERE id = ? AND used_at IS NULL", id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	s.changed(TopicTokens)
	return nil
}

// Machine is a registered machine.
type Machine struct {
	ID             int64
	Name           string
	Username       string
	Status         string
	CreatedAt      time.Time
	LastSeen       time.Time // zero when never seen
	ClientAddr     string
	SecretHash     string
	SecretSealed   string
	AgentTokenHash string
	TunnelPort     int
	AgentPort      int
	AgentLocalPort int
	SSHLocalPort   int
	// ConfigPush is the last delivery of the client config to the agent;
	// nil when none was attempted.
	ConfigPush *ConfigPush
	// SSHKeyID is the VPS key the machine was given ("" when unknown).
	SSHKeyID string
	// AgentOutdated: the machine's agent, when last reached, predated
	// signed requests.
	AgentOutdated bool
	// Config is the machine's desired and applied client-config generation.
	Config ConfigState
	// Report is what the machine's agent last said about its bundle.
	Report AgentReport
	// Update is the machine's last update.
	Update UpdateState
	// HomeEdge is the edge the machine joined through ("" when unknown):
	// its main tunnel client dials that edge.
	HomeEdge string
	// Transport is how the daemon renders the machine's tunnel client to
	// reach the tunnel server: "tcp" (its port) or "wss" (the web proxy on
	// 443). TransportSeen is how the machine last logged in ("" before its
	// first login) and TransportAddr the address it came from then.
	Transport, TransportSeen, TransportAddr string
}

// AgentReport is what a machine's agent reported about the software it
// runs; At is zero when it never reported.
type AgentReport struct {
	AgentVersion, ClientVersion, BundleVersion, Arch string
	Capabilities                                     []string
	At                                               time.Time
}

// Can says whether the agent reported capability c.
func (r AgentReport) Can(c string) bool {
	for _, have := range r.Capabilities {
		if have == c {
			return true
		}
	}
	return false
}

// UpdateState is a machine's last update ("" State: none ran).
type UpdateState struct {
	State, Target, Error string
	At                   time.Time
}

// ConfigState is a machine's desired and applied client-config generation.
type ConfigState struct {
	// DesiredGen rises with every change of the config the daemon renders
	// for the machine; DesiredHash is that config's digest ("" before the
	// first reconcile).
	DesiredGen  int64
	DesiredHash string
	// AppliedGen is the generation the machine's agent reported applied.
	AppliedGen int64
	// PendingSince is when the machine fell behind (zero while in step).
	PendingSince time.Time
	// AppliedServer is the tunnel-server address of the applied config.
	AppliedServer string
}

// InStep reports whether the machine runs the config the daemon wants.
func (c ConfigState) InStep() bool { return c.DesiredHash != "" && c.AppliedGen >= c.DesiredGen }

// ConfigPush is the outcome of one client-config delivery.
type ConfigPush struct {
	OK      bool      `json:"ok"`
	Message string    `json:"message"`
	At      time.Time `json:"at"`
}

// NewMachine is what registration stores besides the ports it allocates.
type NewMachine struct {
	Name, Username, ClientAddr   string
	SecretHash, AgentTokenHash   string
	AgentLocalPort, SSHLocalPort int
	SSHKeyID                     string
	// HomeEdge is the edge the machine joins through ("" with one edge).
	HomeEdge     string
	Seal         func(id int64) (string, error) // seals the secret bound to the new id
	Now          time.Time
	TokenHash    string
	Ports        PortRange
	ConsumeToken bool
	// Config, when set, renders the config the machine installs with its
	// registration, from the new machine (its id and ports): its digest
	// and the tunnel server it names are recorded as generation 1, already
	// applied, in the same transaction, so that config delivery never sees
	// the machine without a generation and pushes it a config it has.
	Config func(m Machine) (digest, server string, err error)
}

// RegisterMachine claims the bootstrap token (when ConsumeToken), creates
// the machine and allocates its SSH tunnel port and agent port, all in one
// transaction. ErrTokenInvalid when the token cannot be claimed.
func (s *Store) RegisterMachine(ctx context.Context, n NewMachine) (Machine, error) {
	var m Machine
	err := s.Tx(ctx, func(tx *Tx) error {
		if n.ConsumeToken {
			res, err := tx.exec(ctx,
				"UPDATE bootstrap_tokens SET used_at = ? WHERE token_hash = ? AND used_at IS NULL AND expires_at > ?",
				n.Now.UnixMilli(), n.TokenHash, n.Now.UnixMilli())
			if err != nil {
				return err
			}
			if k, err := res.RowsAffected(); err != nil {
				return err
			} else if k != 1 {
				return ErrTokenInvalid
			}
		}
		id, err := tx.insertID(ctx, `INSERT INTO machines(name, username, created_at, client_addr, secret_hash, secret_sealed,
			agent_token_hash, tunnel_port, agent_port, agent_local_port, ssh_local_port, ssh_key_id, home_edge)
			VALUES (?, ?, ?, ?, ?, '', ?, 0, 0, ?, ?, NULLIF(?, ''), ?)`,
			n.Name, n.Username, n.Now.UnixMilli(), n.ClientAddr, n.SecretHash, n.AgentTokenHash, n.AgentLocalPort, n.SSHLocalPort, n.SSHKeyID,
			n.HomeEdge)
		if err != nil {
			return machineConflict(err)
		}
		sealed, err := n.Seal(id)
		if err != nil {
			return err
		}
		sshPort, err := allocatePort(ctx, tx, n.Ports, id, "ssh")
		if err != nil {
			return err
		}
		agentPort, err := allocatePort(ctx, tx, n.Ports, id, "agent")
		if err != nil {
			return err
		}
		if _, err := tx.exec(ctx, "UPDATE machines SET secret_sealed = ?, tunnel_port = ?, agent_port = ? WHERE id = ?",
			sealed, sshPort, agentPort, id); err != nil {
			return err
		}
		if n.ConsumeToken {
			if _, err := tx.exec(ctx, "UPDATE bootstrap_tokens SET machine_id = ? WHERE token_hash = ?", id, n.TokenHash); err != nil {
				return err
			}
		}
		if n.Config != nil {
			m, err = scanMachine(tx.queryRow(ctx, machineSelect+" WHERE id = ?", id))
			if err != nil {
				return err
			}
			digest, server, err := n.Config(m)
			if err != nil {
				return err
			}
			if _, err := tx.exec(ctx, `UPDATE machines SET config_desired_gen = 1, config_desired_hash = ?, config_applied_gen = 1,
				config_pending_since = NULL, config_applied_server = ? WHERE id = ?`, digest, server, id); err != nil {
				return err
			}
		}
		m, err = scanMachine(tx.queryRow(ctx, machineSelect+" WHERE id = ?", id))
		return err
	})
	if err == nil {
		s.changed(TopicMachines, TopicTokens)
	}
	return m, err
}

// machineConflict names a taken machine name.
func machineConflict(err error) error {
	if c, ok := uniqueViolation(err); ok && c == constraintMachineName {
		return ErrNameTaken
	}
	return err
}

// randomPortTries is how many random ports allocatePort tries before it
// reads the ports in use.
const randomPortTries = 4

// allocatePort takes a free port of r for machineID. It first tries a few
// random ports of the range: in a range mostly free the first try takes
// one, so the 10,000th machine's ports cost what the first one's did
// (reading every port in use for each made a fleet's joins grow with the
// square of its size). When those are taken, it reads the ports in use,
// starts at a random offset and inserts the first free one. The primary
// key of ports is what makes a duplicate impossible. The insert does
// nothing on a conflict instead of failing, since PostgreSQL gives up a
// transaction at its first error; no row back makes it try again.
func allocatePort(ctx context.Context, tx *Tx, r PortRange, machineID int64, purpose string) (int, error) {
	size := r.Hi - r.Lo + 1
	if size <= 0 {
		return 0, fmt.Errorf("empty port range %d-%d", r.Lo, r.Hi)
	}
	for try := 0; try < randomPortTries; try++ {
		got, err := claimPort(ctx, tx, r.Lo+rand.IntN(size), machineID, purpose)
		if !errors.Is(err, sql.ErrNoRows) {
			return got, err
		}
	}
	for attempt := 0; attempt < 5; attempt++ {
		used := make(map[int]bool)
		rows, err := tx.query(ctx, "SELECT port FROM ports WHERE port BETWEEN ? AND ?", r.Lo, r.Hi)
		if err != nil {
			return 0, err
		}
		for rows.Next() {
			var p int
			if err := rows.Scan(&p); err != nil {
				rows.Close()
				return 0, err
			}
			used[p] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, err
		}
		if len(used) >= size {
			return 0, ErrNoFreePort
		}
		start := rand.IntN(size)
		port := 0
		for i := 0; i < size; i++ {
			p := r.Lo + (start+i)%size
			if !used[p] {
				port = p
				break
			}
		}
		got, err := claimPort(ctx, tx, port, machineID, purpose)
		if err == nil {
			return got, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return 0, err
		}
	}
	return 0, errors.New("port allocation kept conflicting")
}

// claimPort takes port for machineID; sql.ErrNoRows when it is taken.
func claimPort(ctx context.Context, tx *Tx, port int, machineID int64, purpose string) (int, error) {
	var got int
	err := tx.queryRow(ctx, "INSERT INTO ports(port, machine_id, purpose) VALUES (?, ?, ?) ON CONFLICT(port) DO NOTHING RETURNING port",
		port, machineID, purpose).Scan(&got)
	return got, err
}

const machineSelect = `SELECT id, name, username, status, created_at, last_seen, client_addr, secret_hash, secret_sealed,
	agent_token_hash, tunnel_port, agent_port, agent_local_port, ssh_local_port,
	config_push_ok, config_push_message, config_push_at, COALESCE(ssh_key_id, ''), agent_outdated,
	config_desired_gen, config_desired_hash, config_applied_gen, config_pending_since, config_applied_server,
	agent_version, client_version, bundle_version, arch, agent_capabilities, versions_at,
	update_state, update_target, update_error, update_at, home_edge, transport, transport_seen, transport_addr FROM machines`

type rowScanner interface{ Scan(...any) error }

func scanMachine(r rowScanner) (Machine, error) {
	var m Machine
	var created int64
	var seen, pushOK, pushAt, pendingSince, reportAt, updateAt sql.NullInt64
	var pushMsg, caps string
	err := r.Scan(&m.ID, &m.Name, &m.Username, &m.Status, &created, &seen, &m.ClientAddr, &m.SecretHash, &m.SecretSealed,
		&m.AgentTokenHash, &m.TunnelPort, &m.AgentPort, &m.AgentLocalPort, &m.SSHLocalPort,
		&pushOK, &pushMsg, &pushAt, &m.SSHKeyID, &m.AgentOutdated,
		&m.Config.DesiredGen, &m.Config.DesiredHash, &m.Config.AppliedGen, &pendingSince, &m.Config.AppliedServer,
		&m.Report.AgentVersion, &m.Report.ClientVersion, &m.Report.BundleVersion, &m.Report.Arch, &caps, &reportAt,
		&m.Update.State, &m.Update.Target, &m.Update.Error, &updateAt, &m.HomeEdge,
		&m.Transport, &m.TransportSeen, &m.TransportAddr)
	if errors.Is(err, sql.ErrNoRows) {
		return m, ErrNotFound
	}
	m.Report.Capabilities = strings.Fields(caps)
	if reportAt.Valid {
		m.Report.At = time.UnixMilli(reportAt.Int64).UTC()
	}
	if updateAt.Valid {
		m.Update.At = time.UnixMilli(updateAt.Int64).UTC()
	}
	if pendingSince.Valid {
		m.Config.PendingSince = time.UnixMilli(pendingSince.Int64).UTC()
	}
	if pushOK.Valid {
		m.ConfigPush = &ConfigPush{OK: pushOK.Int64 == 1, Message: pushMsg, At: time.UnixMilli(pushAt.Int64).UTC()}
	}
	m.CreatedAt = time.UnixMilli(created).UTC()
	if seen.Valid {
		m.LastSeen = time.UnixMilli(seen.Int64).UTC()
	}
	return m, err
}

// GetMachine returns one machine or ErrNotFound.
func (s *Store) GetMachine(ctx context.Context, id int64) (Machine, error) {
	return scanMachine(s.queryRow(ctx, machineSelect+" WHERE id = ?", id))
}

// MachineBySecretHash finds the machine whose frp secret hashes to h.
func (s *Store) MachineBySecretHash(ctx context.Context, h string) (Machine, error) {
	return scanMachine(s.queryRow(ctx, machineSelect+" WHERE secret_hash = ?", h))
}

// MachineByAgentTokenHash finds the machine whose agent token hashes to h.
func (s *Store) MachineByAgentTokenHash(ctx context.Context, h string) (Machine, error) {
	return scanMachine(s.queryRow(ctx, machineSelect+" WHERE agent_token_hash = ?", h))
}

// ListMachines returns every machine, oldest first.
//
// The dashboard lists the machines on every refresh and several monitors
// do on every round; the list read is kept until the next commit (see
// Snapshot), and each caller gets its own copy.
func (s *Store) ListMachines(ctx context.Context) ([]Machine, error) {
	ms, err := s.machines.Get(s, func() ([]Machine, error) { return s.listMachines(ctx) })
	if err != nil {
		return nil, err
	}
	out := make([]Machine, len(ms))
	for i, m := range ms {
		if m.ConfigPush != nil {
			p := *m.ConfigPush
			m.ConfigPush = &p
		}
		m.Report.Capabilities = append([]string(nil), m.Report.Capabilities...)
		out[i] = m
	}
	return out, nil
}

func (s *Store) listMachines(ctx context.Context) ([]Machine, error) {
	rows, err := s.query(ctx, machineSelect+" ORDER BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Machine{}
	for rows.Next() {
		m, err := scanMachine(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// RenameMachine sets a machine's name; ErrNotFound when it does not exist.
func (s *Store) RenameMachine(ctx context.Context, id int64, name string) error {
	res, err := s.exec(ctx, "UPDATE machines SET name = ? WHERE id = ?", name, id)
	if err != nil {
		return machineConflict(err)
	}
	return s.announce(affectOne(res, nil), TopicMachines)
}

// SetMachineStatus records a status and, when seen is not zero, last_seen.
func (s *Store) SetMachineStatus(ctx context.Context, id int64, status string, seen time.Time) error {
	return s.announce(affectOne(s.exec(ctx, "UPDATE machines SET status = ?, last_seen = COALESCE(?, last_seen) WHERE id = ?",
		status, nullTime(seen), id)), TopicMachines)
}

// SettleMachineStatus is SetMachineStatus for what the tunnel server
// reports, made only while nothing newer says otherwise: the machine must
// not have been written (a status, a Ping) since quiet, when the report
// was asked for (less a grace), and must not be pending (never connected)
// when it is to go offline. changed says whether it was.
func (s *Store) SettleMachineStatus(ctx context.Context, id int64, status string, now, quiet time.Time) (changed bool, err error) {
	q := "UPDATE machines SET status = ?, last_seen = ? WHERE id = ? AND status <> ? AND COALESCE(last_seen, 0) < ?"
	if status != "online" {
		q += " AND status <> 'pending'"
	}
	res, err := s.exec(ctx, q, status, now.UnixMilli(), id, status, quiet.UnixMilli())
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return false, err
	}
	return true, s.announce(nil, TopicMachines)
}

// SetMachineTransport sets how machine id's tunnel client is rendered to
// reach the tunnel server ("tcp" or "wss"); ErrNotFound when it does not
// exist.
func (s *Store) SetMachineTransport(ctx context.Context, id int64, transport string) error {
	return s.announce(affectOne(s.exec(ctx, "UPDATE machines SET transport = ? WHERE id = ?", transport, id)), TopicMachines)
}

// SetMachineTransportSeen records how machine id just logged in to the
// tunnel server and from where; nothing is written (or announced) when
// both are what is recorded.
func (s *Store) SetMachineTransportSeen(ctx context.Context, id int64, transport, addr string) error {
	res, err := s.exec(ctx, "UPDATE machines SET transport_seen = ?, transport_addr = ? WHERE id = ? AND (transport_seen <> ? OR transport_addr <> ?)",
		transport, addr, id, transport, addr)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	return s.announce(nil, TopicMachines)
}

// TouchMachines records when each machine of seen was last seen, and on
// edge (0: none) too, in one transaction: one commit for a whole fleet's
// Pings. A machine deleted meanwhile is passed over.
func (s *Store) TouchMachines(ctx context.Context, seen map[int64]time.Time, edge int64) error {
	err := s.Tx(ctx, func(tx *Tx) error {
		for id, at := range seen {
			if _, err := tx.exec(ctx, "UPDATE machines SET last_seen = ? WHERE id = ?", at.UnixMilli(), id); err != nil {
				return err
			}
			if edge == 0 {
				continue
			}
			if _, err := tx.exec(ctx, "UPDATE machine_edges SET last_seen = ? WHERE machine_id = ? AND edge_id = ?", at.UnixMilli(), id, edge); err != nil {
				return err
			}
		}
		return nil
	})
	return s.announce(err, TopicMachines)
}

// SetConfigPush records the outcome of delivering the client config to the
// machine's agent.
func (s *Store) SetConfigPush(ctx context.Context, id int64, p ConfigPush) error {
	return s.announce(affectOne(s.exec(ctx,
		"UPDATE machines SET config_push_ok = ?, config_push_message = ?, config_push_at = ? WHERE id = ?",
		p.OK, p.Message, p.At.UnixMilli(), id)), TopicMachines)
}

// SetDesiredConfig records hash as the digest of the config the daemon now
// renders for machine id. When it differs from the one recorded, the
// desired generation rises by one and the machine is pending from now (if
// it was not already). applied marks the new generation applied at once
// (the machine got this very config another way, at registration). It
// returns the machine's config state.
func (s *Store) SetDesiredConfig(ctx context.Context, id int64, hash string, applied bool, server string, now time.Time) (ConfigState, error) {
	var st ConfigState
	updated := false
	err := s.Tx(ctx, func(tx *Tx) error {
		var pending sql.NullInt64
		err := tx.queryRow(ctx, `SELECT config_desired_gen, config_desired_hash, config_applied_gen, config_pending_since, config_applied_server
			FROM machines WHERE id = ?`, id).Scan(&st.DesiredGen, &st.DesiredHash, &st.AppliedGen, &pending, &st.AppliedServer)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if pending.Valid {
			st.PendingSince = time.UnixMilli(pending.Int64).UTC()
		}
		if st.DesiredHash == hash {
			return nil
		}
		st.DesiredGen++
		st.DesiredHash = hash
		if applied {
			st.AppliedGen, st.AppliedServer, st.PendingSince = st.DesiredGen, server, time.Time{}
		} else if st.PendingSince.IsZero() {
			st.PendingSince = now.UTC()
		}
		_, err = tx.exec(ctx, `UPDATE machines SET config_desired_gen = ?, config_desired_hash = ?, config_applied_gen = ?,
			config_pending_since = ?, config_applied_server = ? WHERE id = ?`,
			st.DesiredGen, st.DesiredHash, st.AppliedGen, nullTime(st.PendingSince), st.AppliedServer, id)
		updated = err == nil
		return err
	})
	if err == nil && updated {
		s.changed(TopicMachines)
	}
	return st, err
}

// SetConfigApplied records that machine id's agent applied generation gen
// of its config, whose tunnel server address is server, at time at. The
// machine is in step again when gen is the desired generation.
func (s *Store) SetConfigApplied(ctx context.Context, id, gen int64, server string, at time.Time) error {
	return s.announce(affectOne(s.exec(ctx, `UPDATE machines SET config_applied_gen = ?, config_applied_server = ?,
		config_pending_since = CASE WHEN ? >= config_desired_gen THEN NULL ELSE config_pending_since END,
		config_push_ok = 1, config_push_message = '', config_push_at = ? WHERE id = ?`,
		gen, server, gen, at.UnixMilli(), id)), TopicMachines)
}

// Credential is a machine's new frp secret (hashed and sealed) and agent
// token hash, with where the machine asked for it from and the VPS key it
// was given ("" keeps the one recorded).
type Credential struct {
	SecretHash, SecretSealed, AgentTokenHash string
	ClientAddr, SSHKeyID                     string
}

// RotateCredential replaces machine id's credential when its agent token
// hash is still oldAgentTokenHash (ErrNotFound otherwise: another rejoin
// won), and forgets its config delivery state: the desired config is
// rendered again from the new secret and is pending until the machine's
// agent reports it applied. Its name, ports and tunnels stay.
func (s *Store) RotateCredential(ctx context.Context, id int64, oldAgentTokenHash string, c Credential) error {
	err := affectOne(s.exec(ctx, `UPDATE machines SET secret_hash = ?, secret_sealed = ?, agent_token_hash = ?,
		client_addr = COALESCE(NULLIF(?, ''), client_addr), ssh_key_id = COALESCE(NULLIF(?, ''), ssh_key_id),
		config_desired_hash = '', config_push_ok = NULL, config_push_message = '', config_push_at = NULL
		WHERE id = ? AND agent_token_hash = ?`,
		c.SecretHash, c.SecretSealed, c.AgentTokenHash, c.ClientAddr, c.SSHKeyID, id, oldAgentTokenHash))
	return s.announce(err, TopicMachines)
}

// SetAgentOutdated records whether the machine's agent predates signed
// requests.
func (s *Store) SetAgentOutdated(ctx context.Context, id int64, outdated bool) error {
	return s.announce(affectOne(s.exec(ctx, "UPDATE machines SET agent_outdated = ? WHERE id = ?", outdated, id)), TopicMachines)
}

// SetAgentReport records what the machine's agent reported about the
// software it runs.
func (s *Store) SetAgentReport(ctx context.Context, id int64, r AgentReport) error {
	return s.announce(affectOne(s.exec(ctx, `UPDATE machines SET agent_version = ?, client_version = ?, bundle_version = ?,
		arch = ?, agent_capabilities = ?, versions_at = ? WHERE id = ?`,
		r.AgentVersion, r.ClientVersion, r.BundleVersion, r.Arch, strings.Join(r.Capabilities, " "), r.At.UnixMilli(), id)), TopicMachines)
}

// SetUpdateState records the state of the machine's update.
func (s *Store) SetUpdateState(ctx context.Context, id int64, u UpdateState) error {
	return s.announce(affectOne(s.exec(ctx, "UPDATE machines SET update_state = ?, update_target = ?, update_error = ?, update_at = ? WHERE id = ?",
		u.State, u.Target, u.Error, nullTime(u.At), id)), TopicMachines)
}

// announce tells the change hook about topics when err is nil, and passes
// err on.
func (s *Store) announce(err error, topics ...string) error {
	if err == nil {
		s.changed(topics...)
	}
	return err
}

// DeleteMachine removes a machine, its tunnels and its ports at once.
func (s *Store) DeleteMachine(ctx context.Context, id int64) error {
	err := s.Tx(ctx, func(tx *Tx) error {
		// Its targets of other machines' tunnels, and its own tunnels'
		// targets on other machines, with their ports.
		if err := deleteTargets(ctx, tx, "machine_id = ? OR tunnel_id IN (SELECT id FROM tunnels WHERE machine_id = ?)", id, id); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, "DELETE FROM tunnels WHERE machine_id = ?", id); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, "DELETE FROM ports WHERE machine_id = ?", id); err != nil {
			return err
		}
		return affectOne(tx.exec(ctx, "DELETE FROM machines WHERE id = ?", id))
	})
	return s.announce(err, TopicMachines, TopicTunnels)
}

func affectOne(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// Stale-token attempt kinds.
const (
	StaleBootstrap        = "bootstrap"
	StaleTunnelCredential = "tunnel_credential"
)

// StaleTokenAttempt is a failed bootstrap or a refused tunnel credential.
// Listed, attempts from one address with one kind and reason are one row:
// CreatedAt is the latest, FirstSeen the earliest, Count how many.
type StaleTokenAttempt struct {
	ID         int64     `json:"id"`
	Kind       string    `json:"kind"`
	CreatedAt  time.Time `json:"created_at"`
	FirstSeen  time.Time `json:"first_seen"`
	ClientAddr string    `json:"client_addr"`
	Reason     string    `json:"reason"`
	Count      int       `json:"count"`
}

// InsertStaleTokenAttempt records one attempt (kind defaults to bootstrap).
func (s *Store) InsertStaleTokenAttempt(ctx context.Context, a StaleTokenAttempt) error {
	if a.Kind == "" {
		a.Kind = StaleBootstrap
	}
	_, err := s.exec(ctx, "INSERT INTO stale_token_attempts(created_at, client_addr, reason, kind) VALUES (?, ?, ?, ?)",
		a.CreatedAt.UnixMilli(), a.ClientAddr, a.Reason, a.Kind)
	if err == nil {
		// The Machines page lists failed joins: it hears of this one.
		s.changed(TopicTokens)
	}
	return err
}

// ListStaleTokenAttempts returns at most limit rows, grouped by kind,
// address and reason, the most recent first.
func (s *Store) ListStaleTokenAttempts(ctx context.Context, limit int) ([]StaleTokenAttempt, error) {
	rows, err := s.query(ctx, `SELECT MAX(id), kind, MAX(created_at), MIN(created_at), client_addr, reason, COUNT(*)
		FROM stale_token_attempts GROUP BY kind, client_addr, reason
		ORDER BY MAX(created_at) DESC, MAX(id) DESC LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []StaleTokenAttempt{}
	for rows.Next() {
		var a StaleTokenAttempt
		var last, first int64
		if err := rows.Scan(&a.ID, &a.Kind, &last, &first, &a.ClientAddr, &a.Reason, &a.Count); err != nil {
			return nil, err
		}
		a.CreatedAt, a.FirstSeen = time.UnixMilli(last).UTC(), time.UnixMilli(first).UTC()
		out = append(out, a)
	}
	return out, rows.Err()
}

// TokenFailureReason says why a bootstrap token with this hash could not be
// claimed: unknown, already used, or expired.
func (s *Store) TokenFailureReason(ctx context.Context, hash string, now time.Time) string {
	var used sql.NullInt64
	var expires int64
	err := s.queryRow(ctx, "SELECT used_at, expires_at FROM bootstrap_tokens WHERE token_hash = ?", hash).Scan(&used, &expires)
	switch {
	case err != nil:
		return "unknown token"
	case used.Valid:
		return "token already used"
	case expires <= now.UnixMilli():
		return "token expired"
	}
	return "token not claimable"
}
