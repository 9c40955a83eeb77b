package localsetup_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// settingsOwners are the only files that may call the store's raw settings
// functions: the set-up settings (every key the dashboard's settings use,
// firewall mode included), the operator password (a credential, kept by
// auth alone), the ban tool's own JSON config, the tunnel CA (its sealed
// key, kept by tunnelca alone), publish's record of having turned
// route_localnet on (internal state, no operator setting), the monitor's
// two credentials (frps's dashboard password, sealed; the metrics token's
// hash), notify's own JSON settings (like the ban tool's), the passkeys'
// own (the operator's WebAuthn user handle, passwordless sign-in) and
// single sign-on's JSON settings with its sealed client secret.
var settingsOwners = map[string]bool{
	"totp/passkeys.go":       true,
	"sso/sso.go":             true,
	"monitor/frps.go":        true,
	"monitor/token.go":       true,
	"notify/settings.go":     true,
	"localsetup/settings.go": true,
	"auth/service.go":        true,
	"banner/config.go":       true,
	"tunnelca/tunnelca.go":   true,
	"publish/publish.go":     true,
}

// TestOneKeyPerSetting keeps each setting under one key: a package that
// reads or writes a setting by a key string of its own (as the firewall
// wrote "firewall.mode" while status read "firewall_mode") fails here and
// must go through localsetup.Settings instead.
func TestOneKeyPerSetting(t *testing.T) {
	root := ".."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(rel, "store/") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch sel.Sel.Name {
			case "GetSetting", "SetSetting", "SetSettingIfAbsent":
				if !settingsOwners[rel] {
					t.Errorf("%s calls %s directly: read and write settings through localsetup.Settings", rel, sel.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
