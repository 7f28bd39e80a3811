// Command hello_go is the Cyrene seed's minimal example (cyrene-plugin-development.md,
// "最小示例") served out of process by Hearth. The plugin code is the seed's, with two
// changes: the import path (sdk → github.com/hearth-dev/hearth/sdk-go/cyrene/sdk) and
// the tool's name (`hello_go`, because the Rust port of the same example already serves
// `hello` in examples/plugins). main() is the three lines that serve it.
package main

import (
	"context"

	"github.com/hearth-dev/hearth/sdk-go/cyrene/sdk"
	"github.com/hearth-dev/hearth/sdk-go/hearth"
)

type HelloPlugin struct{}

func (p *HelloPlugin) Metadata() sdk.PluginMetadata {
	return sdk.PluginMetadata{
		Name: "hello_go", Version: "1.0.0", Author: "your-name",
		Description: "示例插件：向用户问好",
	}
}

func (p *HelloPlugin) Init(ctx context.Context, cfg sdk.PluginConfig) error { return nil }
func (p *HelloPlugin) Start(ctx context.Context, host sdk.HostAPI) error    { return nil }
func (p *HelloPlugin) Stop(ctx context.Context) error                       { return nil }

func (p *HelloPlugin) Tools() []sdk.Tool {
	return []sdk.Tool{&HelloTool{}}
}

// --- Tool ---
type HelloTool struct{}

func (t *HelloTool) Definition() sdk.ToolDefinition {
	return sdk.ToolDefinition{
		Name:        "hello_go",
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

func main() {
	hearth.Serve(&HelloPlugin{})
}
