// Package sdk is HomeAgent's PluginSDK (seed homeagent-plugin-sdk-api.md) for plugins
// that Hearth runs out of process: the seed's names and types — Plugin,
// PluginSDK with RegisterTool / RegisterStage / RegisterStageOwnTools, ToolDef,
// ToolHandler, the Stage constants, StageContext, Inject*Text and the host APIs
// Settings() / Memory() / TextMemory() / DocMemory() / Knowledge() / LLM() — so a
// seed plugin compiles after changing its import path from
// gitcode.com/JianFeeeee/homeagent-sdk/sdk to
// github.com/hearth-dev/hearth/sdk-go/homeagent/sdk, and serves with a main of
// three lines:
//
//	func main() {
//		hearth.Serve(&MyPlugin{}) // or hearth.Serve(NewPlugin), the seed's factory
//	}
//
// # What is different out of process
//
//   - Tool handlers, stage hooks and event handlers each run in a goroutine of their
//     own, many at once. A panic in one becomes that call's error; the plugin keeps
//     serving.
//   - Tool arguments arrive decoded by encoding/json: numbers are float64, as the
//     in-process HomeAgent gave them; the map is never nil.
//   - A handler's value becomes the result text: a string as is, anything else as
//     JSON (also sent as structured data); a map with "isError": true is an error
//     result whose text is its "content"; a returned error is an error result.
//   - The broker enforces the stage permission matrix: after a hook returns, only
//     the fields its stage may write are kept (a write to any other field is dropped
//     and logged with the plugin's name). ToolCall has Deny and DenyReason
//     (the matrix's ToolCall.deny) for before_toolcall.
//   - Seed methods without an error result (Settings().Dump(), Inject*Text, …) log
//     a failure to the plugin log and return the zero value; the values returned by
//     Settings(), DocMemory(), LLM() also implement the …E interfaces whose twins
//     return the error (Settings().(sdk.SettingsAPIE).DumpE()).
//
// # Hearth additions
//
// New names only, so no seed code changes meaning: RegisterToolContext and
// RegisterStageContext (handlers that take a context.Context, cancelled by the
// broker's Cancel and carrying its trace), RegisterToolWith (LinkZone ai.tool
// policies, serial tools), RegisterAITool (a LinkZone `ai.tool` with its parameter
// list), RegisterTrigger + SetInject (LinkZone triggers and `ai.inject`, answered
// through a Sender), UnregisterTool, Mcp(). Handlers without a context reach their
// call with hearth.CallFrom(args) / hearth.StageCall(ctx).
package sdk
