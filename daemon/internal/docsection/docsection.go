// Package docsection finds and rewrites a generated section of a guide:
// the lines between a begin and an end marker, which make docs writes from
// the code and a test compares with it.
package docsection

import "strings"

// Get is what doc holds between begin's line and end; false when doc lacks
// either marker.
func Get(doc, begin, end string) (string, bool) {
	_, rest, ok := strings.Cut(doc, begin+"\n")
	if !ok {
		return "", false
	}
	section, _, ok := strings.Cut(rest, end)
	return section, ok
}

// Set is doc with section between its markers instead of what was there;
// doc unchanged, false, when it lacks either marker.
func Set(doc, begin, end, section string) (string, bool) {
	old, ok := Get(doc, begin, end)
	if !ok {
		return doc, false
	}
	return strings.Replace(doc, begin+"\n"+old+end, begin+"\n"+section+end, 1), true
}
