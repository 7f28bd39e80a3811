// __NAME__: a Hearth plugin in Go (HomeAgent style: Name/Start/Stop and
// sdk.RegisterTool, as a seed HomeAgent plugin). The broker builds it with `go build`
// (plugin.json `build`) and runs bin/plugin; `go test ./...` tests it without a broker.
package main

import (
	"errors"
	"fmt"

	"github.com/hearth-dev/hearth/sdk-go/hearth"
	"github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
)

// Greeter is the plugin: it registers its tools in Start.
type Greeter struct{}

// Name is the plugin's name.
func (p *Greeter) Name() string { return "__NAME__" }

// Start registers the plugin's tool.
func (p *Greeter) Start(s *sdk.PluginSDK) error {
	return s.RegisterTool("__TOOL__", sdk.ToolDef{
		Description: "Greet someone by name",
		Parameters: map[string]interface{}{
			"type": "object",
			"properties": map[string]interface{}{
				"name":    map[string]interface{}{"type": "string", "description": "Who to greet"},
				"excited": map[string]interface{}{"type": "boolean", "description": "End with an exclamation mark"},
			},
			"required": []interface{}{"name"},
		},
	}, p.greet)
}

// Stop releases what Start took (nothing here).
func (p *Greeter) Stop() error { return nil }

func (p *Greeter) greet(args map[string]interface{}) (interface{}, error) {
	name, _ := args["name"].(string)
	if name == "" {
		return nil, errors.New("name must be a non-empty string")
	}
	mark := "."
	if excited, _ := args["excited"].(bool); excited {
		mark = "!"
	}
	return fmt.Sprintf("Hello, %s%s", name, mark), nil
}

func main() {
	hearth.Serve(&Greeter{})
}
