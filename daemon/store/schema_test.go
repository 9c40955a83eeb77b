package store

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// TestMigrationDirsMatch: each SQLite migration has its PostgreSQL form,
// with the same version and name, and no other.
func TestMigrationDirsMatch(t *testing.T) {
	lite, err := loadMigrationsFrom("migrations")
	if err != nil {
		t.Fatal(err)
	}
	pg, err := loadMigrationsFrom("migrations_pg")
	if err != nil {
		t.Fatal(err)
	}
	names := func(ms []migration) string {
		var out []string
		for _, m := range ms {
			out = append(out, m.name)
		}
		return strings.Join(out, "\n")
	}
	if a, b := names(lite), names(pg); a != b {
		t.Fatalf("migrations/ and migrations_pg/ differ:\n%s", lineDiff(a, b))
	}
}

// TestSchemasMatch: both engines, migrated, describe the same schema:
// tables and views, columns (type class, nullability, default, identity),
// primary keys, unique constraints, indexes, foreign keys and the number
// of CHECK constraints.
func TestSchemasMatch(t *testing.T) {
	ctx := context.Background()
	lite, err := Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	pg, err := OpenDatabase(ctx, t.TempDir(), testutil.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	a, err := describeSchema(ctx, lite)
	if err != nil {
		t.Fatal(err)
	}
	b, err := describeSchema(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("the schemas differ (- SQLite, + PostgreSQL):\n%s", lineDiff(a, b))
	}
	if !strings.Contains(a, "index machines_name_unique unique (lower(name))") {
		t.Fatalf("the description misses what it should hold:\n%s", a)
	}
}

// lineDiff lists the lines only a has (-) and only b has (+).
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ina, inb := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !inb[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ina[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// describeSchema writes the schema as sorted lines, each prefixed by its
// table, in terms both engines share. schema_migrations, the store's own
// bookkeeping, is left out.
func describeSchema(ctx context.Context, s *Store) (string, error) {
	var lines []string
	add := func(table, format string, args ...any) {
		lines = append(lines, table+": "+fmt.Sprintf(format, args...))
	}
	var err error
	if s.pg {
		err = describePostgres(ctx, s, add)
	} else {
		err = describeSQLite(ctx, s, add)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), err
}

func typeClass(t string) string {
	t = strings.ToLower(t)
	switch {
	case strings.Contains(t, "int"):
		return "integer"
	case strings.Contains(t, "text"), strings.Contains(t, "char"):
		return "text"
	}
	return t
}

var castSuffix = regexp.MustCompile(`::[a-z ]+$`)
var numeric = regexp.MustCompile(`^-?[0-9]+$`)

// normDefault writes a column default alike on both engines: no outer
// parentheses, no PostgreSQL cast, numbers unquoted.
func normDefault(d string) string {
	d = strings.TrimSpace(d)
	for strings.HasPrefix(d, "(") && strings.HasSuffix(d, ")") {
		d = strings.TrimSpace(d[1 : len(d)-1])
	}
	d = castSuffix.ReplaceAllString(d, "")
	if len(d) >= 2 && d[0] == '\'' && d[len(d)-1] == '\'' && numeric.MatchString(d[1:len(d)-1]) {
		d = d[1 : len(d)-1]
	}
	return d
}

func normPredicate(p string) string {
	p = strings.TrimSpace(p)
	for strings.HasPrefix(p, "(") && strings.HasSuffix(p, ")") {
		p = p[1 : len(p)-1]
	}
	return strings.ToLower(strings.Join(strings.Fields(p), " "))
}

func column(name, typ string, notNull bool, def string, auto bool) string {
	null := "null"
	if notNull {
		null = "not null"
	}
	out := fmt.Sprintf("column %s %s %s", name, typeClass(typ), null)
	if def != "" {
		out += " default " + normDefault(def)
	}
	if auto {
		out += " identity"
	}
	return out
}

func describeSQLite(ctx context.Context, s *Store, add func(table, format string, args ...any)) error {
	type object struct{ kind, name, sql string }
	var objs []object
	rows, err := s.query(ctx, "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' AND name <> 'schema_migrations'")
	if err != nil {
		return err
	}
	for rows.Next() {
		var o object
		if err := rows.Scan(&o.kind, &o.name, &o.sql); err != nil {
			rows.Close()
			return err
		}
		objs = append(objs, o)
	}
	rows.Close()
	for _, o := range objs {
		add(o.name, o.kind)
		type col struct {
			name, typ string
			notNull   bool
			def       *string
			pk        int
		}
		var cols []col
		rows, err := s.query(ctx, "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?)", o.name)
		if err != nil {
			return err
		}
		for rows.Next() {
			var c col
			if err := rows.Scan(&c.name, &c.typ, &c.notNull, &c.def, &c.pk); err != nil {
				rows.Close()
				return err
			}
			cols = append(cols, c)
		}
		rows.Close()
		auto := strings.Contains(strings.ToUpper(o.sql), "AUTOINCREMENT")
		var pk []string
		for i, c := range cols {
			if o.kind == "view" {
				add(o.name, "view column %d %s", i, c.name)
				continue
			}
			def := ""
			if c.def != nil {
				def = *c.def
			}
			// A primary key column is NOT NULL on PostgreSQL; SQLite
			// lets a TEXT one hold NULL, which the store never writes.
			add(o.name, "%s", column(c.name, c.typ, c.notNull || c.pk > 0, def, auto && c.pk > 0))
			if c.pk > 0 {
				for len(pk) < c.pk {
					pk = append(pk, "")
				}
				pk[c.pk-1] = c.name
			}
		}
		if o.kind == "view" {
			continue
		}
		if len(pk) > 0 {
			add(o.name, "PRIMARY KEY (%s)", strings.Join(pk, ", "))
		}
		add(o.name, "checks %d", strings.Count(strings.ToUpper(o.sql), "CHECK ("))
		if err := describeSQLiteIndexes(ctx, s, o.name, add); err != nil {
			return err
		}
		rows, err = s.query(ctx, `SELECT id, "table", "from", "to", on_delete FROM pragma_foreign_key_list(?) ORDER BY id, seq`, o.name)
		if err != nil {
			return err
		}
		fks := map[int][]string{}
		var ids []int
		for rows.Next() {
			var id int
			var table, from, to, onDelete string
			if err := rows.Scan(&id, &table, &from, &to, &onDelete); err != nil {
				rows.Close()
				return err
			}
			if _, ok := fks[id]; !ok {
				ids = append(ids, id)
			}
			fk := fmt.Sprintf("FOREIGN KEY (%s) REFERENCES %s(%s)", from, table, to)
			if onDelete != "NO ACTION" {
				fk += " ON DELETE " + onDelete
			}
			fks[id] = append(fks[id], fk)
		}
		rows.Close()
		for _, id := range ids {
			add(o.name, "%s", strings.Join(fks[id], ""))
		}
	}
	return nil
}

func describeSQLiteIndexes(ctx context.Context, s *Store, table string, add func(table, format string, args ...any)) error {
	type index struct {
		name, origin    string
		unique, partial bool
	}
	var idx []index
	rows, err := s.query(ctx, `SELECT name, "unique", origin, partial FROM pragma_index_list(?)`, table)
	if err != nil {
		return err
	}
	for rows.Next() {
		var i index
		if err := rows.Scan(&i.name, &i.unique, &i.origin, &i.partial); err != nil {
			rows.Close()
			return err
		}
		idx = append(idx, i)
	}
	rows.Close()
	for _, i := range idx {
		if i.origin == "pk" {
			continue
		}
		var cols []string
		rows, err := s.query(ctx, `SELECT name, "desc", coll FROM pragma_index_xinfo(?) WHERE key = 1 ORDER BY seqno`, i.name)
		if err != nil {
			return err
		}
		for rows.Next() {
			var name, coll string
			var desc bool
			if err := rows.Scan(&name, &desc, &coll); err != nil {
				rows.Close()
				return err
			}
			if strings.EqualFold(coll, "NOCASE") {
				name = "lower(" + name + ")"
			}
			if desc {
				name += " DESC"
			}
			cols = append(cols, name)
		}
		rows.Close()
		if i.origin == "u" {
			add(table, "UNIQUE (%s)", strings.Join(cols, ", "))
			continue
		}
		desc := "index " + i.name
		if i.unique {
			desc += " unique"
		}
		desc += " (" + strings.Join(cols, ", ") + ")"
		if i.partial {
			var sql string
			if err := s.queryRow(ctx, "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?", i.name).Scan(&sql); err != nil {
				return err
			}
			_, where, _ := strings.Cut(sql, " WHERE ")
			desc += " where " + normPredicate(where)
		}
		add(table, "%s", desc)
	}
	return nil
}

func describePostgres(ctx context.Context, s *Store, add func(table, format string, args ...any)) error {
	rows, err := s.query(ctx, `SELECT table_name, table_type FROM information_schema.tables
		WHERE table_schema = 'public' AND table_name <> 'schema_migrations'`)
	if err != nil {
		return err
	}
	views := map[string]bool{}
	for rows.Next() {
		var name, kind string
		if err := rows.Scan(&name, &kind); err != nil {
			rows.Close()
			return err
		}
		if kind == "VIEW" {
			views[name] = true
			add(name, "view")
		} else {
			add(name, "table")
		}
	}
	rows.Close()

	rows, err = s.query(ctx, `SELECT table_name, column_name, data_type, is_nullable, COALESCE(column_default, ''), is_identity
		FROM information_schema.columns WHERE table_schema = 'public' AND table_name <> 'schema_migrations'
		ORDER BY table_name, ordinal_position`)
	if err != nil {
		return err
	}
	pos := map[string]int{}
	for rows.Next() {
		var table, name, typ, nullable, def, identity string
		if err := rows.Scan(&table, &name, &typ, &nullable, &def, &identity); err != nil {
			rows.Close()
			return err
		}
		if views[table] {
			add(table, "view column %d %s", pos[table], name)
		} else {
			add(table, "%s", column(name, typ, nullable == "NO", def, identity == "YES"))
		}
		pos[table]++
	}
	rows.Close()

	rows, err = s.query(ctx, `SELECT c.conrelid::regclass::text, c.contype, pg_get_constraintdef(c.oid)
		FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
		WHERE n.nspname = 'public' AND c.conrelid::regclass::text <> 'schema_migrations'`)
	if err != nil {
		return err
	}
	checks := map[string]int{}
	for rows.Next() {
		var table, kind, def string
		if err := rows.Scan(&table, &kind, &def); err != nil {
			rows.Close()
			return err
		}
		if kind == "c" {
			checks[table]++
			continue
		}
		add(table, "%s", def)
	}
	rows.Close()
	for table := range pos {
		if !views[table] {
			add(table, "checks %d", checks[table])
		}
	}

	type index struct {
		table, name string
		unique      bool
		pred        string
		oid         int64
		cols        []string
	}
	var idx []index
	rows, err = s.query(ctx, `SELECT i.indrelid::regclass::text, ic.relname, i.indisunique, COALESCE(pg_get_expr(i.indpred, i.indrelid, true), ''),
		CAST(i.indexrelid AS BIGINT)
		FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_namespace n ON n.oid = ic.relnamespace
		WHERE n.nspname = 'public' AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var i index
		if err := rows.Scan(&i.table, &i.name, &i.unique, &i.pred, &i.oid); err != nil {
			rows.Close()
			return err
		}
		idx = append(idx, i)
	}
	rows.Close()
	for _, i := range idx {
		rows, err := s.query(ctx, `SELECT pg_get_indexdef(i.indexrelid, k, true), (i.indoption[k - 1] & 1) = 1
			FROM pg_index i, generate_series(1, i.indnatts) AS k WHERE i.indexrelid = CAST(? AS BIGINT) ORDER BY k`, i.oid)
		if err != nil {
			return err
		}
		for rows.Next() {
			var col string
			var desc bool
			if err := rows.Scan(&col, &desc); err != nil {
				rows.Close()
				return err
			}
			if desc {
				col += " DESC"
			}
			i.cols = append(i.cols, col)
		}
		rows.Close()
		d := "index " + i.name
		if i.unique {
			d += " unique"
		}
		d += " (" + strings.Join(i.cols, ", ") + ")"
		if i.pred != "" {
			d += " where " + normPredicate(i.pred)
		}
		add(i.table, "%s", d)
	}
	return nil
}
