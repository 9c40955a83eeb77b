package cmdrun

import (
	"fmt"
	"regexp"
	"strings"
)

// Message is what a failed tool run may show to the API client and the log
// stream: the tool's own message line, and nothing else. Tools print more
// than that, and the rest quotes the files they read: nft repeats the
// offending source line under a caret, fail2ban prints the offending line
// and "Raw value", caddy logs JSON and hints. All of that is cut.
//
// own lists the files the caller wrote for the tool. A message line that
// names any other file may quote it (caddy's "secret.conf:2: unrecognized
// directive: <the line's first word>"), so it is cut to the location:
// the reader learns where the problem is, never what the file says.
func Message(tool string, r Result, own ...string) string {
	var msg string
	switch tool {
	case "caddy":
		msg = caddyMessage(r)
	case "nft":
		msg = nftMessage(r)
	case "fail2ban":
		msg = fail2banMessage(r)
	case "fail2ban-client":
		// A client command's failure is a sentence on stdout ("Sorry but
		// the jail 'x' does not exist"); its log lines say less.
		if msg = firstLine(Result{Stdout: r.Stdout}); msg == "" || f2bPrefix.MatchString(msg) {
			msg = fail2banMessage(r)
		}
	}
	if msg == "" {
		msg = firstLine(r)
	}
	if path, line, ok := foreignFile(msg, own); ok {
		loc := path
		if line != "" {
			loc += " line " + line
		}
		return fmt.Sprintf("the error is in %s (the message is not shown: it would quote that file)", loc)
	}
	return msg
}

// firstLine is the first non-empty line of stderr, else of stdout, else
// the exit error.
func firstLine(r Result) string {
	for _, s := range []string{r.Stderr, r.Stdout} {
		for _, l := range strings.Split(s, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				return l
			}
		}
	}
	if r.Err != nil {
		return r.Err.Error()
	}
	return ""
}

// caddyMessage: caddy prints JSON log lines, then "Error: <message>", then
// hints ("Did you mean to define a second site?").
func caddyMessage(r Result) string {
	for _, l := range strings.Split(r.Stderr+"\n"+r.Stdout, "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(l), "Error: "); ok {
			return m
		}
	}
	return ""
}

// nftMessage: nft prints "<file>:<line>:<col>: Error: <message>", then the
// offending source line and a caret line; "In file included from" lines
// come before it.
func nftMessage(r Result) string {
	for _, l := range strings.Split(r.Stderr+"\n"+r.Stdout, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "Error: ") || strings.Contains(l, ": Error: ") {
			return l
		}
	}
	return ""
}

// f2bPrefix is fail2ban's log line prefix: "2026-01-02 03:04:05,678 fail2ban.x [123]: ERROR   ".
var f2bPrefix = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ \S+\s+\[\d+\]: (\w+)\s+`)

// f2bLine and f2bFileLine are the continuation lines of a parse error,
// "\t[line  5]: '<the line>'" and "file: '<path>', line: 1" (followed by a
// line quoting the offending text).
var (
	f2bLine     = regexp.MustCompile(`^\s*\[line\s+(\d+)\]:`)
	f2bFileLine = regexp.MustCompile(`^file: '([^']+)', line: (\d+)$`)
)

// fail2banMessage is fail2ban's first ERROR line without its log prefix.
// A parse error's continuation line quotes the offending line; only its
// line number is kept. "Raw value: '...'" quotes a value and is cut.
// fail2ban's closing "ERROR: test configuration failed" is used only when
// nothing better was said. A client command's failure is a sentence on
// stdout ("Sorry but the jail 'x' does not exist"). Continuation lines
// are kept only as the location they give.
func fail2banMessage(r Result) string {
	lines := strings.Split(r.Stderr+"\n"+r.Stdout, "\n")
	var generic string
	for i, l := range lines {
		m := f2bPrefix.FindStringSubmatch(l)
		if m == nil || m[1] != "ERROR" {
			continue
		}
		msg := strings.TrimSpace(l[len(m[0]):])
		if strings.HasPrefix(msg, "ERROR: ") {
			if generic == "" {
				generic = strings.TrimPrefix(msg, "ERROR: ")
			}
			continue
		}
		if before, _, ok := strings.Cut(msg, " Raw value:"); ok {
			msg = strings.TrimRight(before, " .") + "."
		}
		if i+1 < len(lines) {
			if n := f2bLine.FindStringSubmatch(lines[i+1]); n != nil {
				msg += " (line " + n[1] + ")"
			} else if n := f2bFileLine.FindStringSubmatch(strings.TrimSpace(lines[i+1])); n != nil {
				msg += " (in " + n[1] + ":" + n[2] + ")"
			}
		}
		return msg
	}
	return generic
}

// fileRef finds the places where the tools name a file they read: an
// absolute path followed by a line number ("/x/Caddyfile:12", nft's
// "/x/r.nft:3:19-19") or an absolute path in single quotes (fail2ban's
// "'/etc/fail2ban/jail.d/x.local'"). A URL ("http://h/p") is not a file.
var fileRef = regexp.MustCompile(`(?:^|[\s(])(/[^\s'":,()]+):(\d+)|'(/[^']+)'`)

// foreignFile reports the first file the message names that is not one of
// own.
func foreignFile(msg string, own []string) (path, line string, ok bool) {
	for _, m := range fileRef.FindAllStringSubmatch(msg, -1) {
		p, l := m[1], m[2]
		if p == "" {
			p = m[3]
		}
		if isOwn(p, own) {
			continue
		}
		return p, l, true
	}
	return "", "", false
}

func isOwn(p string, own []string) bool {
	for _, o := range own {
		if p == o {
			return true
		}
	}
	return false
}
