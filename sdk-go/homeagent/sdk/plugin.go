package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
	"github.com/hearth-dev/hearth/sdk-go/internal/host"
	"github.com/hearth-dev/hearth/sdk-go/internal/session"
)

// Plugin is the seed's plugin interface: every HomeAgent plugin implements it.
type Plugin interface {
	// Name is the plugin's name, as registered (used when the broker does not say
	// it in HEARTH_PLUGIN).
	Name() string
	// Start registers tools, stage hooks and the rest on sdk. Host calls work here
	// already. An error ends the plugin (exit code 2) before it registers.
	Start(sdk *PluginSDK) error
	// Stop releases resources (connections, goroutines). It runs on the broker's
	// Shutdown, within its grace period, and when the broker goes away.
	Stop() error
}

// Factory is the seed's `.so` entry point, `NewPlugin(name, config)`: name is the
// plugin's name (its folder), config is empty (reserved in the seed).
// hearth.Serve(NewPlugin) calls it with HEARTH_PLUGIN and an empty map.
type Factory = func(name string, config map[string]interface{}) (Plugin, error)

// ToolRegistrar is the seed's tool registration callback type.
type ToolRegistrar func(name string, def ToolDef, handler ToolHandler) error

// StageRegistrar is the seed's stage registration callback type.
type StageRegistrar func(stage Stage, handler StageHandler)

// APIRegistrar is the seed's API registration callback type (kept for source
// compatibility; Hearth does not call it).
type APIRegistrar func(name string) error

// PluginSDK is what the seed's kernel gives a plugin in Start: registration of
// tools, stage hooks and triggers, input injection and the host APIs.
//
// Registrations made in Start travel in the plugin's Register message. After Start
// returned, RegisterTool and UnregisterTool work at run time (they send a request
// on the session and wait for the broker's answer); stage hooks, triggers and the
// inject spec can only be registered in Start. The zero value collects
// registrations and answers host calls with a FAILED_PRECONDITION HostError (not
// served by a broker), which is enough to unit-test a Start method. Methods are safe
// for concurrent use.
type PluginSDK struct {
	mu      sync.Mutex
	name    string
	sess    *session.Session
	host    *host.Services
	io      IOInjector
	started bool
	errs    []error // registration errors of methods without an error result

	tools    []*session.Tool
	names    map[string]bool
	hooks    []*session.Hook
	events   []*session.Event
	triggers map[Trigger]bool
	inject   *pb.InjectSpec
}

// PluginName is the name the broker knows this plugin by (HEARTH_PLUGIN, else its
// Name()); "" on a PluginSDK not served by a broker.
func (s *PluginSDK) PluginName() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.name
}

// where names the plugin in errors.
func (s *PluginSDK) where() string {
	if s.name == "" {
		return "plugin"
	}
	return "plugin " + s.name
}

// fail records an error of a method without an error result: before Start returned
// it makes serving fail (exit code 2) naming it; afterwards it is logged.
func (s *PluginSDK) fail(err error) {
	s.mu.Lock()
	started := s.started
	if !started {
		s.errs = append(s.errs, err)
	}
	sess := s.sess
	s.mu.Unlock()
	if started && sess != nil {
		sess.LogLine("hearth-plugin: %v", err)
	}
}

// addTool registers t in Start, or at run time after it.
func (s *PluginSDK) addTool(t *session.Tool) error {
	name := t.Spec.Name
	s.mu.Lock()
	if s.names[name] {
		s.mu.Unlock()
		return fmt.Errorf("%s: tool name %q is registered twice", s.where(), name)
	}
	if !s.started {
		if s.names == nil {
			s.names = map[string]bool{}
		}
		s.names[name] = true
		s.tools = append(s.tools, t)
		s.mu.Unlock()
		return nil
	}
	sess := s.sess
	if sess == nil {
		s.mu.Unlock()
		return fmt.Errorf("%s: tool %s: not served by a broker", s.where(), name)
	}
	s.names[name] = true
	s.mu.Unlock()
	if err := sess.RegisterTool(t); err != nil {
		s.mu.Lock()
		delete(s.names, name)
		s.mu.Unlock()
		return err
	}
	return nil
}

// UnregisterTool removes tool name that this plugin registered (Hearth). In Start
// it drops the registration; afterwards it asks the broker and waits for its
// answer.
func (s *PluginSDK) UnregisterTool(name string) error {
	s.mu.Lock()
	if !s.names[name] {
		s.mu.Unlock()
		return fmt.Errorf("%s: UnregisterTool: no tool %q", s.where(), name)
	}
	if !s.started {
		delete(s.names, name)
		for i, t := range s.tools {
			if t.Spec.Name == name {
				s.tools = append(s.tools[:i], s.tools[i+1:]...)
				break
			}
		}
		s.mu.Unlock()
		return nil
	}
	sess := s.sess
	s.mu.Unlock()
	if sess == nil {
		return fmt.Errorf("%s: UnregisterTool %s: not served by a broker", s.where(), name)
	}
	if err := sess.UnregisterTool(name); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.names, name)
	s.mu.Unlock()
	return nil
}

// RegisterTrigger registers a LinkZone event handler (Hearth; LinkZone `triggers`
// + `handleEvent(sender)`): a message matching t reaches handler with a Sender,
// whose Param(i) gives the parsed parameters and Reply(text) answers the user. A
// returned error (or a panic) is reported to the broker, which logs it. Only in
// Start. Fails when the same trigger (type and pattern) is registered twice or the
// type is out of range; patterns are checked by the broker (rejected by name).
func (s *PluginSDK) RegisterTrigger(t Trigger, handler EventHandler) error {
	if handler == nil {
		return fmt.Errorf("%s: trigger %s: handler is nil", s.where(), t)
	}
	if t.Type < TriggerCommand || t.Type > TriggerEvent {
		return fmt.Errorf("%s: trigger %s: type must be 0 (command), 1 (keyword), 2 (regex), 3 (segment) or 4 (event)", s.where(), t)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("%s: trigger %s: triggers can only be registered in Start", s.where(), t)
	}
	if s.triggers[t] {
		return fmt.Errorf("%s: trigger %s is registered twice", s.where(), t)
	}
	if s.triggers == nil {
		s.triggers = map[Trigger]bool{}
	}
	s.triggers[t] = true
	s.events = append(s.events, &session.Event{Trigger: t, Handle: func(snd *session.Sender) error {
		return handler(snd)
	}})
	return nil
}

// SetInject sets the plugin's LinkZone `ai.inject` spec (Hearth; replacing an
// earlier one): a command format the LLM is told about; a command it writes is
// matched against the plugin's triggers and delivered to their handlers. Only in
// Start. The broker rejects a spec without a Format (logged).
func (s *PluginSDK) SetInject(inject AIInject) {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		s.fail(fmt.Errorf("%s: SetInject: the inject spec can only be set in Start", s.where()))
		return
	}
	s.inject = inject.wire()
	s.mu.Unlock()
}

// finishStart ends the start phase: later registrations go to the broker at run
// time. It returns what Start registered, or the errors of registrations that had
// no error result to report them.
func (s *PluginSDK) finishStart() (*session.Spec, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = true
	if len(s.errs) > 0 {
		return nil, errors.Join(s.errs...)
	}
	return &session.Spec{Tools: s.tools, Hooks: s.hooks, Events: s.events, Inject: s.inject}, nil
}

func init() { session.RegisterAdapter(adapt) }

func adapt(v any) (session.Plugin, bool) {
	switch p := v.(type) {
	case Plugin:
		return &served{plugin: p}, true
	case Factory:
		if p == nil {
			return nil, false
		}
		return &served{factory: p}, true
	case RegisteredFactories:
		return &served{registered: true}, true
	}
	return nil, false
}

// served drives a HomeAgent plugin for the session.
type served struct {
	plugin     Plugin
	factory    Factory
	registered bool // the factory is RegisterFactory's for the plugin's name
}

func (a *served) Name() string {
	if a.plugin == nil {
		return ""
	}
	return a.plugin.Name()
}

func (a *served) Start(s *session.Session) (*session.Spec, error) {
	if a.registered {
		f, err := Registered.factory(s.Name())
		if err != nil {
			return nil, err
		}
		a.factory = f
	}
	if a.factory != nil {
		p, err := a.factory(s.Name(), map[string]interface{}{})
		if err != nil {
			return nil, fmt.Errorf("NewPlugin: %w", err)
		}
		if p == nil {
			return nil, errors.New("NewPlugin returned no plugin")
		}
		a.plugin = p
	}
	sdk := &PluginSDK{
		name: s.Name(),
		sess: s,
		host: host.New(s.Conn(), s.Name(), s.LogLine).WithContext(s.Context()),
	}
	if err := a.plugin.Start(sdk); err != nil {
		return nil, err
	}
	spec, err := sdk.finishStart()
	if err != nil {
		return nil, err
	}
	spec.Info = &pb.PluginInfo{Name: a.plugin.Name()}
	return spec, nil
}

func (a *served) Stop(context.Context) error {
	if a.plugin == nil {
		return nil
	}
	return a.plugin.Stop()
}
