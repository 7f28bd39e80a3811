package session

import (
	"context"
	"fmt"
	"sync"
)

// Plugin is a plugin of one seed style as the session drives it.
type Plugin interface {
	// Name is the name the plugin gives itself (HomeAgent Name(), Cyrene
	// Metadata().Name), used when HEARTH_PLUGIN is unset; "" = unknown.
	Name() string
	// Start runs the plugin's own start-up (NewPlugin, Init, Start, Tools) with host
	// calls available through s, and returns what to register. Runtime
	// registrations made after it returned go through s.RegisterTool.
	Start(s *Session) (*Spec, error)
	// Stop runs the plugin's Stop; ctx carries the time it has.
	Stop(ctx context.Context) error
}

// Adapter accepts a plugin value of its style (ok = true) or declines it.
type Adapter func(plugin any) (p Plugin, ok bool)

var (
	adaptersMu sync.Mutex
	adapters   []Adapter
)

// RegisterAdapter adds a style; the style packages call it in init.
func RegisterAdapter(a Adapter) {
	adaptersMu.Lock()
	defer adaptersMu.Unlock()
	adapters = append(adapters, a)
}

// Adapt is the plugin of the first style that accepts value.
func Adapt(value any) (Plugin, error) {
	if p, ok := value.(Plugin); ok {
		return p, nil
	}
	adaptersMu.Lock()
	list := append([]Adapter(nil), adapters...)
	adaptersMu.Unlock()
	for _, a := range list {
		if p, ok := a(value); ok {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%T is neither a HomeAgent plugin (Name, Start(*sdk.PluginSDK), Stop; or its NewPlugin factory) nor a Cyrene plugin (Metadata, Init, Start(ctx, sdk.HostAPI), Tools)", value)
}
