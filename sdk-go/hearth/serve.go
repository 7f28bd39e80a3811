// Package hearth serves a Go plugin to the Hearth broker that spawned it: Serve
// takes a plugin written against either seed SDK — HomeAgent's
// (github.com/hearth-dev/hearth/sdk-go/homeagent/sdk) or Cyrene's
// (github.com/hearth-dev/hearth/sdk-go/cyrene/sdk) — and runs its session until
// the broker shuts it down. Call is what a running handler sees of its call:
// context, progress, caller, trace context.
//
// A plugin's main is three lines:
//
//	func main() {
//		hearth.Serve(&MyPlugin{})
//	}
//
// The broker starts the plugin with HEARTH_ADDR, HEARTH_PLUGIN and the spawn token
// (in the pipe named by HEARTH_TOKEN_FD); to run it by hand against a running
// broker, set HEARTH_ADDR, HEARTH_PLUGIN and HEARTH_TOKEN. stdout and stderr are the
// plugin's log, never the protocol.
package hearth

import (
	"context"
	"errors"
	"fmt"
	"os"

	cyrene "github.com/hearth-dev/hearth/sdk-go/cyrene/sdk"
	homeagent "github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
	"github.com/hearth-dev/hearth/sdk-go/internal/session"
)

// Process exit codes of Serve, as the Python, Node and Rust SDKs use them.
const (
	// ExitOK: after the broker's Shutdown (the plugin's Stop has run), or when the
	// broker ended the session cleanly.
	ExitOK = session.ExitOK
	// ExitFailed: the session failed: broker unreachable, UNAUTHENTICATED (a wrong
	// or stale token), the stream reset, closed before answering Register.
	ExitFailed = session.ExitFailed
	// ExitConfig: the plugin cannot be served: environment missing or invalid, a
	// value that is not a plugin, Start/Init/NewPlugin failed or panicked, a
	// registration the SDK refuses (naming the item).
	ExitConfig = session.ExitConfig
	// ExitRejected: the broker rejected the registration as a whole (e.g. an
	// incompatible protocol version).
	ExitRejected = session.ExitRejected
)

// ExitError is the error ServeContext returns when serving failed: Code is the
// exit code Serve exits with (ExitFailed, ExitConfig or ExitRejected), Err names the
// plugin and what failed.
type ExitError = session.ExitError

// Options are test knobs for fault-injection plugins (tests/plugins/STRESS.md);
// real plugins use Serve.
type Options struct {
	// ProtocolVersion is sent in Hello instead of the SDK's ("1.0.0"): another
	// major version makes the broker reject the plugin (exit code 3).
	ProtocolVersion string
	// AfterHello runs once Hello has been written, before Register is sent; nothing
	// is read from the broker meanwhile (pings go unanswered). A hook that exits is
	// a plugin dying after Hello; one that never returns never registers.
	AfterHello func()
}

// Serve serves plugin to the broker that spawned this process and exits the
// process: with 0 after the broker's Shutdown (once the plugin's Stop has run) or
// when the broker ends the session, else with the ExitError's code after printing
// the error to stderr. It never returns.
//
// plugin is one of:
//   - a HomeAgent plugin: homeagent/sdk.Plugin (Name, Start(*sdk.PluginSDK), Stop);
//   - the HomeAgent `.so` factory, func NewPlugin(name string, config
//     map[string]interface{}) (sdk.Plugin, error) — hearth.Serve(NewPlugin) —
//     called with the name the broker gives the plugin and an empty config;
//   - sdk.Registered (homeagent/sdk): the factory a built-in plugin registered
//     with sdk.RegisterFactory in its init(), chosen by the plugin's name;
//   - a Cyrene plugin: cyrene/sdk.Plugin (Metadata, Init, Start(ctx, sdk.HostAPI),
//     Tools; Stop(ctx) when it has one).
//
// Anything else exits 2 naming its type.
func Serve(plugin any) {
	ServeWith(plugin, Options{})
}

// ServeWith is Serve with test knobs (Options).
func ServeWith(plugin any, opts Options) {
	err := ServeContextWith(context.Background(), plugin, opts)
	os.Stdout.Sync()
	if err == nil {
		os.Exit(ExitOK)
	}
	fmt.Fprintf(os.Stderr, "hearth-plugin: %v\n", err)
	var exit *ExitError
	if errors.As(err, &exit) {
		os.Exit(exit.Code)
	}
	os.Exit(ExitFailed)
}

// ServeHomeAgent is Serve for a HomeAgent plugin, checked at compile time.
func ServeHomeAgent(plugin homeagent.Plugin) { Serve(plugin) }

// ServeCyrene is Serve for a Cyrene plugin, checked at compile time.
func ServeCyrene(plugin cyrene.Plugin) { Serve(plugin) }

// ServeContext serves plugin (as Serve takes it) until the session ends, without
// exiting the process: for embedding a plugin in a larger program. It returns nil
// after the broker's Shutdown, when the broker ends the session, or when ctx is done
// (the plugin's Stop has run in each case); otherwise an *ExitError. ctx's values
// reach every handler's context; its cancellation ends the session.
func ServeContext(ctx context.Context, plugin any) error {
	return ServeContextWith(ctx, plugin, Options{})
}

// ServeContextWith is ServeContext with test knobs (Options).
func ServeContextWith(ctx context.Context, plugin any, opts Options) error {
	return session.Run(ctx, plugin, session.Options{ProtocolVersion: opts.ProtocolVersion, AfterHello: opts.AfterHello})
}
