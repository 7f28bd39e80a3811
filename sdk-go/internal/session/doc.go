// Package session is the Go SDK's Attach session with the broker
// (proto/README.md, "The plugin session, step by step"), independent of the seed
// style a plugin is written in.
//
// # Layout
//
//   - config.go: where and as whom to serve (HEARTH_ADDR, HEARTH_PLUGIN, the spawn
//     token from HEARTH_TOKEN_FD or HEARTH_TOKEN), the address → grpc target rule,
//     and the dial with the token interceptor.
//   - adapter.go: the seed styles (homeagent/sdk, cyrene/sdk) register an Adapter in
//     init; Run finds the one that accepts the plugin value.
//   - spec.go: what a style hands the session to register (tools, stage hooks,
//     triggers, ai.inject), and the checks made before anything is sent.
//   - session.go: Run — dial, the plugin's start, Hello + Register, the read loop,
//     Shutdown and the exit codes (ExitError).
//   - calls.go: one goroutine per InvokeTool / RunStage / HandleEvent, each with a
//     context cancelled by the broker's Cancel and by the end of the session;
//     panics become error answers.
//   - workers.go: the goroutines calls run on (one per call in flight; finished ones
//     are reused, keeping the stack encoding/json grew).
//   - call.go, sender.go: what a running handler sees (Call: context, progress,
//     trace context; Sender: LinkZone's event sender with Param and Reply).
//   - writer.go: the one goroutine that owns stream.Send; pongs go first.
//   - result.go: handler values → ToolResult, and the size and UTF-8 checks that keep
//     one bad answer from ending the stream (grpc-go fails the whole stream on an
//     oversized or non-UTF-8 message).
//   - trace.go: traceparent / tracestate → an OpenTelemetry remote span context in
//     the call's context.
//
// The public face of all this is the package hearth (Serve, Call) and the two style
// packages; plugin authors never import this package.
package session
