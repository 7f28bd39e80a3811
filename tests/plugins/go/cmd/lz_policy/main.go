// Command lz_policy is a LinkZone direct-mode tool (seed linkzone-ai-tool-plugins.md,
// 直接调用模式 — `ai.tool` with the policies of "tool 字段说明", plus `triggers` and
// handleEvent) whose name and `ai.tool` policy come from the environment: the Go twin of
// tests/plugins/lz_policy.py and lz_policy.js, for the broker's policy and trigger tests
// (tests/integration/inject.rs). Same environment, same answers:
//
//	LZ_NAME     plugin and tool name (default `policy`)
//	LZ_POLICY   JSON merged into `ai.tool`, e.g. {"max_calls": 1} or {"chainable": false}
//	LZ_TRIGGERS JSON list of LinkZone triggers, e.g. [{"type": 1, "pattern": "weather"}]
//
// executeTool sleeps first when `what` is `sleep:<ms>` (until the broker cancels the
// call), then answers `<name> ran #<n> for <user>: <args as JSON>` (n counts this
// process's calls; JSON as Python's json.dumps(args, sort_keys=True) writes it).
// handleEvent replies `<name> got <params as JSON> from <user>` (json.dumps(params,
// ensure_ascii=False)) and, when the message contains "twice", a second reply
// `<name> again`.
//
// LinkZone's executeTool(sender, args) gets the caller from the sender; a Go tool
// handler gets it from hearth.CallFromContext(ctx).Caller().
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hearth-dev/hearth/sdk-go/hearth"
	"github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
)

// PolicyPlugin is the seed-shaped plugin: metadata read from the environment.
type PolicyPlugin struct {
	name     string
	triggers []sdk.Trigger
	tool     sdk.AITool
	calls    atomic.Int64
}

// newPolicyPlugin builds the metadata from LZ_NAME, LZ_POLICY and LZ_TRIGGERS.
func newPolicyPlugin() (*PolicyPlugin, error) {
	p := &PolicyPlugin{name: os.Getenv("LZ_NAME")}
	if p.name == "" {
		p.name = "policy"
	}
	p.tool = sdk.AITool{
		Parameters: []sdk.AIToolParameter{
			{Name: "what", Type: "string", Description: "anything", Required: false},
		},
		Usage:     p.name + ": a test tool",
		WhenToUse: "in tests",
	}
	if err := decodeStrict(os.Getenv("LZ_POLICY"), &p.tool); err != nil {
		return nil, fmt.Errorf("LZ_POLICY: %w", err)
	}
	if err := decodeStrict(os.Getenv("LZ_TRIGGERS"), &p.triggers); err != nil {
		return nil, fmt.Errorf("LZ_TRIGGERS: %w", err)
	}
	return p, nil
}

// decodeStrict merges JSON text (nothing when empty) into v; unknown keys are errors,
// so a misspelt policy fails the plugin instead of being ignored.
func decodeStrict(text string, v any) error {
	if strings.TrimSpace(text) == "" {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// Name is the plugin's name (LZ_NAME).
func (p *PolicyPlugin) Name() string { return p.name }

// Start registers the tool named like the plugin with its ai.tool, and the triggers.
func (p *PolicyPlugin) Start(s *sdk.PluginSDK) error {
	if err := s.RegisterAIToolContext(p.name, p.tool, p.executeTool); err != nil {
		return err
	}
	for _, t := range p.triggers {
		if err := s.RegisterTrigger(t, p.handleEvent); err != nil {
			return err
		}
	}
	return nil
}

// Stop has nothing to release.
func (p *PolicyPlugin) Stop() error { return nil }

func (p *PolicyPlugin) executeTool(ctx context.Context, args map[string]interface{}) (interface{}, error) {
	what, _ := args["what"].(string)
	if ms, ok := strings.CutPrefix(what, "sleep:"); ok {
		n, err := strconv.Atoi(ms)
		if err != nil {
			return nil, fmt.Errorf("bad sleep %q: %v", ms, err)
		}
		select {
		case <-time.After(time.Duration(n) * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	n := p.calls.Add(1)
	user := hearth.CallFromContext(ctx).Caller().UserID
	return map[string]interface{}{
		"success": true,
		"content": fmt.Sprintf("%s ran #%d for %s: %s", p.name, n, user, pyJSON(args, true)),
	}, nil
}

func (p *PolicyPlugin) handleEvent(sender *sdk.Sender) error {
	params := make([]interface{}, 0, len(sender.Params()))
	for _, v := range sender.Params() {
		params = append(params, v)
	}
	user := sender.Caller().UserID
	if err := sender.Reply(fmt.Sprintf("%s got %s from %s", p.name, pyJSON(params, false), user)); err != nil {
		return err
	}
	if strings.Contains(sender.Message(), "twice") {
		return sender.Reply(p.name + " again")
	}
	return nil
}

func main() {
	p, err := newPolicyPlugin()
	if err != nil {
		fmt.Fprintln(os.Stderr, "lz_policy:", err)
		os.Exit(hearth.ExitConfig)
	}
	hearth.Serve(p)
}

// pyJSON is v (a decoded JSON value) as Python's json.dumps writes it: ", " and ": "
// separators, keys sorted, integral numbers without a fraction; with ensureASCII (the
// default of json.dumps) non-ASCII characters as \uXXXX escapes, else as they are
// (ensure_ascii=False).
func pyJSON(v interface{}, ensureASCII bool) string {
	var b strings.Builder
	writePy(&b, v, ensureASCII)
	return b.String()
}

func writePy(b *strings.Builder, v interface{}, ensureASCII bool) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e16 {
			b.WriteString(strconv.FormatInt(int64(x), 10))
		} else {
			b.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
		}
	case string:
		writePyString(b, x, ensureASCII)
	case []interface{}:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writePy(b, e, ensureASCII)
		}
		b.WriteByte(']')
	case map[string]interface{}:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writePyString(b, k, ensureASCII)
			b.WriteString(": ")
			writePy(b, x[k], ensureASCII)
		}
		b.WriteByte('}')
	default:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(x); err != nil {
			fmt.Fprintf(b, "%q", fmt.Sprint(x))
			return
		}
		b.WriteString(strings.TrimSuffix(buf.String(), "\n"))
	}
}

// writePyString writes s as a JSON string the way Python's json module does.
func writePyString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case ensureASCII && r > 0x7e:
				if r > 0xffff {
					r1, r2 := utf16Pair(r)
					fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				var buf [utf8.UTFMax]byte
				b.Write(buf[:utf8.EncodeRune(buf[:], r)])
			}
		}
	}
	b.WriteByte('"')
}

func utf16Pair(r rune) (rune, rune) {
	r -= 0x10000
	return 0xd800 + (r>>10)&0x3ff, 0xdc00 + r&0x3ff
}
