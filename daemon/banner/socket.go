package banner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"
)

// The ban tool's state is read from fail2ban-server's socket, as
// fail2ban-client talks to it (fail2ban/client/csocket.py): each command
// is a pickled list of strings followed by <F2B_END_COMMAND>, and each
// answer a pickled (code, value) followed by the same marker; code 0 is
// success, 1 an exception whose arguments say what went wrong. One
// connection answers a whole status (ping, the jail list, each jail) in
// milliseconds, where fail2ban-client starts a Python interpreter per
// command: about 0.2 s of CPU each, and seconds on a busy machine, so a
// metrics scrape could run out of time and drop the ban figures.
// Changes (unban, reload) still go through fail2ban-client, whose words
// the operator sees.

var (
	f2bEnd   = []byte("<F2B_END_COMMAND>")
	f2bClose = []byte("<F2B_CLOSE_COMMAND>")
)

// f2bConn is one connection to fail2ban-server's socket.
type f2bConn struct {
	c net.Conn
	r *bufio.Reader
}

// dialF2B connects to the socket at path, bounded by ctx.
func dialF2B(ctx context.Context, path string) (*f2bConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Now().Add(30 * time.Second))
	}
	return &f2bConn{c: c, r: bufio.NewReader(c)}, nil
}

// Close says goodbye as fail2ban-client does, then closes.
func (f *f2bConn) Close() error {
	f.c.Write(append(append([]byte{}, f2bClose...), f2bEnd...))
	return f.c.Close()
}

// command sends one command and returns its value, or fail2ban's error.
func (f *f2bConn) command(args ...string) (any, error) {
	if _, err := f.c.Write(append(pickleStrings(args), f2bEnd...)); err != nil {
		return nil, err
	}
	var msg []byte
	for !bytes.HasSuffix(msg, f2bEnd) {
		b, err := f.r.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("fail2ban's socket: %w", err)
		}
		msg = append(msg, b)
		if len(msg) > 16<<20 {
			return nil, errors.New("fail2ban's socket: an answer over 16 MiB")
		}
	}
	u := pickle.NewUnpickler(bytes.NewReader(msg[:len(msg)-len(f2bEnd)]))
	u.FindClass = func(module, name string) (any, error) { return pyClass{module, name}, nil }
	v, err := u.Load()
	if err != nil {
		return nil, fmt.Errorf("fail2ban's socket: unreadable answer: %w", err)
	}
	ack, ok := v.(*types.Tuple)
	if !ok || ack.Len() != 2 {
		return nil, fmt.Errorf("fail2ban's socket: unexpected answer %v", v)
	}
	if code, _ := ack.Get(0).(int); code != 0 {
		return nil, errors.New(exceptionText(ack.Get(1)))
	}
	return ack.Get(1), nil
}

// pyClass is a class an answer names. Calling it (the pickle's REDUCE)
// gives a types.GenericObject with the call's arguments, but str(x) gives
// x's text: fail2ban sends its IPAddr objects that way.
type pyClass struct{ module, name string }

func (c pyClass) Call(args ...any) (any, error) {
	if c.module == "builtins" && c.name == "str" {
		if len(args) == 0 {
			return "", nil
		}
		return fmt.Sprint(args[0]), nil
	}
	return &types.GenericObject{Class: types.NewGenericClass(c.module, c.name), ConstructorArgs: args}, nil
}

func (c pyClass) PyNew(args ...any) (any, error) { return c.Call(args...) }

// exceptionText is what fail2ban-client prints for an exception
// (client/beautifier.py's beautifyError): its words for an unknown jail,
// an invalid command or a duplicate jail, else the exception's arguments.
func exceptionText(v any) string {
	if o, ok := v.(*types.GenericObject); ok {
		arg := ""
		if len(o.ConstructorArgs) > 0 {
			arg = fmt.Sprint(o.ConstructorArgs[0])
		}
		switch o.Class.Name {
		case "UnknownJailException":
			return "Sorry but the jail '" + arg + "' does not exist"
		case "IndexError":
			return "Sorry but the command is invalid"
		case "DuplicateJailException":
			return "The jail '" + arg + "' already exists"
		}
		var parts []string
		for _, a := range o.ConstructorArgs {
			if t, ok := a.(*types.Tuple); ok {
				for i := 0; i < t.Len(); i++ {
					parts = append(parts, fmt.Sprint(t.Get(i)))
				}
			} else {
				parts = append(parts, fmt.Sprint(a))
			}
		}
		if len(parts) > 0 {
			return strings.Join(parts, " ")
		}
		return o.Class.Name
	}
	return fmt.Sprint(v)
}

// pickleStrings is a list of strings pickled (protocol 2), as
// fail2ban-client sends a command.
func pickleStrings(args []string) []byte {
	b := []byte{0x80, 2, ']', '('}
	for _, a := range args {
		b = append(b, 'X')
		b = binary.LittleEndian.AppendUint32(b, uint32(len(a)))
		b = append(b, a...)
	}
	return append(b, 'e', '.')
}

// fields flattens fail2ban's status answers, lists of (name, value) pairs
// nested as the client prints them, into name → value.
func fields(v any, out map[string]any) {
	var items []any
	switch x := v.(type) {
	case *types.List:
		items = *x
	case *types.Tuple:
		items = *x
	default:
		return
	}
	for _, it := range items {
		p, ok := it.(*types.Tuple)
		if !ok || p.Len() != 2 {
			continue
		}
		name, ok := p.Get(0).(string)
		if !ok {
			continue
		}
		switch val := p.Get(1).(type) {
		case *types.List:
			if isPairs(val) {
				fields(val, out)
			} else {
				out[name] = val
			}
		default:
			out[name] = val
		}
	}
}

func isPairs(l *types.List) bool {
	if l.Len() == 0 {
		return false
	}
	for _, it := range *l {
		p, ok := it.(*types.Tuple)
		if !ok || p.Len() != 2 {
			return false
		}
		if _, ok := p.Get(0).(string); !ok {
			return false
		}
	}
	return true
}

// socketStatus reads every jail's status over conn.
func socketStatus(conn *f2bConn) ([]Jail, error) {
	v, err := conn.command("status")
	if err != nil {
		return nil, fmt.Errorf("fail2ban status: %w", err)
	}
	f := map[string]any{}
	fields(v, f)
	list, _ := f["Jail list"].(string)
	jails := []Jail{}
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		j, err := conn.jail(name)
		if err != nil {
			return nil, err
		}
		jails = append(jails, j)
	}
	return jails, nil
}

// jail reads one jail's status.
func (f *f2bConn) jail(name string) (Jail, error) {
	v, err := f.command("status", name)
	if err != nil {
		return Jail{}, fmt.Errorf("fail2ban status %s: %w", name, err)
	}
	m := map[string]any{}
	fields(v, m)
	j := Jail{Name: name, Banned: []string{}}
	j.CurrentlyFailed, _ = m["Currently failed"].(int)
	j.TotalFailed, _ = m["Total failed"].(int)
	j.CurrentlyBanned, _ = m["Currently banned"].(int)
	j.TotalBanned, _ = m["Total banned"].(int)
	if l, ok := m["Banned IP list"].(*types.List); ok {
		for _, ip := range *l {
			j.Banned = append(j.Banned, fmt.Sprint(ip))
		}
	}
	return j, nil
}

// JailStatus reads one jail's status from the fail2ban-server listening
// on the socket at path.
func JailStatus(ctx context.Context, path, jail string) (Jail, error) {
	conn, err := dialF2B(ctx, path)
	if err != nil {
		return Jail{}, err
	}
	defer conn.Close()
	return conn.jail(jail)
}

// socketPath is where fail2ban-client would connect: Options.Socket, else
// the socket setting of fail2ban.conf, fail2ban.d/*.conf, fail2ban.local
// and fail2ban.d/*.local under ConfDir (later ones win), else "" (no
// fail2ban configuration here: fail2ban-client answers, or says why not).
func (s *Service) socketPath() string {
	if s.socket != "" {
		return s.socket
	}
	confs, _ := filepath.Glob(filepath.Join(s.confDir, "fail2ban.d", "*.conf"))
	locals, _ := filepath.Glob(filepath.Join(s.confDir, "fail2ban.d", "*.local"))
	sort.Strings(confs)
	sort.Strings(locals)
	files := append([]string{filepath.Join(s.confDir, "fail2ban.conf")}, confs...)
	files = append(files, filepath.Join(s.confDir, "fail2ban.local"))
	files = append(files, locals...)
	path := ""
	for _, f := range files {
		if p := socketSetting(f); p != "" {
			path = p
		}
	}
	return path
}

// socketSetting is the socket option of an INI file's [DEFAULT] or
// [Definition] section ("" when it has none).
func socketSetting(file string) string {
	data, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	section, path := "", ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = strings.TrimSpace(line[1 : len(line)-1])
			continue
		}
		if section != "DEFAULT" && section != "Definition" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == "socket" {
			path = strings.TrimSpace(v)
		}
	}
	return path
}
