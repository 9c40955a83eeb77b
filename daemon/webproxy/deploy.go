package webproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"

	"github.com/tunnelsvc/tunnelsvc/daemon/atomicfile"
	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// Unit is the systemd unit of the web proxy.
const Unit = "caddy.service"

// Units is what the deployer needs of the unit layer (units.Manager).
type Units interface {
	State(ctx context.Context, unit string) (units.State, error)
	Reload(ctx context.Context, unit string) error
}

// Deployer checks, writes and applies the Caddyfile.
type Deployer struct {
	// Path of the managed Caddyfile (/etc/tunnelsvc/Caddyfile under the
	// system root); caddy.service is pointed at it by a drop-in.
	Path string
	// Caddy is the caddy binary (default "caddy").
	Caddy string
	Run   cmdrun.Runner
	Units Units

	mu sync.Mutex
}

// Validate runs `caddy validate` on content written beside the deployed
// file; the error carries caddy's words.
func (d *Deployer) Validate(ctx context.Context, content []byte) error {
	tmp, err := atomicfile.TempBeside(d.Path, content)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	return d.validateFile(ctx, tmp)
}

func (d *Deployer) validateFile(ctx context.Context, file string) error {
	caddy := d.Caddy
	if caddy == "" {
		caddy = "caddy"
	}
	err := d.Run.Run(ctx, caddy, "validate", "--config", file, "--adapter", "caddyfile").AsError("caddy", file)
	var te *cmdrun.ToolError
	if errors.As(err, &te) {
		// The candidate sits beside the deployed file under a temporary
		// name; name the file the operator knows.
		te.Words = strings.ReplaceAll(te.Words, file, d.Path)
	}
	return err
}

// Current returns the deployed file, or nil when there is none.
func (d *Deployer) Current() ([]byte, error) {
	b, err := os.ReadFile(d.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// RenderWithCustom renders in, carrying over the custom block of the
// deployed file.
func (d *Deployer) RenderWithCustom(in Input) ([]byte, error) {
	old, err := d.Current()
	if err != nil {
		return nil, err
	}
	in.Custom = ExtractCustom(old)
	return Render(in)
}

// Deploy renders in (keeping the deployed custom block), validates it with
// caddy, writes it atomically and reloads caddy.service when it runs. It
// reports whether the file changed. Any failure leaves the previous file in
// place: a rejected file is never written, and a failed reload puts the old
// file back.
func (d *Deployer) Deploy(ctx context.Context, in Input) (changed bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	old, err := d.Current()
	if err != nil {
		return false, err
	}
	in.Custom = ExtractCustom(old)
	next, err := Render(in)
	if err != nil {
		return false, err
	}
	if old != nil && bytes.Equal(old, next) {
		return false, nil
	}
	tmp, err := atomicfile.TempBeside(d.Path, next)
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp)
	if err := d.validateFile(ctx, tmp); err != nil {
		return false, fmt.Errorf("the new Caddyfile was rejected and not deployed: %w", err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, d.Path); err != nil {
		return false, err
	}
	if err := d.apply(ctx); err != nil {
		if old != nil {
			if rerr := atomicfile.Write(d.Path, old, 0o644); rerr != nil {
				return false, errors.Join(err, fmt.Errorf("restoring the previous Caddyfile: %w", rerr))
			}
		} else {
			os.Remove(d.Path)
		}
		return false, err
	}
	return true, nil
}

// apply reloads caddy when it is running; a stopped caddy reads the file
// when it starts.
func (d *Deployer) apply(ctx context.Context) error {
	st, err := d.Units.State(ctx, Unit)
	if err != nil {
		return err
	}
	if st.ActiveState != "active" && st.ActiveState != "reloading" {
		return nil
	}
	if err := d.Units.Reload(ctx, Unit); err != nil {
		return fmt.Errorf("reloading caddy: %w", err)
	}
	return nil
}
