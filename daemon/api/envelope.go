package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
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
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"data": v})
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
// cause of server-side failures.
func serveError(log *slog.Logger, w http.ResponseWriter, r *http.Request, err error) {
	var apiErr *Error
	if !errors.As(err, &apiErr) {
		apiErr = Internal("internal error", err)
	}
	if apiErr.Status >= 500 {
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", apiErr.Status, "msg", apiErr.Msg, "err", apiErr.Err)
	}
	writeError(w, apiErr.Status, apiErr.Msg)
}

// decode reads a JSON body into v: 400 `invalid request body` when it does
// not parse, 413 when it is over MaxBodyBytes.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
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
	return errInvalidBody
}
