// Tests of __NAME__, in process with the Go SDK's hearthtest harness (a fake broker on
// an in-memory connection): no broker needed.
package main

import (
	"strings"
	"testing"

	"github.com/hearth-dev/hearth/sdk-go/hearthtest"
)

func TestGreetsByName(t *testing.T) {
	plugin := hearthtest.Start(t, &Greeter{})
	if tools := plugin.Tools(); len(tools) != 1 || tools[0] != "__TOOL__" {
		t.Fatalf("registered %v", tools)
	}
	result, err := plugin.Call("__TOOL__", map[string]interface{}{"name": "Ann"})
	if err != nil || !result.Success || result.Content != "Hello, Ann." {
		t.Fatalf("got %+v, %v", result, err)
	}
	result, err = plugin.Call("__TOOL__", map[string]interface{}{"name": "Ann", "excited": true})
	if err != nil || result.Content != "Hello, Ann!" {
		t.Fatalf("got %+v, %v", result, err)
	}
}

func TestAMissingNameIsAnErrorResult(t *testing.T) {
	plugin := hearthtest.Start(t, &Greeter{})
	result, err := plugin.Call("__TOOL__", map[string]interface{}{})
	if err != nil || result.Success || !strings.Contains(result.Error, "name") {
		t.Fatalf("got %+v, %v", result, err)
	}
}
