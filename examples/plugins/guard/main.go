// Command guard is a HomeAgent-style plugin in Go, ported from the examples of the
// HomeAgent PluginSDK seed (homeagent-plugin-sdk-api.md): the on_input hook that
// blocks listed users, the pre_action hook that adds the current time, a setting
// registered with a ConfigDef, and tools that change that setting. Under Hearth it runs
// out of process: the only changes to seed code are the import path and main().
package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hearth-dev/hearth/sdk-go/hearth"
	"github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
)

// GuardPlugin keeps a list of blocked users in its settings (`blocked_users`, comma
// separated) and answers them with `block_message` instead of the LLM.
type GuardPlugin struct {
	sdk *sdk.PluginSDK
}

// Name is the plugin's name, as in plugin.json.
func (p *GuardPlugin) Name() string { return "guard" }

// Start registers the settings, the tools and the two stage hooks.
func (p *GuardPlugin) Start(s *sdk.PluginSDK) error {
	p.sdk = s
	s.Settings().RegisterDef(sdk.ConfigDef{
		Key:         "blocked_users",
		Type:        "string",
		Default:     "",
		DisplayName: "Blocked users",
		Description: "Comma-separated user ids that get block_message instead of an answer",
	})
	s.Settings().RegisterDef(sdk.ConfigDef{
		Key:         "block_message",
		Type:        "string",
		Default:     "已被限制使用",
		DisplayName: "Block message",
		Description: "The answer a blocked user gets",
	})

	user := map[string]interface{}{
		"type": "object",
		"properties": map[string]interface{}{
			"user": map[string]interface{}{"type": "string", "description": "The user id"},
		},
		"required": []string{"user"},
	}
	if err := s.RegisterTool("guard_block", sdk.ToolDef{
		Description: "Blocks a user: their messages get the block message instead of an answer.",
		Parameters:  user,
	}, func(args map[string]interface{}) (interface{}, error) {
		return p.update(args, true)
	}); err != nil {
		return err
	}
	if err := s.RegisterTool("guard_unblock", sdk.ToolDef{
		Description: "Unblocks a user.",
		Parameters:  user,
	}, func(args map[string]interface{}) (interface{}, error) {
		return p.update(args, false)
	}); err != nil {
		return err
	}
	if err := s.RegisterTool("guard_list", sdk.ToolDef{
		Description: "Lists the blocked users.",
		Parameters:  map[string]interface{}{"type": "object", "properties": map[string]interface{}{}},
	}, func(map[string]interface{}) (interface{}, error) {
		blocked, err := p.blocked()
		if err != nil {
			return nil, err
		}
		return map[string]interface{}{"blocked": blocked}, nil
	}); err != nil {
		return err
	}

	// on_input: block listed users (the seed's first stage example).
	s.RegisterStage(sdk.StageOnInput, func(ctx *sdk.StageContext) error {
		blocked, err := p.blocked()
		if err != nil {
			return err
		}
		for _, u := range blocked {
			if u == ctx.UserID {
				msg, _ := s.Settings().Get("block_message")
				resp, _ := msg.(string)
				ctx.Response = &resp
				return nil
			}
		}
		return nil
	})
	// pre_action: add the current time for the LLM (the seed's second stage example).
	s.RegisterStage(sdk.StagePreAction, func(ctx *sdk.StageContext) error {
		ctx.Lock()
		ctx.ContextMsgs = append(ctx.ContextMsgs, map[string]interface{}{
			"role":    "system",
			"content": "当前时间: " + time.Now().Format("15:04"),
		})
		ctx.Unlock()
		return nil
	})
	return nil
}

// Stop has nothing to release.
func (p *GuardPlugin) Stop() error { return nil }

// blocked reads the list from the settings.
func (p *GuardPlugin) blocked() ([]string, error) {
	v, err := p.sdk.Settings().Get("blocked_users")
	if err != nil {
		return nil, err
	}
	text, _ := v.(string)
	var users []string
	for _, u := range strings.Split(text, ",") {
		if u = strings.TrimSpace(u); u != "" {
			users = append(users, u)
		}
	}
	return users, nil
}

// update adds (block) or removes the user of args and stores the list.
func (p *GuardPlugin) update(args map[string]interface{}, block bool) (interface{}, error) {
	who, _ := args["user"].(string)
	who = strings.TrimSpace(who)
	if who == "" || strings.Contains(who, ",") {
		return map[string]interface{}{"isError": true, "content": "user must be a non-empty id without commas"}, nil
	}
	current, err := p.blocked()
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, u := range current {
		set[u] = true
	}
	if block {
		set[who] = true
	} else {
		delete(set, who)
	}
	users := make([]string, 0, len(set))
	for u := range set {
		users = append(users, u)
	}
	sort.Strings(users)
	if err := p.sdk.Settings().Set("blocked_users", strings.Join(users, ",")); err != nil {
		return nil, err
	}
	verb := "unblocked"
	if block {
		verb = "blocked"
	}
	return fmt.Sprintf("%s %s; blocked now: %s", verb, who, strings.Join(users, ", ")), nil
}

func main() {
	hearth.Serve(&GuardPlugin{})
}
