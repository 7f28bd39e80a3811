package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hearth-dev/hearth/sdk-go/hearth"
	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
	"github.com/hearth-dev/hearth/sdk-go/hearthtest"
	"github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
)

// plugin is a HomeAgent plugin whose Start is the test's.
type plugin struct {
	start   func(s *sdk.PluginSDK) error
	stopped atomic.Int32
}

func (p *plugin) Name() string                 { return "ha" }
func (p *plugin) Start(s *sdk.PluginSDK) error { return p.start(s) }
func (p *plugin) Stop() error                  { p.stopped.Add(1); return nil }

func noArgs() sdk.ToolDef {
	return sdk.ToolDef{Description: "test tool", Parameters: map[string]interface{}{"type": "object", "properties": map[string]interface{}{}}}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestToolValuesErrorsAndPanics(t *testing.T) {
	p := &plugin{start: func(s *sdk.PluginSDK) error {
		reg := func(name string, h sdk.ToolHandler) {
			if err := s.RegisterTool(name, noArgs(), h); err != nil {
				panic(err)
			}
		}
		reg("text", func(args map[string]interface{}) (interface{}, error) { return "晴 " + args["city"].(string), nil })
		reg("data", func(map[string]interface{}) (interface{}, error) {
			return map[string]interface{}{"temp": 25, "weather": "晴"}, nil
		})
		reg("iserror", func(map[string]interface{}) (interface{}, error) {
			return map[string]interface{}{"isError": true, "content": "城市不存在"}, nil
		})
		reg("err", func(map[string]interface{}) (interface{}, error) { return nil, errors.New("upstream down") })
		reg("boom", func(map[string]interface{}) (interface{}, error) { panic("kaboom") })
		return nil
	}}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Quiet: true})
	if got := b.Tools(); !slices.Equal(got, []string{"boom", "data", "err", "iserror", "text"}) {
		t.Errorf("tools %v", got)
	}
	spec := b.Registration().Tools[0]
	if spec.Name != "text" || spec.Description != "test tool" || spec.ParametersJson != `{"properties":{},"type":"object"}` {
		t.Errorf("spec %v", spec)
	}
	check := func(tool string, args any, want hearthtest.Result) {
		t.Helper()
		r, err := b.Call(tool, args)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if r.Success != want.Success || r.Content != want.Content || r.DataJSON != want.DataJSON || r.Error != want.Error {
			t.Errorf("%s: got %+v, want %+v", tool, r, want)
		}
	}
	check("text", map[string]any{"city": "北京"}, hearthtest.Result{Success: true, Content: "晴 北京"})
	check("data", nil, hearthtest.Result{Success: true, Content: `{"temp":25,"weather":"晴"}`, DataJSON: `{"temp":25,"weather":"晴"}`})
	check("iserror", nil, hearthtest.Result{Error: "城市不存在"})
	check("err", nil, hearthtest.Result{Error: "upstream down"})
	check("boom", nil, hearthtest.Result{Error: "tool boom panicked: kaboom"})
	// A panic is one call's error: the plugin keeps serving.
	check("text", `{"city":"上海"}`, hearthtest.Result{Success: true, Content: "晴 上海"})
	check("text", `[1]`, hearthtest.Result{Error: "tool text: arguments are not a JSON object (got a JSON array)"})
	check("nosuch", nil, hearthtest.Result{Error: `plugin test has no tool named "nosuch"`})
	logs := strings.Join(b.Logs(), "\n")
	if !strings.Contains(logs, "tool boom panicked: kaboom") || !strings.Contains(logs, "goroutine") {
		t.Errorf("the panic and its stack are not in the plugin log:\n%s", logs)
	}
	must(t, b.Shutdown())
	if p.stopped.Load() != 1 {
		t.Errorf("Stop ran %d times", p.stopped.Load())
	}
}

func TestRegistrationErrorsNameTheItem(t *testing.T) {
	var errs []string
	p := &plugin{start: func(s *sdk.PluginSDK) error {
		h := func(map[string]interface{}) (interface{}, error) { return "ok", nil }
		try := func(err error) {
			if err == nil {
				errs = append(errs, "<nil>")
			} else {
				errs = append(errs, err.Error())
			}
		}
		try(s.RegisterTool("good", noArgs(), h))
		try(s.RegisterTool("good", noArgs(), h))
		try(s.RegisterTool("", noArgs(), h))
		try(s.RegisterTool("bad name", noArgs(), h))
		try(s.RegisterTool("nil_handler", noArgs(), nil))
		try(s.RegisterTool("bad_schema", sdk.ToolDef{Parameters: map[string]interface{}{"type": 12}}, h))
		try(s.RegisterTool("chan_schema", sdk.ToolDef{Parameters: map[string]interface{}{"x": make(chan int)}}, h))
		try(s.RegisterAITool("ai_bad", sdk.AITool{Parameters: []sdk.AIToolParameter{{Name: "n", Type: "date"}}}, h))
		try(s.RegisterTrigger(sdk.Trigger{Type: 7, Pattern: "x"}, func(*sdk.Sender) error { return nil }))
		try(s.UnregisterTool("never"))
		return nil
	}}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Quiet: true})
	want := []string{
		"<nil>",
		`plugin test: tool name "good" is registered twice`,
		"plugin test: tool name is empty",
		"plugin test: tool \"bad name\": name contains ' '; use letters, digits, `_` and `-`",
		`plugin test: tool "nil_handler": handler is nil`,
		`plugin test: tool bad_schema: parameters must describe an object ("type": "object"), not 12`,
		"plugin test: tool chan_schema: parameters are not JSON: json: unsupported type: chan int",
		`plugin test: tool ai_bad: ai.tool parameter "n": type "date" is not one of string, number, integer, boolean, object, array`,
		"plugin test: trigger type 7 x: type must be 0 (command), 1 (keyword), 2 (regex), 3 (segment) or 4 (event)",
		`plugin test: UnregisterTool: no tool "never"`,
	}
	if !slices.Equal(errs, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(errs, "\n"), strings.Join(want, "\n"))
	}
	if got := b.Tools(); !slices.Equal(got, []string{"good"}) {
		t.Errorf("tools %v", got)
	}
}

func TestStartFailuresExit2(t *testing.T) {
	cases := map[string]struct {
		start func(s *sdk.PluginSDK) error
		want  string
	}{
		"error": {func(*sdk.PluginSDK) error { return errors.New("no api key") }, "plugin test: start failed: no api key"},
		"panic": {func(*sdk.PluginSDK) error { panic("bad config") }, "plugin test: start failed: panicked: bad config"},
		"stage": {func(s *sdk.PluginSDK) error {
			s.RegisterStage("on_whatever", func(*sdk.StageContext) error { return nil })
			return nil
		}, `plugin test: start failed: plugin test: RegisterStage: unknown stage "on_whatever"`},
		"inject":  {func(s *sdk.PluginSDK) error { s.RegisterStage(sdk.StageOnInput, nil); return nil }, "plugin test: start failed: plugin test: stage hook on_input: handler is nil"},
		"nothing": {func(*sdk.PluginSDK) error { return nil }, ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			b := hearthtest.Launch(t, &plugin{start: c.start}, hearthtest.Options{Quiet: true})
			if c.want == "" {
				must(t, b.WaitRegistered())
				return
			}
			err := b.Wait()
			var exit *hearth.ExitError
			if !errors.As(err, &exit) || exit.Code != hearth.ExitConfig || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("got %v (%T), want exit 2 with %q", err, err, c.want)
			}
			if b.Hello() != nil {
				t.Error("a plugin whose start failed attached")
			}
		})
	}
}

func TestFactoryStyle(t *testing.T) {
	var gotName string
	var newPlugin sdk.Factory = func(name string, config map[string]interface{}) (sdk.Plugin, error) {
		gotName = name
		if config == nil {
			return nil, errors.New("nil config")
		}
		return &plugin{start: func(s *sdk.PluginSDK) error {
			return s.RegisterTool("f_ping", noArgs(), func(map[string]interface{}) (interface{}, error) { return "pong " + s.PluginName(), nil })
		}}, nil
	}
	b := hearthtest.StartWith(t, newPlugin, hearthtest.Options{Name: "factory", Quiet: true})
	r, err := b.Call("f_ping", nil)
	if err != nil || r.Content != "pong factory" || gotName != "factory" {
		t.Errorf("%+v %v name=%q", r, err, gotName)
	}

	failing := func(string, map[string]interface{}) (sdk.Plugin, error) { return nil, errors.New("no such model") }
	err = hearthtest.Launch(t, failing, hearthtest.Options{Quiet: true}).Wait()
	if err == nil || err.Error() != "plugin test: start failed: NewPlugin: no such model" {
		t.Errorf("failing factory: %v", err)
	}
}

func TestConcurrentCallsAndPingsWhileHandlersBlock(t *testing.T) {
	const n = 16
	started := make(chan struct{}, n)
	release := make(chan struct{})
	p := &plugin{start: func(s *sdk.PluginSDK) error {
		return s.RegisterTool("wait", noArgs(), func(args map[string]interface{}) (interface{}, error) {
			started <- struct{}{}
			<-release
			return fmt.Sprintf("done %v", args["i"]), nil
		})
	}}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Quiet: true})
	var calls []*hearthtest.Pending
	for i := 0; i < n; i++ {
		c, err := b.Invoke("wait", map[string]any{"i": i})
		must(t, err)
		calls = append(calls, c)
	}
	for i := 0; i < n; i++ {
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of %d calls run at once", i, n)
		}
	}
	// Every handler is blocked: pings are still answered.
	for i := 0; i < 3; i++ {
		must(t, b.Ping())
	}
	close(release)
	for i, c := range calls {
		r, err := c.Result()
		if err != nil || r.Content != fmt.Sprintf("done %d", i) {
			t.Errorf("call %d: %+v %v", i, r, err)
		}
	}
}

func TestCancelCancelsTheContextAndDropsTheResult(t *testing.T) {
	started := make(chan struct{})
	seen := make(chan error, 1)
	p := &plugin{start: func(s *sdk.PluginSDK) error {
		return s.RegisterToolContext("slow", noArgs(), func(ctx context.Context, _ map[string]interface{}) (interface{}, error) {
			close(started)
			<-ctx.Done()
			seen <- ctx.Err()
			return "too late", nil
		})
	}}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Quiet: true})
	c, err := b.Invoke("slow", nil, hearthtest.WithTimeout(time.Hour))
	must(t, err)
	<-started
	must(t, c.Cancel("caller gone"))
	select {
	case err := <-seen:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("ctx.Err() = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context was not cancelled")
	}
	time.Sleep(50 * time.Millisecond)
	must(t, b.Ping())
	if late := b.Late(); len(late) != 0 {
		t.Errorf("the plugin answered a cancelled call: %v", late)
	}
}

func TestCallFromProgressAndCaller(t *testing.T) {
	var saved atomic.Pointer[hearth.Call]
	p := &plugin{start: func(s *sdk.PluginSDK) error {
		return s.RegisterTool("work", noArgs(), func(args map[string]interface{}) (interface{}, error) {
			call := hearth.CallFrom(args)
			args["grown"] = strings.Repeat("x", 10) // the map may grow; its identity holds
			for i := 0; i < 100; i++ {
				args[fmt.Sprint(i)] = i
			}
			if hearth.CallFrom(args) != call {
				return nil, errors.New("CallFrom changed after the map grew")
			}
			saved.Store(call)
			ok1 := call.Progress("half way", 0.5)
			ok2 := call.ProgressCount("page 3", 3, 10)
			return map[string]interface{}{
				"id": call.ID(), "tool": call.Tool(), "user": call.Caller().UserID, "channel": call.Caller().Channel,
				"timeout_ms": call.Timeout().Milliseconds(), "plugin": call.Plugin(), "sent": ok1 && ok2,
				"ctx": call.Context().Err() == nil, "raw": call.RawArgs(),
			}, nil
		})
	}}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Name: "worker", Quiet: true})
	c, err := b.Invoke("work", `{"n":12345678901234567}`, hearthtest.WithCaller(hearth.Caller{UserID: "u1", Channel: "qq"}), hearthtest.WithTimeout(1500*time.Millisecond))
	must(t, err)
	r, err := c.Result()
	must(t, err)
	var got map[string]any
	must(t, r.Data(&got))
	want := map[string]any{"id": float64(c.ID()), "tool": "work", "user": "u1", "channel": "qq", "timeout_ms": float64(1500), "plugin": "worker", "sent": true, "ctx": true, "raw": `{"n":12345678901234567}`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if len(r.Progress) != 2 {
		t.Fatalf("progress %v", r.Progress)
	}
	if p0 := r.Progress[0]; p0.Message != "half way" || p0.Fraction != 0.5 || p0.Progress != 0 || p0.Total != 0 || p0.CallId != c.ID() {
		t.Errorf("progress 0: %v", p0)
	}
	if p1 := r.Progress[1]; p1.Message != "page 3" || p1.Fraction != 0.3 || p1.Progress != 3 || p1.Total != 10 {
		t.Errorf("progress 1: %v", p1)
	}
	// After the call ended, progress is not sent; the context is done.
	call := saved.Load()
	if call.Progress("late", 1) || call.Context().Err() == nil {
		t.Error("progress after the call ended was sent, or its context is still live")
	}
	// Outside a call: a detached Call.
	d := hearth.CallFrom(map[string]interface{}{})
	if d == nil || d.ID() != 0 || d.Progress("x", 0) || d.Context().Err() != nil {
		t.Errorf("detached call: %+v", d)
	}
}

func TestTraceContextReachesTheHandler(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	p := &plugin{start: func(s *sdk.PluginSDK) error {
		return s.RegisterToolContext("traced", noArgs(), func(ctx context.Context, _ map[string]interface{}) (interface{}, error) {
			sc := trace.SpanContextFromContext(ctx)
			call := hearth.CallFromContext(ctx)
			return map[string]interface{}{
				"trace": sc.TraceID().String(), "span": sc.SpanID().String(), "remote": sc.IsRemote(),
				"sampled": sc.IsSampled(), "state": sc.TraceState().String(),
				"tp": call.TraceParent(), "ts": call.TraceState(),
			}, nil
		})
	}}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Quiet: true})
	r, err := b.Call("traced", nil, hearthtest.WithTrace(tp, "vendor=a"))
	must(t, err)
	want := `{"remote":true,"sampled":true,"span":"00f067aa0ba902b7","state":"vendor=a","tp":"` + tp + `","trace":"4bf92f3577b34da6a3ce929d0e0e4736","ts":"vendor=a"}`
	if r.Content != want {
		t.Errorf("got %s\nwant %s", r.Content, want)
	}
	// Untraced and malformed: no span context, never an error.
	for _, bad := range []string{"", "00-zz-00f067aa0ba902b7-01"} {
		r, err := b.Call("traced", nil, hearthtest.WithTrace(bad, ""))
		if err != nil || !r.Success || !strings.Contains(r.Content, `"trace":"00000000000000000000000000000000"`) {
			t.Errorf("traceparent %q: %+v %v", bad, r, err)
		}
	}
}

func TestStageHooksThroughTheMatrix(t *testing.T) {
	var ownSeen []string
	var mu sync.Mutex
	p := &plugin{start: func(s *sdk.PluginSDK) error {
		must(t, s.RegisterTool("ha_tool", noArgs(), func(map[string]interface{}) (interface{}, error) { return "", nil }))
		// on_input#0: rewrite the message (kept) and the user (read-only: dropped).
		s.RegisterStage(sdk.StageOnInput, func(ctx *sdk.StageContext) error {
			if hearth.StageCall(ctx).ID() == 0 {
				return errors.New("StageCall found no call")
			}
			ctx.RawMessage = strings.TrimSpace(ctx.RawMessage)
			ctx.UserID = "admin"
			ctx.Extra["seen_by"] = "ha"
			return nil
		})
		// pre_action#1: the seed's example, appending a system message under Lock.
		s.RegisterStage(sdk.StagePreAction, func(ctx *sdk.StageContext) error {
			ctx.Lock()
			ctx.ContextMsgs = append(ctx.ContextMsgs, map[string]interface{}{"role": "system", "content": "当前时间: 15:04"})
			ctx.Unlock()
			return nil
		})
		// before_toolcall#2: deny one tool.
		s.RegisterStageContext(sdk.StageBeforeToolcall, func(c context.Context, ctx *sdk.StageContext) error {
			if hearth.CallFromContext(c).HookID() != "before_toolcall#2" {
				return errors.New("wrong hook id")
			}
			for i := range ctx.ToolCalls {
				if ctx.ToolCalls[i].Name == "rm_rf" {
					ctx.ToolCalls[i].Deny = true
					ctx.ToolCalls[i].DenyReason = "not allowed by ha"
				}
			}
			return nil
		})
		// before_toolcall#3: own tools only.
		s.RegisterStageOwnTools(sdk.StageBeforeToolcall, func(ctx *sdk.StageContext) error {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range ctx.ToolCalls {
				ownSeen = append(ownSeen, c.Name)
			}
			return nil
		})
		// after_output#4: read only.
		s.RegisterStage(sdk.StageAfterOutput, func(ctx *sdk.StageContext) error {
			ctx.FinalText = "rewritten"
			return nil
		})
		// after_output#5: touches nothing: nothing is reported.
		s.RegisterStage(sdk.StageAfterOutput, func(*sdk.StageContext) error { return nil })
		// post_action#6 fails, post_action#7 panics, post_action#8 short-circuits.
		s.RegisterStage(sdk.StagePostAction, func(*sdk.StageContext) error { return errors.New("nope") })
		s.RegisterStage(sdk.StagePostAction, func(*sdk.StageContext) error { panic("hook bug") })
		s.RegisterStage(sdk.StagePostAction, func(ctx *sdk.StageContext) error {
			resp := "已被限制使用"
			ctx.Response = &resp
			ctx.LLMText += "!"
			return nil
		})
		must(t, s.RegisterStageWith(sdk.StagePreAction, sdk.StageOptions{NoContextMsgs: true}, func(_ context.Context, ctx *sdk.StageContext) error {
			if len(ctx.ContextMsgs) != 0 {
				return errors.New("got context messages it declared it does not read")
			}
			return nil
		}))
		return nil
	}}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Quiet: true})
	hooks := b.Hooks()
	var ids []string
	for _, h := range hooks {
		ids = append(ids, h.HookId)
	}
	wantIDs := []string{"on_input#0", "pre_action#1", "before_toolcall#2", "before_toolcall#3", "after_output#4", "after_output#5", "post_action#6", "post_action#7", "post_action#8", "pre_action#9"}
	if !slices.Equal(ids, wantIDs) || !hooks[3].OwnToolsOnly || hooks[2].OwnToolsOnly || !hooks[9].NoContextMsgs {
		t.Errorf("hooks %v", hooks)
	}

	out, err := b.RunStage(pb.Stage_STAGE_ON_INPUT, &pb.StageContext{RawMessage: "  hi  ", UserId: "u1"})
	must(t, err)
	if out.Context.RawMessage != "hi" || out.Context.UserId != "u1" || out.Context.ExtraJson != `{"seen_by":"ha"}` {
		t.Errorf("on_input: %v", out.Context)
	}
	if !slices.Equal(out.Dropped, []hearthtest.DroppedWrite{{HookID: "on_input#0", Field: "user_id"}}) || len(out.Errors) != 0 {
		t.Errorf("on_input dropped %v errors %v", out.Dropped, out.Errors)
	}

	out, err = b.RunStage(pb.Stage_STAGE_PRE_ACTION, &pb.StageContext{
		ContextMsgsJson: `[{"role":"user","content":"几点了"}]`,
		Memory:          []*pb.MemItem{{Role: "user", Content: "likes tea", Score: 0.5}},
	})
	must(t, err)
	var msgs []map[string]any
	must(t, json.Unmarshal([]byte(out.Context.ContextMsgsJson), &msgs))
	if len(msgs) != 2 || msgs[1]["content"] != "当前时间: 15:04" || len(out.Dropped) != 0 || len(out.Errors) != 0 || len(out.Context.Memory) != 1 {
		t.Errorf("pre_action: %v dropped %v errors %v", out.Context, out.Dropped, out.Errors)
	}

	calls := []*pb.ToolCallInfo{{Id: "c1", Name: "rm_rf", ArgumentsJson: `{"path":"/"}`}}
	out, err = b.RunStage(pb.Stage_STAGE_BEFORE_TOOLCALL, &pb.StageContext{ToolCalls: calls})
	must(t, err)
	if tc := out.Context.ToolCalls[0]; !tc.Deny || tc.DenyReason != "not allowed by ha" || tc.ArgumentsJson != `{"path":"/"}` || len(out.Dropped) != 0 {
		t.Errorf("before_toolcall: %v dropped %v", out.Context, out.Dropped)
	}
	if !slices.Equal(out.Ran, []string{"before_toolcall#2"}) {
		t.Errorf("ran %v (the own-tools hook must not see another plugin's tool)", out.Ran)
	}
	out, err = b.RunStage(pb.Stage_STAGE_BEFORE_TOOLCALL, &pb.StageContext{ToolCalls: []*pb.ToolCallInfo{{Id: "c2", Name: "ha_tool", ArgumentsJson: "{}"}}})
	must(t, err)
	if !slices.Equal(out.Ran, []string{"before_toolcall#2", "before_toolcall#3"}) || !slices.Equal(ownSeen, []string{"ha_tool"}) {
		t.Errorf("own tools: ran %v seen %v", out.Ran, ownSeen)
	}

	out, err = b.RunStage(pb.Stage_STAGE_AFTER_OUTPUT, &pb.StageContext{FinalText: "bye"})
	must(t, err)
	if out.Context.FinalText != "bye" || !slices.Equal(out.Dropped, []hearthtest.DroppedWrite{{HookID: "after_output#4", Field: "final_text"}}) {
		t.Errorf("after_output: %v dropped %v", out.Context, out.Dropped)
	}

	out, err = b.RunStage(pb.Stage_STAGE_POST_ACTION, &pb.StageContext{LlmText: "hello", ReasoningContent: "think"})
	must(t, err)
	wantErrs := []string{"stage hook post_action#6: nope", "stage hook post_action#7 panicked: hook bug"}
	if !slices.Equal(out.Errors, wantErrs) {
		t.Errorf("errors %q, want %q", out.Errors, wantErrs)
	}
	if out.Context.GetResponse() != "已被限制使用" || out.Context.LlmText != "hello!" || len(out.Dropped) != 0 {
		t.Errorf("post_action: %v dropped %v", out.Context, out.Dropped)
	}

	res, err := b.RunHook("no_such#9", &pb.StageContext{})
	must(t, err)
	if res.Error != `plugin test has no stage hook "no_such#9"` {
		t.Errorf("unknown hook: %v", res)
	}
}

func TestStageHookRoundTripKeepsUntouchedFields(t *testing.T) {
	p := &plugin{start: func(s *sdk.PluginSDK) error {
		for _, st := range []sdk.Stage{sdk.StageOnInput, sdk.StagePreAction, sdk.StagePostAction, sdk.StageBeforeToolcall,
			sdk.StageAfterToolcall, sdk.StageBeforeOutput, sdk.StageAfterOutput} {
			s.RegisterStage(st, func(*sdk.StageContext) error { return nil })
		}
		return nil
	}}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Quiet: true})
	resp := "r"
	in := &pb.StageContext{
		RawMessage: "m", UserId: "u", GroupId: "g", ContextMsgsJson: `[{"content":"c","role":"user"}]`,
		LlmText: "l", ReasoningContent: "rc", TokenUsage: map[string]int64{"total": 12},
		ToolCalls:   []*pb.ToolCallInfo{{Id: "1", Name: "t", Plugin: "p", ArgumentsJson: `{"a":1}`, Deny: true, DenyReason: "x"}},
		ToolResults: []*pb.ToolResultInfo{{CallId: "1", Name: "t", Plugin: "p", Success: true, ResultJson: `{"ok":true}`}},
		FinalText:   "f", Response: &resp, Phase: pb.Stage_STAGE_POST_ACTION,
		Memory: []*pb.MemItem{{Role: "user", Content: "c", Score: 1.5}}, NoMemory: true, ExtraJson: `{"k":[1,2]}`,
	}
	res, err := b.RunHook("post_action#2", in)
	must(t, err)
	if res.Error != "" || res.Context.String() != in.String() {
		t.Errorf("a no-op hook changed the context:\n got %v\nwant %v", res.Context, in)
	}
	empty := &pb.StageContext{Phase: pb.Stage_STAGE_AFTER_OUTPUT}
	res, err = b.RunHook("after_output#6", empty)
	must(t, err)
	if res.Context.String() != empty.String() {
		t.Errorf("empty context changed: %v", res.Context)
	}
	bad := &pb.StageContext{ExtraJson: "{broken"}
	res, err = b.RunHook("on_input#0", bad)
	must(t, err)
	if !strings.HasPrefix(res.Error, "stage hook on_input#0: extra_json is not a JSON object") {
		t.Errorf("broken extra: %v", res)
	}
}

func TestTriggersAndInject(t *testing.T) {
	p := &plugin{start: func(s *sdk.PluginSDK) error {
		s.SetInject(sdk.AIInject{Usage: "查询天气信息", Format: "/weather {city}", Args: map[string]string{"city": "城市名称"}})
		must(t, s.RegisterTrigger(sdk.Trigger{Type: sdk.TriggerCommand, Pattern: "/weather"}, func(sender *sdk.Sender) error {
			city := sender.Param(0)
			if city == "" {
				city = "北京"
			}
			if err := sender.Reply(city + ": 晴"); err != nil {
				return err
			}
			return sender.Reply(fmt.Sprintf("(%s by %s, %d params, missing %q)", sender.Message(), sender.Caller().UserID, len(sender.Params()), sender.Param(5)))
		}))
		must(t, s.RegisterTrigger(sdk.Trigger{Type: sdk.TriggerKeyword, Pattern: "坏"}, func(*sdk.Sender) error {
			return errors.New("cannot")
		}))
		if err := s.RegisterTrigger(sdk.Trigger{Type: sdk.TriggerCommand, Pattern: "/weather"}, func(*sdk.Sender) error { return nil }); err == nil ||
			err.Error() != "plugin test: trigger command /weather is registered twice" {
			t.Errorf("duplicate trigger: %v", err)
		}
		return nil
	}}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Quiet: true})
	reg := b.Registration()
	if reg.Inject.GetFormat() != "/weather {city}" || reg.Inject.Args["city"] != "城市名称" || len(reg.Triggers) != 2 ||
		reg.Triggers[1].Type != pb.TriggerType_TRIGGER_KEYWORD || reg.Triggers[1].Pattern != "坏" {
		t.Errorf("registration: %v", reg)
	}
	pend, err := b.StartEvent(sdk.Trigger{Type: sdk.TriggerCommand, Pattern: "/weather"}, "/weather 上海", []string{"上海"},
		hearthtest.WithCaller(hearth.Caller{UserID: "u9"}))
	must(t, err)
	ev, err := pend.EventResult()
	must(t, err)
	if !slices.Equal(ev.Replies, []string{"上海: 晴", `(/weather 上海 by u9, 1 params, missing "")`}) || ev.Error != "" {
		t.Errorf("event: %+v", ev)
	}
	ev, err = b.Event(sdk.Trigger{Type: sdk.TriggerKeyword, Pattern: "坏"}, "坏天气")
	must(t, err)
	if ev.Error != "event handler of trigger keyword 坏: cannot" {
		t.Errorf("failing event: %+v", ev)
	}
	ev, err = b.Event(sdk.Trigger{Type: sdk.TriggerRegex, Pattern: "x"}, "x")
	must(t, err)
	if ev.Error != "plugin test has no event handler for trigger regex x" {
		t.Errorf("unknown trigger: %+v", ev)
	}
}

func TestRuntimeRegistration(t *testing.T) {
	var sdkRef atomic.Pointer[sdk.PluginSDK]
	p := &plugin{start: func(s *sdk.PluginSDK) error {
		sdkRef.Store(s)
		must(t, s.RegisterTool("add", noArgs(), func(map[string]interface{}) (interface{}, error) {
			err := s.RegisterTool("added", noArgs(), func(map[string]interface{}) (interface{}, error) { return "I am new", nil })
			if err != nil {
				return nil, err
			}
			return "registered", s.RegisterTool("added", noArgs(), func(map[string]interface{}) (interface{}, error) { return nil, nil })
		}))
		return s.RegisterTool("remove", noArgs(), func(map[string]interface{}) (interface{}, error) {
			return "removed", s.UnregisterTool("added")
		})
	}}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Quiet: true})
	r, err := b.Call("add", nil)
	must(t, err)
	if r.Error != `plugin test: tool name "added" is registered twice` {
		t.Errorf("add: %+v", r)
	}
	if got := b.Tools(); !slices.Equal(got, []string{"add", "added", "remove"}) {
		t.Errorf("tools after add: %v", got)
	}
	r, err = b.Call("added", nil)
	if err != nil || r.Content != "I am new" {
		t.Errorf("added: %+v %v", r, err)
	}
	r, err = b.Call("remove", nil)
	if err != nil || !r.Success {
		t.Errorf("remove: %+v %v", r, err)
	}
	if got := b.Tools(); !slices.Equal(got, []string{"add", "remove"}) {
		t.Errorf("tools after remove: %v", got)
	}
	r, err = b.Call("added", nil)
	if err != nil || r.Error != `plugin test has no tool named "added"` {
		t.Errorf("added after remove: %+v %v", r, err)
	}
	regs := b.RuntimeRegistrations()
	if len(regs) != 2 || regs[0].GetRegisterTool().GetRequestId() != "go-1" || regs[1].GetUnregisterTool().GetRequestId() != "go-2" {
		t.Errorf("runtime registrations %v", regs)
	}
	// Stage hooks only in Start: logged after it.
	sdkRef.Load().RegisterStage(sdk.StageOnInput, func(*sdk.StageContext) error { return nil })
	if logs := strings.Join(b.Logs(), "\n"); !strings.Contains(logs, "stage hook on_input: stage hooks can only be registered in Start") {
		t.Errorf("late RegisterStage not logged:\n%s", logs)
	}
}

// settings is a fake Settings service that checks the token of each call.
type settings struct {
	pb.UnimplementedSettingsServer
	tokens chan string
}

func (s *settings) Get(ctx context.Context, req *pb.KeyRequest) (*pb.ValueResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.tokens <- strings.Join(md.Get("x-hearth-token"), ",")
	if req.Key != "city" {
		return nil, status.Errorf(codes.NotFound, "no `%s` in config_test", req.Key)
	}
	return &pb.ValueResponse{ValueJson: `"北京"`}, nil
}

func TestHostServicesCarryTheToken(t *testing.T) {
	fake := &settings{tokens: make(chan string, 10)}
	var inStart any
	p := &plugin{start: func(s *sdk.PluginSDK) error {
		inStart, _ = s.Settings().Get("city")
		return s.RegisterTool("where", noArgs(), func(map[string]interface{}) (interface{}, error) {
			v, err := s.Settings().Get("city")
			if err != nil {
				return nil, err
			}
			_, err = s.Settings().Get("missing")
			var he *sdk.HostError
			if !errors.As(err, &he) || he.Code() != codes.NotFound || sdk.CodeName(he.Code()) != "NOT_FOUND" {
				return nil, fmt.Errorf("missing key: %v", err)
			}
			return v, nil
		})
	}}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Token: "tok-123", Quiet: true, Services: func(s *grpc.Server) {
		pb.RegisterSettingsServer(s, fake)
	}})
	r, err := b.Call("where", nil)
	if err != nil || r.Content != "北京" || inStart != "北京" {
		t.Errorf("%+v %v (in Start: %v)", r, err, inStart)
	}
	close(fake.tokens)
	for tok := range fake.tokens {
		if tok != "tok-123" {
			t.Errorf("a host call carried token %q", tok)
		}
	}

	// Not served: host calls fail clearly, registrations are collected.
	var zero sdk.PluginSDK
	_, err = zero.Settings().Get("x")
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("zero PluginSDK: %v", err)
	}
	if err := zero.RegisterTool("x", noArgs(), func(map[string]interface{}) (interface{}, error) { return nil, nil }); err != nil {
		t.Errorf("zero PluginSDK RegisterTool: %v", err)
	}
}

func TestResultsThatCannotBeSentBecomeErrors(t *testing.T) {
	p := &plugin{start: func(s *sdk.PluginSDK) error {
		must(t, s.RegisterTool("huge", noArgs(), func(map[string]interface{}) (interface{}, error) {
			return strings.Repeat("x", 64<<20), nil
		}))
		must(t, s.RegisterTool("latin1", noArgs(), func(map[string]interface{}) (interface{}, error) { return "caf\xe9", nil }))
		return s.RegisterTool("ok", noArgs(), func(map[string]interface{}) (interface{}, error) { return "fine", nil })
	}}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Quiet: true})
	r, err := b.Call("huge", nil)
	if err != nil || r.Success || r.Error != "tool huge: result is 67108864 bytes, over the 64 MiB message limit" {
		t.Errorf("huge: %v %v", r.Error, err)
	}
	r, err = b.Call("latin1", nil)
	if err != nil || r.Success || r.Error != "tool latin1: result content is not valid UTF-8" {
		t.Errorf("latin1: %+v %v", r, err)
	}
	r, err = b.Call("ok", nil)
	if err != nil || r.Content != "fine" {
		t.Errorf("the session did not survive: %+v %v", r, err)
	}
}

func TestAITool(t *testing.T) {
	no := false
	p := &plugin{start: func(s *sdk.PluginSDK) error {
		must(t, s.RegisterAITool("calculator", sdk.AITool{
			Parameters: []sdk.AIToolParameter{
				{Name: "expression", Type: "string", Description: "数学表达式", Required: true},
				{Name: "precision", Type: "integer", Default: 2, Enum: []interface{}{0, 2, 4}},
			},
			Usage: "数学计算器", WhenToUse: "当用户需要进行数学计算时", Chainable: &no, MaxCalls: 3, Confirm: true, Cooldown: 1.5, Timeout: 10,
		}, func(args map[string]interface{}) (interface{}, error) {
			if args["expression"] == "1/0" {
				return map[string]interface{}{"success": false, "error": "计算错误: division by zero"}, nil
			}
			if hearth.CallFrom(args).ID() == 0 {
				return nil, errors.New("no call")
			}
			return sdk.AIToolResult{Success: true, Content: "1+1 = 2", Data: map[string]interface{}{"value": 2}}, nil
		}))
		return s.RegisterToolWith("serial_tool", noArgs(), sdk.ToolOptions{Serial: true, Title: "Serial", AI: &sdk.AITool{Confirm: true}},
			func(ctx context.Context, _ map[string]interface{}) (interface{}, error) { return "s", nil })
	}}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Quiet: true})
	spec := b.Registration().Tools[0]
	ai := spec.AiTool
	if spec.ParametersJson != "" || ai.Usage != "数学计算器" || ai.GetChainable() || ai.MaxCalls != 3 || !ai.Confirm || ai.CooldownS != 1.5 || ai.TimeoutS != 10 ||
		len(ai.Parameters) != 2 || ai.Parameters[1].DefaultJson != "2" || ai.Parameters[1].EnumJson != "[0,2,4]" || !ai.Parameters[0].Required {
		t.Errorf("ai tool spec: %v", spec)
	}
	if s2 := b.Registration().Tools[1]; !s2.Serial || s2.Title != "Serial" || !s2.AiTool.Confirm || s2.ParametersJson == "" {
		t.Errorf("serial tool spec: %v", s2)
	}
	r, err := b.Call("calculator", map[string]any{"expression": "1+1"})
	if err != nil || !r.Success || r.Content != "1+1 = 2" || r.DataJSON != `{"value":2}` {
		t.Errorf("ok: %+v %v", r, err)
	}
	r, err = b.Call("calculator", map[string]any{"expression": "1/0"})
	if err != nil || r.Success || r.Error != "计算错误: division by zero" {
		t.Errorf("failure: %+v %v", r, err)
	}
}

func TestShutdownCancelsCallsAndStops(t *testing.T) {
	started := make(chan struct{})
	cancelled := make(chan struct{})
	p := &plugin{start: func(s *sdk.PluginSDK) error {
		return s.RegisterToolContext("forever", noArgs(), func(ctx context.Context, _ map[string]interface{}) (interface{}, error) {
			close(started)
			<-ctx.Done()
			close(cancelled)
			return nil, ctx.Err()
		})
	}}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Quiet: true})
	c, err := b.Invoke("forever", nil)
	must(t, err)
	<-started
	if err := b.Shutdown(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not cancel the call in flight")
	}
	if p.stopped.Load() != 1 {
		t.Errorf("Stop ran %d times", p.stopped.Load())
	}
	if _, err := c.Result(); err == nil {
		t.Error("a call in flight at Shutdown was answered")
	}
}
