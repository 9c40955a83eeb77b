// Package apicheck holds real API responses against daemon/api/openapi.yaml:
// a response whose status the operation does not list, or whose content
// type or body does not match what the document says, fails the test that
// produced it. Only tests import it.
package apicheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// Reporter is the part of testing.TB a check reports to; a test of the
// checker itself passes a recorder.
type Reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// Checker validates responses against one OpenAPI document.
type Checker struct {
	doc    *openapi3.T
	router routers.Router
	errSch *openapi3.Schema
	// validated counts the responses checked against an operation.
	validated atomic.Int64
}

// New loads and validates the document.
func New(spec []byte) (*Checker, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(spec)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	c := &Checker{doc: doc, router: router}
	if ref := doc.Components.Schemas["Error"]; ref != nil {
		c.errSch = ref.Value
	}
	if c.errSch == nil {
		return nil, errors.New("openapi.yaml: components/schemas/Error is missing")
	}
	return c, nil
}

// Validated is how many responses were checked against an operation.
func (c *Checker) Validated() int64 { return c.validated.Load() }

// Check returns why the response (status, header, body) to req is not
// what the document describes, or nil. req must carry the method and URL
// the server saw.
//
// Not described, so not checked:
//   - WebSocket upgrades (101 and frames are not OpenAPI responses);
//   - HEAD requests (no body; the GET operation describes them);
//   - paths outside /api that the document does not name: the dashboard's
//     own files (the SPA catch-all).
//
// A request no operation describes (an unknown /api path, or a method the
// path does not have) must get the router's 404 or 405 in the error
// envelope: OpenAPI has no operation to hang those on.
func (c *Checker) Check(req *http.Request, status int, header http.Header, body []byte) error {
	if Excluded(req) {
		return nil
	}
	// Match the path as the server's router does: decoded, so that
	// /api/local/ssh-keys/x%2Fy is /api/local/ssh-keys/x/y, which no route
	// has. The router answers such a path itself (404 or 405 in the error
	// envelope); OpenAPI has no operation to hang those on.
	decoded := req.Clone(req.Context())
	decoded.URL.RawPath = ""
	route, params, err := c.router.FindRoute(decoded)
	if err != nil && isRouterAnswer(status) {
		if !isAPIPath(req.URL.Path) {
			return nil
		}
		return c.errorEnvelope(header, body)
	}
	if err != nil {
		// A route that takes a slash in a parameter ({ip:.+}) answers
		// what the document can only describe with the slash encoded.
		route, params, err = c.router.FindRoute(req)
	}
	if err != nil {
		if !isAPIPath(req.URL.Path) && errors.Is(err, routers.ErrPathNotFound) {
			return nil // the dashboard's own files
		}
		return fmt.Errorf("no operation in openapi.yaml (%v), yet answered %d", err, status)
	}
	c.validated.Add(1)
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request:    req,
			PathParams: params,
			Route:      route,
		},
		Status: status,
		Header: header,
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
		},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return err
	}
	// kin-openapi checks a body only where the document gives a content
	// type. A JSON body the document says nothing about is not described.
	resp := route.Operation.Responses.Status(status)
	if resp == nil {
		resp = route.Operation.Responses.Default()
	}
	if resp != nil && resp.Value != nil && len(resp.Value.Content) == 0 && len(body) > 0 && isJSON(header) {
		return fmt.Errorf("response %d has a JSON body but openapi.yaml gives it no content", status)
	}
	return nil
}

// errorEnvelope checks body against components/schemas/Error.
func (c *Checker) errorEnvelope(header http.Header, body []byte) error {
	if !isJSON(header) {
		return fmt.Errorf("error response is %q, not application/json", header.Get("Content-Type"))
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("error response is not JSON: %v", err)
	}
	if err := c.errSch.VisitJSON(v, openapi3.VisitAsResponse()); err != nil {
		return fmt.Errorf("error response does not match #/components/schemas/Error: %v", err)
	}
	return nil
}

func isRouterAnswer(status int) bool {
	return status == http.StatusNotFound || status == http.StatusMethodNotAllowed
}

func isAPIPath(p string) bool { return p == "/api" || strings.HasPrefix(p, "/api/") }

func isJSON(h http.Header) bool {
	ct, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	return strings.TrimSpace(ct) == "application/json"
}

// Excluded reports whether req is one the document cannot describe.
func Excluded(req *http.Request) bool {
	if req.Method == http.MethodHead {
		return true
	}
	return strings.EqualFold(req.Header.Get("Upgrade"), "websocket")
}

// Report checks the response like Check and fails r, naming the method,
// path and status, when the document does not describe it.
func (c *Checker) Report(r Reporter, req *http.Request, status int, header http.Header, body []byte) {
	r.Helper()
	if err := c.Check(req, status, header, body); err != nil {
		r.Errorf("openapi.yaml does not describe %s %s -> %d: %v", req.Method, req.URL.RequestURI(), status, err)
	}
}

// Handler wraps h: every response it writes is checked, and one the
// document does not describe fails r. WebSocket upgrades pass through
// untouched (the hijacked connection cannot be recorded).
func (c *Checker) Handler(r Reporter, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if Excluded(req) {
			h.ServeHTTP(w, req)
			return
		}
		// The request as the server saw it: handlers may replace the body.
		seen := req.Clone(req.Context())
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, req)
		if !rec.wroteHeader {
			rec.status = http.StatusOK
			rec.header = w.Header().Clone()
		}
		c.Report(r, seen, rec.status, rec.header, rec.body.Bytes())
	})
}

// recorder copies what passes through to the real ResponseWriter.
type recorder struct {
	http.ResponseWriter
	wroteHeader bool
	status      int
	header      http.Header
	body        bytes.Buffer
}

func (w *recorder) WriteHeader(status int) {
	if !w.wroteHeader {
		w.wroteHeader = true
		w.status = status
		w.header = w.ResponseWriter.Header().Clone()
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *recorder) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the real writer (Flush).
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
