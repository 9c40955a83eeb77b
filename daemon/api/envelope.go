package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// MaxBodyBytes caps every request body.
const MaxBodyBytes = 1 << 20

// Error is a failure with the status and message the client sees; Err is the
// internal cause, logged and never sent.
type Error struct {
	Status int
	Msg    string
	Err    error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%d %s: %v", e.Status, e.Msg, e.Err)
	}
	return fmt.Sprintf("%d %s", e.Status, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds a client-facing error.
func Errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Msg: fmt.Sprintf(format, args...)}
}

// Internal wraps an unexpected failure as a 500 with a short message.
func Internal(msg string, err error) *Error {
	return &Error{Status: http.StatusInternalServerError, Msg: msg, Err: err}
}

var errInvalidBody = Errorf(http.StatusBadRequest, "invalid request body")

// handlerFunc is how every API handler is written: it writes a success
// itself and returns an error for everything else.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// writeData writes the success envelope {"data": v}.
func writeData(w http.ResponseWriter, status int, v any) {
	writeEnvelope(w, status, dataEnvelope{Data: v})
}

// writePage writes one page of a list: {"data": rows, "page": page}.
func writePage(w http.ResponseWriter, rows, page any) {
	writeEnvelope(w, http.StatusOK, dataEnvelope{Data: rows, Page: page})
}

func writeEnvelope(w http.ResponseWriter, status int, e dataEnvelope) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(e)
}

// dataEnvelope is {"data": v}: a struct, which encoding/json writes
// without the map and the key sort of map[string]any.
type dataEnvelope struct {
	Data any `json:"data"`
	// Page is what a paged list says beside its rows (absent elsewhere).
	Page any `json:"page,omitempty"`
}

// writeError writes {"error": msg}.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// message is the common {"message": ...} payload.
func message(text string) map[string]string { return map[string]string{"message": text} }

// serveError turns any handler error into the error envelope and logs the
// cause of server-side failures. A failure for lack of space, whatever the
// handler called it, answers StatusDiskFull with where and what to do.
func (s *Server) serveError(w http.ResponseWriter, r *http.Request, err error) {
	var apiErr *Error
	if !errors.As(err, &apiErr) {
		apiErr = Internal("internal error", err)
	}
	apiErr = s.diskFull(apiErr)
	apiErr = databaseGone(apiErr)
	if apiErr.Status >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", apiErr.Status, "msg", apiErr.Msg, "err", apiErr.Err)
	}
	writeError(w, apiErr.Status, apiErr.Msg)
}

// StatusDiskFull answers a request that needed a write the disk had no
// room for: 507 Insufficient Storage says exactly that (RFC 4918 §11.5),
// and it is not one of the 503s the API gives for a missing system part,
// nor a status that clients and proxies retry by themselves. It goes once
// space is freed, with no restart.
const StatusDiskFull = http.StatusInsufficientStorage

// diskFull rewrites a server-side failure caused by a full disk (SQLite's
// SQLITE_FULL, ENOSPC, EDQUOT) as StatusDiskFull: "the data disk is full
// (<data dir>): free space on it, then try again", or, for a file outside
// the data directory, that file's directory.
func (s *Server) diskFull(e *Error) *Error {
	if e.Status < 500 || !store.DiskFull(e.Err) {
		return e
	}
	where := "the data disk is full (" + s.cfg.DataDir + ")"
	var pe *fs.PathError
	if errors.As(e.Err, &pe) && !within(s.cfg.DataDir, pe.Path) {
		where = "the disk is full (" + filepath.Dir(pe.Path) + ")"
	}
	return &Error{Status: StatusDiskFull, Msg: where + ": free space on it, then try again", Err: e.Err}
}

// databaseGone rewrites a server-side failure because the database could
// not be reached (store.Unavailable: PostgreSQL restarting, failing over,
// cut off) as 503 `database unavailable`: the change was not made, and the
// dashboard says so with a banner until /healthz is healthy again.
func databaseGone(e *Error) *Error {
	if e.Status != http.StatusInternalServerError || !store.Unavailable(e.Err) {
		return e
	}
	return &Error{Status: http.StatusServiceUnavailable, Msg: store.UnavailableMessage, Err: e.Err}
}

// within says whether path is dir or below it. Files of the data directory
// are named from its configured path, so both are relative or both
// absolute.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// decode reads a JSON body into v: 400 `invalid request body` when it does
// not parse, 400 `unknown field "x"` when it names a field v does not have
// (a misspelt setting is refused, never read as its default), 413 when it
// is over MaxBodyBytes.
func decode(r *http.Request, v any) error {
	return decodeFrom(r.Body, v)
}

// decodeOptional is decode for bodies whose every field is optional: an
// empty body is the zero value.
func decodeOptional(r *http.Request, v any) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return Errorf(http.StatusRequestEntityTooLarge, "request body too large (limit %d bytes)", MaxBodyBytes)
		}
		return errInvalidBody
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return decode(r, v)
}

// decodeFrom is decode of any reader.
func decodeFrom(body io.Reader, v any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		// Trailing garbage after the object makes the body unparsable too.
		var extra json.RawMessage
		if derr := dec.Decode(&extra); derr != io.EOF {
			err = errors.New("trailing data after JSON value")
			var tooBig *http.MaxBytesError
			if errors.As(derr, &tooBig) {
				err = derr
			}
		}
	}
	if err == nil {
		return nil
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return Errorf(http.StatusRequestEntityTooLarge, "request body too large (limit %d bytes)", MaxBodyBytes)
	}
	if name, ok := unknownField(err); ok {
		return Errorf(http.StatusBadRequest, "unknown field %q", name)
	}
	return errInvalidBody
}

// unknownField is the field named by encoding/json's refusal of an unknown
// field (it has no error type of its own: `json: unknown field "x"`).
func unknownField(err error) (string, bool) {
	rest, ok := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !ok {
		return "", false
	}
	name, uerr := strconv.Unquote(rest)
	return name, uerr == nil
}
