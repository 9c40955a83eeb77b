package matching

import (
	"sort"
	"sync"
	"weak"

	"github.com/nbutton23/zxcvbn-go/adjacency"
	"github.com/nbutton23/zxcvbn-go/frequency"
	"github.com/nbutton23/zxcvbn-go/match"
)

var (
	adjacencyGraphs []adjacency.Graph
	l33tTable       adjacency.Graph

	sequences map[string]string
)

func init() {
	l33tTable = adjacency.GraphMap["l33t"]

	adjacencyGraphs = append(adjacencyGraphs, adjacency.GraphMap["qwerty"])
	adjacencyGraphs = append(adjacencyGraphs, adjacency.GraphMap["dvorak"])
	adjacencyGraphs = append(adjacencyGraphs, adjacency.GraphMap["keypad"])
	adjacencyGraphs = append(adjacencyGraphs, adjacency.GraphMap["macKeypad"])

	sequences = make(map[string]string)
	sequences["lower"] = "abcdefghijklmnopqrstuvwxyz"
	sequences["upper"] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	sequences["digits"] = "0123456789"
}

// matcherSet is every matcher, with the ranked dictionaries they close over.
type matcherSet struct {
	dictionaryMatchers []match.Matcher
	matchers           []match.Matcher
}

// The dictionaries are built on first use and kept only while a caller
// uses them: the weak pointer lets the next garbage collection free them
// (about 6 MB) once no check is running, and a check after that builds
// them again. Upstream built them at init and kept them for the life of
// the program.
var (
	setMu  sync.Mutex
	setRef weak.Pointer[matcherSet]
	// kept, once Keep was called, holds the set strongly.
	kept *matcherSet
)

// Keep builds the dictionaries now and keeps them for the life of the
// program, as upstream did: for a program that checks many passwords (a
// test binary), not for a daemon that checks a few.
func Keep() {
	s := loadMatchers()
	setMu.Lock()
	kept = s
	setMu.Unlock()
}

func loadMatchers() *matcherSet {
	setMu.Lock()
	defer setMu.Unlock()
	if s := setRef.Value(); s != nil {
		return s
	}
	s := &matcherSet{}
	for n, list := range frequency.Load() {
		s.dictionaryMatchers = append(s.dictionaryMatchers, match.Matcher{MatchingFunc: buildDictMatcher(n, buildRankedDict(list.List)), ID: n})
	}
	s.matchers = append(s.matchers, s.dictionaryMatchers...)
	s.matchers = append(s.matchers, match.Matcher{MatchingFunc: spatialMatch, ID: spatialMatcherName})
	s.matchers = append(s.matchers, match.Matcher{MatchingFunc: repeatMatch, ID: repeatMatcherName})
	s.matchers = append(s.matchers, match.Matcher{MatchingFunc: sequenceMatch, ID: sequenceMatcherName})
	s.matchers = append(s.matchers, match.Matcher{MatchingFunc: s.l33tMatch, ID: L33TMatcherName})
	s.matchers = append(s.matchers, match.Matcher{MatchingFunc: dateSepMatcher, ID: dateSepMatcherName})
	s.matchers = append(s.matchers, match.Matcher{MatchingFunc: dateWithoutSepMatch, ID: dateWithOutSepMatcherName})
	setRef = weak.Make(s)
	return s
}

// Omnimatch runs all matchers against the password
func Omnimatch(password string, userInputs []string, filters ...func(match.Matcher) bool) (matches []match.Match) {
	set := loadMatchers()

	if userInputs != nil {
		userInputMatcher := buildDictMatcher("user_inputs", buildRankedDict(userInputs))
		matches = userInputMatcher(password)
	}

	for _, matcher := range set.matchers {
		shouldBeFiltered := false
		for i := range filters {
			if filters[i](matcher) {
				shouldBeFiltered = true
				break
			}
		}
		if !shouldBeFiltered {
			matches = append(matches, matcher.MatchingFunc(password)...)
		}
	}
	sort.Sort(match.Matches(matches))
	return matches
}
