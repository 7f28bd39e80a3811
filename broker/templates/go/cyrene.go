// __NAME__: a Hearth plugin in Go (Cyrene style: Metadata/Init/Start/Stop/Tools and a
// Tool with Definition, Validate and Execute, as a seed Cyrene plugin). The broker
// builds it with `go build` (plugin.json `build`) and runs bin/plugin; `go test ./...`
// tests it without a broker.
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/hearth-dev/hearth/sdk-go/cyrene/sdk"
	"github.com/hearth-dev/hearth/sdk-go/hearth"
)

// GreetTool greets someone by name.
type GreetTool struct{}

// Definition is the tool's name, description and JSON Schema.
func (GreetTool) Definition() sdk.ToolDefinition {
	return sdk.ToolDefinition{
		Name:        "__TOOL__",
		Description: "Greet someone by name",
		Parameters: map[string]interface{}{
			"type": "object",
			"properties": map[string]interface{}{
				"name":    map[string]interface{}{"type": "string", "description": "Who to greet"},
				"excited": map[string]interface{}{"type": "boolean", "description": "End with an exclamation mark"},
			},
			"required": []interface{}{"name"},
		},
	}
}

// Validate checks the arguments before Execute.
func (GreetTool) Validate(args map[string]interface{}) error {
	if name, _ := args["name"].(string); name == "" {
		return errors.New("name must be a non-empty string")
	}
	return nil
}

// Execute greets.
func (GreetTool) Execute(ctx context.Context, args map[string]interface{}) (*sdk.ToolResult, error) {
	name, _ := args["name"].(string)
	mark := "."
	if excited, _ := args["excited"].(bool); excited {
		mark = "!"
	}
	return &sdk.ToolResult{ToolName: "__TOOL__", Success: true, Output: fmt.Sprintf("Hello, %s%s", name, mark)}, nil
}

// Greeter is the plugin: its metadata and its tools.
type Greeter struct{}

// Metadata is the plugin's name, version, author and description.
func (p *Greeter) Metadata() sdk.PluginMetadata {
	return sdk.PluginMetadata{Name: "__NAME__", Version: "0.1.0", Description: "__NAME__: says hello"}
}

// Init prepares the plugin (nothing to prepare here).
func (p *Greeter) Init(ctx context.Context, config sdk.PluginConfig) error { return nil }

// Start starts it with the host's services (settings, memory, …).
func (p *Greeter) Start(ctx context.Context, host sdk.HostAPI) error { return nil }

// Stop releases what Start took (nothing here).
func (p *Greeter) Stop(ctx context.Context) error { return nil }

// Tools is the plugin's tools.
func (p *Greeter) Tools() []sdk.Tool { return []sdk.Tool{GreetTool{}} }

func main() {
	hearth.Serve(&Greeter{})
}
