package sdk_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hearth-dev/hearth/sdk-go/cyrene/sdk"
	"github.com/hearth-dev/hearth/sdk-go/hearth"
	"github.com/hearth-dev/hearth/sdk-go/hearthtest"
)

// ---- the seed's minimal example, unchanged but for the import path ----

type HelloPlugin struct{}

func (p *HelloPlugin) Metadata() sdk.PluginMetadata {
	return sdk.PluginMetadata{
		Name: "hello", Version: "1.0.0", Author: "your-name",
		Description: "示例插件：向用户问好",
	}
}

func (p *HelloPlugin) Init(ctx context.Context, cfg sdk.PluginConfig) error { return nil }
func (p *HelloPlugin) Start(ctx context.Context, host sdk.HostAPI) error    { return nil }
func (p *HelloPlugin) Stop(ctx context.Context) error                       { return nil }

func (p *HelloPlugin) Tools() []sdk.Tool {
	return []sdk.Tool{&HelloTool{}}
}

type HelloTool struct{}

func (t *HelloTool) Definition() sdk.ToolDefinition {
	return sdk.ToolDefinition{
		Name:        "hello",
		Description: "向用户打招呼。当用户说你好/嗨/哈喽时调用。",
		Parameters: map[string]interface{}{
			"type": "object",
			"properties": map[string]interface{}{
				"name": map[string]string{"type": "string", "description": "用户名字（可选）"},
			},
		},
	}
}

func (t *HelloTool) Execute(ctx context.Context, args map[string]interface{}) (*sdk.ToolResult, error) {
	name, _ := args["name"].(string)
	if name == "" {
		name = "开拓者"
	}
	return &sdk.ToolResult{Success: true, Output: name + "，昔涟向你问好♪"}, nil
}

func (t *HelloTool) Validate(args map[string]interface{}) error { return nil }

func TestSeedHelloPlugin(t *testing.T) {
	b := hearthtest.StartWith(t, &HelloPlugin{}, hearthtest.Options{Name: "hello", Quiet: true})
	reg := b.Registration()
	if reg.Plugin.Name != "hello" || reg.Plugin.Version != "1.0.0" || reg.Plugin.Author != "your-name" || reg.Plugin.Description != "示例插件：向用户问好" {
		t.Errorf("plugin info %v", reg.Plugin)
	}
	if tool := reg.Tools[0]; tool.Name != "hello" || !strings.Contains(tool.ParametersJson, `"name":{"description":"用户名字（可选）","type":"string"}`) {
		t.Errorf("tool %v", tool)
	}
	for args, want := range map[string]string{`{"name":"三月七"}`: "三月七，昔涟向你问好♪", `{}`: "开拓者，昔涟向你问好♪"} {
		r, err := b.Call("hello", args)
		if err != nil || !r.Success || r.Content != want {
			t.Errorf("%s: %+v %v", args, r, err)
		}
	}
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
}

// ---- a plugin exercising the rest ----

type funcTool struct {
	def      sdk.ToolDefinition
	validate func(map[string]interface{}) error
	execute  func(context.Context, map[string]interface{}) (*sdk.ToolResult, error)
}

func (f *funcTool) Definition() sdk.ToolDefinition { return f.def }
func (f *funcTool) Validate(a map[string]interface{}) error {
	if f.validate == nil {
		return nil
	}
	return f.validate(a)
}
func (f *funcTool) Execute(ctx context.Context, a map[string]interface{}) (*sdk.ToolResult, error) {
	return f.execute(ctx, a)
}

func tool(name string, exec func(context.Context, map[string]interface{}) (*sdk.ToolResult, error)) *funcTool {
	return &funcTool{def: sdk.ToolDefinition{Name: name, Description: name}, execute: exec}
}

type full struct {
	cfg      sdk.PluginConfig
	host     sdk.HostAPI
	tools    []sdk.Tool
	start    func(host sdk.HostAPI) error
	stopped  atomic.Bool
	deadline atomic.Bool
}

func (p *full) Metadata() sdk.PluginMetadata { return sdk.PluginMetadata{Version: "2.0"} }
func (p *full) Init(_ context.Context, cfg sdk.PluginConfig) error {
	p.cfg = cfg
	return nil
}
func (p *full) Start(_ context.Context, host sdk.HostAPI) error {
	p.host = host
	if p.start != nil {
		return p.start(host)
	}
	return nil
}
func (p *full) Tools() []sdk.Tool { return p.tools }
func (p *full) Stop(ctx context.Context) error {
	_, ok := ctx.Deadline()
	p.deadline.Store(ok)
	p.stopped.Store(true)
	return nil
}

func TestValidateExecuteAndResults(t *testing.T) {
	cancelled := make(chan error, 1)
	started := make(chan struct{})
	p := &full{tools: []sdk.Tool{
		&funcTool{
			def:      sdk.ToolDefinition{Name: "checked", Description: "d"},
			validate: func(a map[string]interface{}) error { return errors.New("n must be positive") },
			execute: func(context.Context, map[string]interface{}) (*sdk.ToolResult, error) {
				return nil, errors.New("executed despite a failed Validate")
			},
		},
		tool("fails", func(context.Context, map[string]interface{}) (*sdk.ToolResult, error) {
			return nil, errors.New("upstream 503")
		}),
		tool("nothing", func(context.Context, map[string]interface{}) (*sdk.ToolResult, error) { return nil, nil }),
		tool("silent", func(context.Context, map[string]interface{}) (*sdk.ToolResult, error) { return &sdk.ToolResult{}, nil }),
		tool("reported", func(context.Context, map[string]interface{}) (*sdk.ToolResult, error) {
			return &sdk.ToolResult{ToolName: "x", Success: false, Output: "partial", Error: "quota"}, nil
		}),
		tool("panics", func(context.Context, map[string]interface{}) (*sdk.ToolResult, error) { panic(errors.New("nil map")) }),
		tool("slow", func(ctx context.Context, _ map[string]interface{}) (*sdk.ToolResult, error) {
			close(started)
			<-ctx.Done()
			cancelled <- ctx.Err()
			return &sdk.ToolResult{Success: true}, nil
		}),
		tool("who", func(ctx context.Context, _ map[string]interface{}) (*sdk.ToolResult, error) {
			c := hearth.CallFromContext(ctx)
			c.Progress("working", 0.5)
			return &sdk.ToolResult{Success: true, Output: c.Tool() + " for " + c.Caller().UserID}, nil
		}),
	}}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Name: "cy", DataDir: "/data/cy", Quiet: true})
	if p.cfg != (sdk.PluginConfig{Name: "cy", DataDir: "/data/cy"}) || p.host.PluginName() != "cy" {
		t.Errorf("config %+v, plugin name %q", p.cfg, p.host.PluginName())
	}
	if reg := b.Registration(); reg.Plugin.Name != "cy" || reg.Plugin.Version != "2.0" || reg.Tools[0].ParametersJson != `{"type":"object","properties":{}}` {
		t.Errorf("registration %v", reg)
	}
	cases := map[string]hearthtest.Result{
		"checked":  {Error: "invalid arguments for tool checked: n must be positive"},
		"fails":    {Error: "upstream 503"},
		"nothing":  {Error: "tool nothing returned no result"},
		"silent":   {Error: "tool silent failed without an error message"},
		"reported": {Content: "partial", Error: "quota"},
		"panics":   {Error: "tool panics panicked: nil map"},
	}
	for name, want := range cases {
		r, err := b.Call(name, nil)
		if err != nil || r.Success != want.Success || r.Content != want.Content || r.Error != want.Error {
			t.Errorf("%s: got %+v %v, want %+v", name, r, err, want)
		}
	}
	r, err := b.Call("who", nil, hearthtest.WithCaller(hearth.Caller{UserID: "u7"}))
	if err != nil || r.Content != "who for u7" || len(r.Progress) != 1 {
		t.Errorf("who: %+v %v", r, err)
	}
	c, err := b.Invoke("slow", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	c.Cancel("timeout")
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("ctx.Err() = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Execute's context was not cancelled")
	}
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if !p.stopped.Load() || !p.deadline.Load() {
		t.Errorf("Stop ran %v, with a deadline %v", p.stopped.Load(), p.deadline.Load())
	}
}

func TestHostAPIRegisterTool(t *testing.T) {
	var host sdk.HostAPI
	p := &full{start: func(h sdk.HostAPI) error {
		host = h
		return h.RegisterTool(tool("from_start", func(context.Context, map[string]interface{}) (*sdk.ToolResult, error) {
			return &sdk.ToolResult{Success: true, Output: "started"}, nil
		}))
	}}
	p.tools = []sdk.Tool{tool("grow", func(context.Context, map[string]interface{}) (*sdk.ToolResult, error) {
		if err := host.RegisterTool(tool("grown", func(context.Context, map[string]interface{}) (*sdk.ToolResult, error) {
			return &sdk.ToolResult{Success: true, Output: "grown"}, nil
		})); err != nil {
			return nil, err
		}
		return &sdk.ToolResult{Success: true}, nil
	})}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Quiet: true})
	if got := b.Tools(); !slices.Equal(got, []string{"from_start", "grow"}) {
		t.Errorf("tools %v", got)
	}
	if r, err := b.Call("grow", nil); err != nil || !r.Success {
		t.Fatalf("grow: %+v %v", r, err)
	}
	if r, err := b.Call("grown", nil); err != nil || r.Content != "grown" {
		t.Errorf("grown: %+v %v", r, err)
	}
	if r, _ := b.Call("grow", nil); r.Success || r.Error != `plugin test: tool name "grown" is registered twice` {
		t.Errorf("second grow: %+v", r)
	}
	if err := host.UnregisterTool("grown"); err != nil {
		t.Errorf("unregister: %v", err)
	}
	if got := b.Tools(); !slices.Equal(got, []string{"from_start", "grow"}) {
		t.Errorf("tools after unregister %v", got)
	}
	if err := host.RegisterTool(tool("bad name", nil)); err == nil || !strings.Contains(err.Error(), `tool "bad name": name contains ' '`) {
		t.Errorf("bad name: %v", err)
	}
}

func TestPluginsWithoutStopAndBadTools(t *testing.T) {
	// The embedded interface hides HelloPlugin's Stop: the seed's interface only.
	b := hearthtest.StartWith(t, &struct{ sdk.Plugin }{&HelloPlugin{}}, hearthtest.Options{Quiet: true})
	if err := b.Shutdown(); err != nil {
		t.Errorf("a plugin without Stop: %v", err)
	}

	dup := &full{tools: []sdk.Tool{tool("same", nil), tool("same", nil), tool("", nil)}}
	err := hearthtest.Launch(t, dup, hearthtest.Options{Quiet: true}).Wait()
	var exit *hearth.ExitError
	if !errors.As(err, &exit) || exit.Code != hearth.ExitConfig ||
		!strings.Contains(err.Error(), `tool name "same" is registered twice`) || !strings.Contains(err.Error(), "Tools()[2]: tool name is empty") {
		t.Errorf("bad tools: %v", err)
	}

	failing := &full{start: func(sdk.HostAPI) error { return errors.New("no database") }}
	if err := hearthtest.Launch(t, failing, hearthtest.Options{Quiet: true}).Wait(); err == nil || err.Error() != "plugin test: start failed: no database" {
		t.Errorf("failing Start: %v", err)
	}
}
