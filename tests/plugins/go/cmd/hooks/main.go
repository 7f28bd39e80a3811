// Command hooks is the Go stage-hook test plugin for the broker's pipeline tests, the
// twin of tests/plugins/hooks.js and sdk-rust/examples/hooks.rs (HomeAgent style).
// P = $HEARTH_PLUGIN.
//
//   - Tool `P_ping` (no parameters) answers "pong from P".
//   - $HOOKS, comma-separated directives, registered in the order given:
//   - `noop`: a hook at every stage that changes nothing (the benchmarks' hook cost).
//   - `trace`: a plain hook at every stage. on_input … before_output append "P:<stage>"
//     to `Extra["trace"]` (Extra becomes an object and trace an array if they are not);
//     after_output (read-only) prints `TRACE P after_output final=<final_text>`.
//   - `deny=<tool>`: before_toolcall; every tool call named <tool> gets Deny = true,
//     DenyReason = "not allowed by P".
//   - `own`: before_toolcall with own-tools scope; prints `OWN P <tool name>` for each
//     tool call in the context.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/hearth-dev/hearth/sdk-go/hearth"
	"github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
)

var stages = []sdk.Stage{sdk.StageOnInput, sdk.StagePreAction, sdk.StagePostAction,
	sdk.StageBeforeToolcall, sdk.StageAfterToolcall, sdk.StageBeforeOutput, sdk.StageAfterOutput}

type hooks struct {
	name       string
	directives []string
}

func (p *hooks) Name() string { return p.name }
func (p *hooks) Stop() error  { return nil }

func (p *hooks) Start(s *sdk.PluginSDK) error {
	err := s.RegisterTool(p.name+"_ping", sdk.ToolDef{
		Description: "Answers pong.",
		Parameters:  map[string]interface{}{"type": "object", "properties": map[string]interface{}{}},
	}, func(map[string]interface{}) (interface{}, error) { return "pong from " + p.name, nil })
	if err != nil {
		return err
	}
	for _, d := range p.directives {
		switch {
		case d == "noop":
			for _, stage := range stages {
				s.RegisterStage(stage, func(*sdk.StageContext) error { return nil })
			}
		case d == "trace":
			for _, stage := range stages {
				if stage == sdk.StageAfterOutput {
					s.RegisterStage(stage, func(c *sdk.StageContext) error {
						fmt.Printf("TRACE %s after_output final=%s\n", p.name, c.FinalText)
						return nil
					})
					continue
				}
				mark := fmt.Sprintf("%s:%s", p.name, stage)
				s.RegisterStage(stage, func(c *sdk.StageContext) error {
					c.Lock()
					defer c.Unlock()
					if c.Extra == nil {
						c.Extra = map[string]interface{}{}
					}
					trace, _ := c.Extra["trace"].([]interface{})
					c.Extra["trace"] = append(trace, mark)
					return nil
				})
			}
		case strings.HasPrefix(d, "deny="):
			tool := strings.TrimPrefix(d, "deny=")
			s.RegisterStage(sdk.StageBeforeToolcall, func(c *sdk.StageContext) error {
				for i := range c.ToolCalls {
					if c.ToolCalls[i].Name == tool {
						c.ToolCalls[i].Deny = true
						c.ToolCalls[i].DenyReason = "not allowed by " + p.name
					}
				}
				return nil
			})
		case d == "own":
			s.RegisterStageOwnTools(sdk.StageBeforeToolcall, func(c *sdk.StageContext) error {
				for _, t := range c.ToolCalls {
					fmt.Printf("OWN %s %s\n", p.name, t.Name)
				}
				return nil
			})
		default:
			return fmt.Errorf("hooks: unknown HOOKS directive %q", d)
		}
	}
	return nil
}

func main() {
	name := os.Getenv("HEARTH_PLUGIN")
	if name == "" {
		name = "hooks"
	}
	var directives []string
	for _, d := range strings.Split(os.Getenv("HOOKS"), ",") {
		if d = strings.TrimSpace(d); d != "" {
			directives = append(directives, d)
		}
	}
	hearth.Serve(&hooks{name: name, directives: directives})
}
