// A model of how the unchanged Ingero agent (Go) reads what this extension sends, per
// shared/spec/agent-protocol.md sections 2.1 and 2.2. Driven by tests/go_agent_model.rs.
//
// stdin, one case per line, fields separated by TAB; stdout, one verdict per line:
//   H <threshold header> <quorum header>  -> absent | rejected | valid <value> <quorum>
//   B <GET response body>                 -> coldstart | rejected | too-large | decode-error | valid <value> <quorum>
//   Q <cluster id>                        -> the query string the agent sends (url.Values.Encode)
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"strconv"
	"strings"
)

const (
	minThreshold = 0.1
	maxThreshold = 0.99
	maxBody      = 8 * 1024
)

// headers applies the push-response rules: both trimmed values present, the threshold a
// finite float inside the bounds, quorum exactly true/false in any case.
func headers(rawT, rawQ string) string {
	t := strings.TrimSpace(rawT)
	q := strings.TrimSpace(rawQ)
	if t == "" || q == "" {
		return "absent"
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return "rejected"
	}
	var quorum bool
	switch strings.ToLower(q) {
	case "true":
		quorum = true
	case "false":
		quorum = false
	default:
		return "rejected"
	}
	if v < minThreshold || v > maxThreshold {
		return "rejected"
	}
	return fmt.Sprintf("valid %s %t", strconv.FormatFloat(v, 'g', -1, 64), quorum)
}

// body applies the GET fallback rules: capped read, encoding/json into a typed struct, the
// cold-start shape, otherwise the header rules on the re-formatted values.
func body(raw string) string {
	b, err := io.ReadAll(io.LimitReader(strings.NewReader(raw), maxBody+1))
	if err != nil {
		return "decode-error"
	}
	if len(b) > maxBody {
		return "too-large"
	}
	var got struct {
		Threshold float64 `json:"threshold"`
		QuorumMet bool    `json:"quorum_met"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		return "decode-error"
	}
	if got.Threshold == 0 && !got.QuorumMet {
		return "coldstart"
	}
	return headers(strconv.FormatFloat(got.Threshold, 'f', -1, 64), strconv.FormatBool(got.QuorumMet))
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64*1024), 1024*1024)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		f := strings.Split(in.Text(), "\t")
		switch {
		case f[0] == "H" && len(f) == 3:
			fmt.Fprintln(out, headers(f[1], f[2]))
		case f[0] == "B" && len(f) == 2:
			fmt.Fprintln(out, body(f[1]))
		case f[0] == "Q" && len(f) == 2:
			fmt.Fprintln(out, url.Values{"cluster_id": {f[1]}}.Encode())
		default:
			fmt.Fprintln(out, "bad-case")
		}
	}
}
