package agent

import (
	"bytes"
	"strconv"
	"strings"
)

// generationMark starts the first line of every client config the daemon
// delivers: "# tunnelsvc config generation: N". The agent reports N back
// once the config is applied (PUT /config's answer, GET /status), which is
// how the daemon knows what a machine runs.
const generationMark = "# tunnelsvc config generation: "

// WithGeneration returns config with its generation line (replacing one it
// already has).
func WithGeneration(config string, gen int64) string {
	if _, ok := Generation([]byte(config)); ok {
		_, rest, _ := strings.Cut(config, "\n")
		config = rest
	}
	return generationMark + strconv.FormatInt(gen, 10) + "\n" + config
}

// Generation is the generation a config's first line names.
func Generation(config []byte) (int64, bool) {
	line, _, _ := bytes.Cut(config, []byte("\n"))
	rest, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte(generationMark))
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(string(rest), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
