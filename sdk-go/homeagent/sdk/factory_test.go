package sdk_test

import (
	"strings"
	"testing"

	"github.com/hearth-dev/hearth/sdk-go/hearthtest"
	"github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
)

// builtin is a seed built-in plugin: one tool answering with its name.
func builtin(tool string) sdk.Factory {
	return func(name string, _ map[string]interface{}) (sdk.Plugin, error) {
		return &plugin{start: func(s *sdk.PluginSDK) error {
			return s.RegisterTool(tool, noArgs(), func(map[string]interface{}) (interface{}, error) {
				return tool + " of " + name, nil
			})
		}}, nil
	}
}

func TestRegisteredFactoriesServeTheOneNamedByTheBroker(t *testing.T) {
	sdk.ResetFactories()
	defer sdk.ResetFactories()
	sdk.RegisterFactory("weather", builtin("weather_query"))
	sdk.RegisterFactory("clock", builtin("clock_now"))

	b := hearthtest.StartWith(t, sdk.Registered, hearthtest.Options{Name: "clock", Quiet: true})
	r, err := b.Call("clock_now", nil)
	if err != nil || r.Content != "clock_now of clock" {
		t.Fatalf("%+v %v", r, err)
	}
	if tools := b.Tools(); len(tools) != 1 {
		t.Errorf("registered %v, want only clock's tool", tools)
	}

	err = hearthtest.Launch(t, sdk.Registered, hearthtest.Options{Name: "other", Quiet: true}).Wait()
	if err == nil || !strings.Contains(err.Error(), `no factory registered as "other" (registered: clock, weather)`) {
		t.Errorf("unknown name: %v", err)
	}
}

func TestTheOnlyRegisteredFactoryServesWhateverTheName(t *testing.T) {
	sdk.ResetFactories()
	defer sdk.ResetFactories()
	err := hearthtest.Launch(t, sdk.Registered, hearthtest.Options{Quiet: true}).Wait()
	if err == nil || !strings.Contains(err.Error(), "no factory registered (RegisterFactory is called from the plugin package's init()") {
		t.Errorf("none registered: %v", err)
	}
	sdk.RegisterFactory("weather", builtin("weather_query"))
	b := hearthtest.StartWith(t, sdk.Registered, hearthtest.Options{Name: "wx", Quiet: true})
	if r, err := b.Call("weather_query", nil); err != nil || r.Content != "weather_query of wx" {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestBadFactoryRegistrationsFailTheStartNamingThem(t *testing.T) {
	sdk.ResetFactories()
	defer sdk.ResetFactories()
	sdk.RegisterFactory("weather", builtin("a"))
	sdk.RegisterFactory("weather", builtin("b"))
	sdk.RegisterFactory("", builtin("c"))
	sdk.RegisterFactory("nil", nil)
	err := hearthtest.Launch(t, sdk.Registered, hearthtest.Options{Name: "weather", Quiet: true}).Wait()
	want := `RegisterFactory("weather"): registered twice; RegisterFactory: empty plugin name; RegisterFactory("nil"): nil factory`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want it to contain %s", err, want)
	}
}
