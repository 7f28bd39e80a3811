package sdk

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Built-in plugins of the seed's kernel register a factory from init() instead of
// exporting NewPlugin from a `.so` (homeagent-plugin-sdk-api.md, "内置插件 vs 动态插件":
// 注册方式 init() → RegisterFactory). RegisterFactory keeps that code unchanged;
// hearth.Serve(sdk.Registered) serves the factory registered under the broker's name
// for the plugin:
//
//	import _ "example.com/homeagent/internal/plugins/weather" // its init() registers "weather"
//
//	func main() { hearth.Serve(sdk.Registered) }

var (
	factoriesMu sync.Mutex
	factories   = map[string]Factory{}
	factoryErrs []string
)

// RegisterFactory records factory as the built-in plugin name (the seed's built-in
// registration, called from init()). Registering a name twice, an empty name or a nil
// factory is an error reported when the plugin is served (exit code 2, naming it).
func RegisterFactory(name string, factory Factory) {
	factoriesMu.Lock()
	defer factoriesMu.Unlock()
	switch {
	case name == "":
		factoryErrs = append(factoryErrs, "RegisterFactory: empty plugin name")
	case factory == nil:
		factoryErrs = append(factoryErrs, fmt.Sprintf("RegisterFactory(%q): nil factory", name))
	case factories[name] != nil:
		factoryErrs = append(factoryErrs, fmt.Sprintf("RegisterFactory(%q): registered twice", name))
	default:
		factories[name] = factory
	}
}

// RegisteredFactories is the type of Registered.
type RegisteredFactories struct{}

// Registered, passed to hearth.Serve, serves the factory RegisterFactory recorded
// under the plugin's name (HEARTH_PLUGIN, the plugin's folder name) — or the only one
// registered, whatever its name. It fails (exit code 2) naming the registered
// factories when none matches, and on a RegisterFactory error.
var Registered RegisteredFactories

// factory is the registered factory for the plugin named name.
func (RegisteredFactories) factory(name string) (Factory, error) {
	factoriesMu.Lock()
	defer factoriesMu.Unlock()
	if len(factoryErrs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(factoryErrs, "; "))
	}
	if f := factories[name]; f != nil {
		return f, nil
	}
	if len(factories) == 1 {
		for _, f := range factories {
			return f, nil
		}
	}
	names := make([]string, 0, len(factories))
	for n := range factories {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("no factory registered (RegisterFactory is called from the plugin package's init(); is it imported?)")
	}
	return nil, fmt.Errorf("no factory registered as %q (registered: %s)", name, strings.Join(names, ", "))
}
