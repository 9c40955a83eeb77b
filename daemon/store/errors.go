package store

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/mattn/go-sqlite3"
)

// Constraint errors are told apart by the driver's error code, and which
// constraint failed by its name: PostgreSQL's error carries it; SQLite's
// names only the columns, which sqliteConstraints maps to the name the
// same constraint has on PostgreSQL (migrations_pg).

// The constraints the store's callers need to tell apart.
const (
	constraintMachineName = "machines_name_unique"
	constraintSubdomain   = "tunnels_subdomain_key"
	constraintTunnelName  = "tunnels_machine_id_name_key"
	constraintPort        = "ports_pkey"
)

// sqliteConstraints maps the columns SQLite names in a unique violation to
// the constraint's name.
var sqliteConstraints = map[string]string{
	"machines.name":                    constraintMachineName,
	"tunnels.subdomain":                constraintSubdomain,
	"tunnels.machine_id, tunnels.name": constraintTunnelName,
	"ports.port":                       constraintPort,
}

// PostgreSQL's SQLSTATEs the store acts on.
const (
	pgUniqueViolation      = "23505"
	pgSerializationFailure = "40001"
	pgDeadlockDetected     = "40P01"
)

// uniqueViolation reports whether err is a unique or primary-key violation
// and, when known, the constraint's name.
func uniqueViolation(err error) (constraint string, ok bool) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.ConstraintName, pe.Code == pgUniqueViolation
	}
	var se sqlite3.Error
	if errors.As(err, &se) {
		if se.ExtendedCode != sqlite3.ErrConstraintUnique && se.ExtendedCode != sqlite3.ErrConstraintPrimaryKey {
			return "", false
		}
		// "UNIQUE constraint failed: tunnels.machine_id, tunnels.name"
		_, cols, _ := strings.Cut(se.Error(), ": ")
		return sqliteConstraints[cols], true
	}
	return "", false
}

func isUniqueViolation(err error) bool {
	_, ok := uniqueViolation(err)
	return ok
}

// retryable reports whether a transaction failed only for losing a
// conflict with a concurrent one, so running it again may succeed.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == pgSerializationFailure || pe.Code == pgDeadlockDetected)
}
