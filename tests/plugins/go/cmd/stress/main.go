// Command stress is the Go SDK's stress / fault-injection plugin (spec:
// tests/plugins/STRESS.md), the twin of tests/plugins/stress.py, stress.js and
// sdk-rust/examples/stress.rs, so the broker's supervision tests drive Go with the same
// table. A HomeAgent-style plugin.
//
// Tool prefix P = $HEARTH_TOOL_PREFIX if set and non-empty, else $HEARTH_PLUGIN.
// Go specifics: P_fail panics (the SDK turns it into an error result naming the tool);
// P_hang stops the whole process with SIGSTOP (again if it is ever resumed), so no
// goroutine answers pings;
// exit_after_hello and never_register use hearth.Options.AfterHello, wrong_version
// hearth.Options.ProtocolVersion.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/hearth-dev/hearth/sdk-go/hearth"
	"github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
)

var known = map[string]bool{
	"exit_before_hello": true, "hang_before_hello": true, "exit_after_hello": true,
	"never_register": true, "wrong_version": true, "crash_mid_call": true, "flood": true,
	"junk_stdout": true, "grandchild": true, "many_tools": true, "bad_schema": true,
}

const manyTools = 2000

type stress struct {
	name   string
	prefix string
	faults map[string]bool
}

func errf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "stress: "+format+"\n", args...)
}

func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}

// freeze stops the whole process with SIGSTOP, so no goroutine answers pings, until
// it is killed. A stray SIGCONT (a CI run once saw the process resume 3.5 ms after
// stopping itself) only stops it again.
func freeze() {
	for {
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		time.Sleep(time.Millisecond)
	}
}

func (p *stress) junk(what string) {
	if p.faults["junk_stdout"] {
		os.Stdout.Write([]byte(fmt.Sprintf("*** stress plugin %s banner: %s ***\n", p.name, what) +
			"\xff\xfe\xc3\x28 invalid utf-8 \x80\x80\n"))
	}
}

// flood writes a 10 MiB line, an invalid UTF-8 line, then ~1 MB/s of 1 KiB lines to
// stdout and stderr each, until killed.
func flood() {
	os.Stdout.Write(append([]byte(strings.Repeat("x", 10<<20)), '\n'))
	os.Stdout.Write([]byte("\xff\xfe\xc3\x28\x80 flood: invalid utf-8 line \xed\xa0\x80\n"))
	line := "flood " + strings.Repeat(".", 1017) + "\n"
	block := []byte(strings.Repeat(line, 32))
	period := 32 * time.Second / 1024
	next := time.Now()
	for {
		os.Stdout.Write(block)
		os.Stderr.Write(block)
		next = next.Add(period)
		time.Sleep(time.Until(next))
	}
}

func (p *stress) Name() string { return p.name }

func (p *stress) Stop() error { return nil }

var noArgs = map[string]interface{}{"type": "object", "properties": map[string]interface{}{}}

func (p *stress) Start(s *sdk.PluginSDK) error {
	reg := func(tool, description string, params map[string]interface{}, h sdk.ToolHandler) error {
		return s.RegisterTool(p.prefix+"_"+tool, sdk.ToolDef{Description: description, Parameters: params}, h)
	}
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	must(reg("echo", "Echoes its arguments.", map[string]interface{}{"type": "object"},
		func(args map[string]interface{}) (interface{}, error) {
			p.junk("call")
			return args, nil
		}))
	must(s.RegisterToolContext(p.prefix+"_sleep", sdk.ToolDef{
		Description: "Sleeps `ms` milliseconds, sending Progress every `progress_ms`.",
		Parameters: map[string]interface{}{
			"type": "object",
			"properties": map[string]interface{}{
				"ms":          map[string]interface{}{"type": "integer", "minimum": 0},
				"progress_ms": map[string]interface{}{"type": "integer", "minimum": 1},
			},
			"required": []string{"ms"},
		},
	}, p.sleep))
	must(reg("fail", "Fails on purpose.", noArgs, func(map[string]interface{}) (interface{}, error) {
		p.junk("call")
		panic(p.prefix + "_fail: failing on purpose")
	}))
	must(reg("big", "Returns `bytes` bytes of x.", map[string]interface{}{
		"type":       "object",
		"properties": map[string]interface{}{"bytes": map[string]interface{}{"type": "integer", "minimum": 0}},
		"required":   []string{"bytes"},
	}, func(args map[string]interface{}) (interface{}, error) {
		p.junk("call")
		n, _ := args["bytes"].(float64)
		return strings.Repeat("x", int(n)), nil
	}))
	must(reg("hang", "Freezes the whole plugin process.", noArgs, func(map[string]interface{}) (interface{}, error) {
		p.junk("call")
		errf("%s_hang: stopping the whole process (SIGSTOP)", p.prefix)
		freeze()
		return nil, nil // not reached
	}))
	if p.faults["many_tools"] {
		for i := 0; i < manyTools; i++ {
			own := fmt.Sprintf("%s_t%d", p.prefix, i)
			must(reg(fmt.Sprintf("t%d", i), "Answers its own name.", noArgs,
				func(map[string]interface{}) (interface{}, error) { return own, nil }))
		}
	}
	if p.faults["bad_schema"] {
		// The SDK refuses it locally, naming the tool; the plugin serves the rest.
		if err := reg("bad_schema", "Registered with an invalid schema.",
			map[string]interface{}{"type": 12}, func(args map[string]interface{}) (interface{}, error) { return args, nil }); err != nil {
			errf("%v", err)
		}
	}
	return nil
}

func (p *stress) sleep(ctx context.Context, args map[string]interface{}) (interface{}, error) {
	p.junk("call")
	msF, _ := args["ms"].(float64)
	ms := time.Duration(msF) * time.Millisecond
	call := hearth.CallFromContext(ctx)
	start := time.Now()
	end := time.NewTimer(ms)
	defer end.Stop()
	var crash <-chan time.Time
	if p.faults["crash_mid_call"] {
		crash = time.After(ms / 2)
	}
	var tick <-chan time.Time
	if step, ok := args["progress_ms"].(float64); ok && step > 0 {
		t := time.NewTicker(time.Duration(step) * time.Millisecond)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-end.C:
			return fmt.Sprintf("slept %d ms", ms.Milliseconds()), nil
		case <-crash:
			errf("%s_sleep: crashing mid-call (crash_mid_call)", p.prefix)
			os.Exit(1)
		case <-tick:
			done := time.Since(start)
			fraction := 1.0
			if ms > 0 {
				fraction = min(float64(done)/float64(ms), 1)
			}
			call.Progress(fmt.Sprintf("slept %d of %d ms", done.Milliseconds(), ms.Milliseconds()), fraction)
		case <-ctx.Done():
			fmt.Printf("%s_sleep: cancelled\n", p.prefix)
			return nil, ctx.Err()
		}
	}
}

func main() {
	name := os.Getenv("HEARTH_PLUGIN")
	if name == "" {
		name = "stress"
	}
	prefix := os.Getenv("HEARTH_TOOL_PREFIX")
	if prefix == "" {
		prefix = name
	}
	faults := map[string]bool{}
	for _, f := range strings.Split(os.Getenv("HEARTH_FAULT"), ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !known[f] {
			errf("unknown fault %q ignored", f)
		}
		faults[f] = true
	}
	if faults["exit_before_hello"] {
		errf("exit_before_hello")
		os.Exit(1)
	}
	if faults["hang_before_hello"] {
		errf("hang_before_hello: sleeping until killed")
		sleepForever()
	}
	if faults["grandchild"] {
		child := exec.Command("sleep", "3600")
		child.Stdout, child.Stderr = os.Stdout, os.Stderr
		if err := child.Start(); err != nil {
			errf("grandchild: %v", err)
			os.Exit(1)
		}
		fmt.Printf("GRANDCHILD_PID=%d\n", child.Process.Pid)
	}
	p := &stress{name: name, prefix: prefix, faults: faults}
	p.junk("start")
	if faults["flood"] {
		go flood()
	}
	var opts hearth.Options
	if faults["wrong_version"] {
		opts.ProtocolVersion = "99.0.0"
	}
	switch {
	case faults["exit_after_hello"]:
		opts.AfterHello = func() {
			errf("exit_after_hello: Hello sent; exiting with status 1 without Register")
			os.Exit(1)
		}
	case faults["never_register"]:
		opts.AfterHello = func() {
			errf("never_register: Hello sent; never registering, frozen until killed")
			freeze()
		}
	}
	hearth.ServeWith(p, opts)
}
