package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// copyTables is every table of the schema but schema_migrations (each
// database keeps its own), parents before the tables whose foreign keys
// point at them. TestCopyTablesAreTheSchema keeps it complete.
var copyTables = []string{
	"settings", "sessions", "audit_log",
	"totp_devices", "totp_enrollment", "backup_codes", "login_pending",
	"ssh_keys", "bootstrap_tokens", "machines", "ports", "tunnels", "tunnel_probes", "tunnel_targets", "tunnel_domains",
	"tunnel_bypass_tokens",
	"stale_token_attempts", "activity_events", "traffic_samples", "traffic_totals",
	"edges", "edge_tokens", "machine_edges", "leases", "gate_tokens", "auth_failures",
	"api_tokens", "passkeys", "webauthn_ceremonies", "oidc_flows", "host_parts",
	"rollouts", "speedtests",
}

// identityTables are the tables whose id the database hands out.
var identityTables = map[string]bool{
	"audit_log": true, "backup_codes": true, "bootstrap_tokens": true, "machines": true,
	"tunnels": true, "tunnel_targets": true, "stale_token_attempts": true, "activity_events": true,
	"edges": true, "edge_tokens": true, "auth_failures": true, "api_tokens": true,
	"rollouts": true, "tunnel_bypass_tokens": true, "speedtests": true,
}

// TableCopy is what Copy moved of one table and what both sides hold
// after: Rows rows whose content hashes to Hash on both.
type TableCopy struct {
	Table string `json:"table"`
	Rows  int64  `json:"rows"`
	Hash  string `json:"sha256"`
}

// CopyReport lists every table Copy moved, in the order it did.
type CopyReport struct {
	From   string      `json:"from"` // "sqlite" or "postgres"
	To     string      `json:"to"`
	Tables []TableCopy `json:"tables"`
}

// copyBatch is how many rows one INSERT carries.
const copyBatch = 200

// Copy copies every row of every table from one database to another,
// which must be empty (migrated, with no row in any table), in one
// transaction on the target: ids are kept, and PostgreSQL's id sequences
// continue after the highest one copied. Then it reads both back and
// checks that each table has the same number of rows and the same content
// hash (SHA-256 over the rows, encoded alike on both engines). Sealed
// secrets are copied as they are: the sealing key stays out of the
// database. The source must not be written meanwhile (stop the daemon).
func Copy(ctx context.Context, from, to *Store) (CopyReport, error) {
	rep := CopyReport{From: from.Engine(), To: to.Engine()}
	for _, table := range copyTables {
		var n int64
		if err := to.queryRow(ctx, "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
			return rep, fmt.Errorf("count %s in the target: %w", table, err)
		}
		if n > 0 {
			return rep, fmt.Errorf("the target database is not empty: table %s has %d rows", table, n)
		}
	}
	err := to.Tx(ctx, func(tx *Tx) error {
		for _, table := range copyTables {
			if err := copyTable(ctx, from, tx, table); err != nil {
				return fmt.Errorf("copy %s: %w", table, err)
			}
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	for _, table := range copyTables {
		a, err := tableHash(ctx, from, table)
		if err != nil {
			return rep, fmt.Errorf("read back %s from the source: %w", table, err)
		}
		b, err := tableHash(ctx, to, table)
		if err != nil {
			return rep, fmt.Errorf("read back %s from the target: %w", table, err)
		}
		if a != b {
			return rep, fmt.Errorf("table %s differs after the copy: %d rows (sha256 %s) in the source, %d rows (sha256 %s) in the target",
				table, a.Rows, a.Hash, b.Rows, b.Hash)
		}
		rep.Tables = append(rep.Tables, a)
	}
	return rep, nil
}

func copyTable(ctx context.Context, from *Store, tx *Tx, table string) error {
	rows, err := from.query(ctx, "SELECT * FROM "+table)
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	row := "(?" + strings.Repeat(", ?", len(cols)-1) + ")"
	insert := "INSERT INTO " + table + "(" + strings.Join(cols, ", ") + ") VALUES "
	var args []any
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		_, err := tx.exec(ctx, insert+row+strings.Repeat(", "+row, n-1), args...)
		args, n = args[:0], 0
		return err
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		for _, v := range vals {
			if b, ok := v.([]byte); ok {
				v = string(b)
			}
			args = append(args, v)
		}
		if n++; n == copyBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := flush(); err != nil {
		return err
	}
	if tx.s.pg && identityTables[table] {
		// The next id handed out follows the highest copied (SQLite's
		// AUTOINCREMENT counter follows explicit ids by itself).
		_, err := tx.exec(ctx, "SELECT setval(pg_get_serial_sequence('"+table+"', 'id'), MAX(id)) FROM "+table+" HAVING COUNT(*) > 0")
		return err
	}
	return nil
}

// tableHash counts a table's rows and hashes its content: each row's
// columns, in the order of their names, encoded by kind (null, integer,
// text) with lengths, the rows sorted so that neither engine's order nor
// its collation matters.
func tableHash(ctx context.Context, s *Store, table string) (TableCopy, error) {
	out := TableCopy{Table: table}
	rows, err := s.query(ctx, "SELECT * FROM "+table)
	if err != nil {
		return out, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return out, err
	}
	order := make([]int, len(cols))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return cols[order[a]] < cols[order[b]] })
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var encoded []string
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return out, err
		}
		var b strings.Builder
		for _, i := range order {
			b.WriteString(cols[i])
			b.WriteByte('=')
			if err := encodeValue(&b, vals[i]); err != nil {
				return out, fmt.Errorf("column %s: %w", cols[i], err)
			}
		}
		encoded = append(encoded, b.String())
	}
	if err := rows.Err(); err != nil {
		return out, err
	}
	sort.Strings(encoded)
	h := sha256.New()
	for _, e := range encoded {
		h.Write([]byte(e))
		h.Write([]byte{'\n'})
	}
	out.Rows, out.Hash = int64(len(encoded)), hex.EncodeToString(h.Sum(nil))
	return out, nil
}

func encodeValue(b *strings.Builder, v any) error {
	switch v := v.(type) {
	case nil:
		b.WriteString("n;")
	case int64:
		b.WriteString("i" + strconv.FormatInt(v, 10) + ";")
	case int32:
		b.WriteString("i" + strconv.FormatInt(int64(v), 10) + ";")
	case bool:
		if v {
			b.WriteString("i1;")
		} else {
			b.WriteString("i0;")
		}
	case string:
		b.WriteString("s" + strconv.Itoa(len(v)) + ":" + v + ";")
	case []byte:
		b.WriteString("s" + strconv.Itoa(len(v)) + ":" + string(v) + ";")
	default:
		return fmt.Errorf("a value of type %T", v)
	}
	return nil
}
