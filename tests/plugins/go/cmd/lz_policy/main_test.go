package main

import (
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hearth-dev/hearth/sdk-go/hearth"
	"github.com/hearth-dev/hearth/sdk-go/hearthtest"
	"github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
)

func start(t *testing.T, name, policy, triggers string) *hearthtest.Broker {
	t.Helper()
	t.Setenv("LZ_NAME", name)
	t.Setenv("LZ_POLICY", policy)
	t.Setenv("LZ_TRIGGERS", triggers)
	p, err := newPolicyPlugin()
	if err != nil {
		t.Fatal(err)
	}
	return hearthtest.StartWith(t, p, hearthtest.Options{Name: name, Quiet: true})
}

func TestRegistersTheToolWithItsPolicyAndTriggers(t *testing.T) {
	b := start(t, "cont", `{"chainable": false, "continue": true, "max_calls": 2, "cooldown": 3600, "confirm": true, "timeout": 0.5}`,
		`[{"type": 0, "pattern": "/cmd"}, {"type": 2, "pattern": "^roll (\\d+)d(\\d+)$"}, {"type": 4, "pattern": "message"}]`)
	reg := b.Registration()
	if reg.GetPlugin().GetName() != "cont" || len(reg.GetTools()) != 1 || reg.GetTools()[0].GetName() != "cont" {
		t.Fatalf("plugin %q, tools %v", reg.GetPlugin().GetName(), reg.GetTools())
	}
	ai := reg.GetTools()[0].GetAiTool()
	if ai.GetUsage() != "cont: a test tool" || ai.GetWhenToUse() != "in tests" || ai.Chainable == nil || *ai.Chainable ||
		!ai.GetContinueConversation() || ai.GetMaxCalls() != 2 || ai.GetCooldownS() != 3600 || !ai.GetConfirm() || ai.GetTimeoutS() != 0.5 {
		t.Fatalf("ai.tool %v", ai)
	}
	if ps := ai.GetParameters(); len(ps) != 1 || ps[0].GetName() != "what" || ps[0].GetType() != "string" || ps[0].GetRequired() {
		t.Fatalf("parameters %v", ps)
	}
	var trig []string
	for _, tr := range reg.GetTriggers() {
		trig = append(trig, tr.GetType().String()+" "+tr.GetPattern())
	}
	want := []string{"TRIGGER_COMMAND /cmd", `TRIGGER_REGEX ^roll (\d+)d(\d+)$`, "TRIGGER_EVENT message"}
	if !reflect.DeepEqual(trig, want) {
		t.Fatalf("triggers %q, want %q", trig, want)
	}
}

func TestDefaultsAndNoPolicy(t *testing.T) {
	b := start(t, "", "", "")
	reg := b.Registration()
	if len(reg.GetTools()) != 1 || reg.GetTools()[0].GetName() != "policy" || len(reg.GetTriggers()) != 0 {
		t.Fatalf("%v", reg)
	}
	ai := reg.GetTools()[0].GetAiTool()
	if ai.Chainable != nil || ai.GetMaxCalls() != 0 || ai.GetConfirm() || ai.GetCooldownS() != 0 {
		t.Fatalf("ai.tool %v", ai)
	}
}

func TestAMisspeltPolicyFailsTheStart(t *testing.T) {
	t.Setenv("LZ_POLICY", `{"max_call": 1}`)
	if _, err := newPolicyPlugin(); err == nil || !strings.Contains(err.Error(), `unknown field "max_call"`) {
		t.Fatalf("error %v", err)
	}
	t.Setenv("LZ_POLICY", "")
	t.Setenv("LZ_TRIGGERS", `{"type": 0}`)
	if _, err := newPolicyPlugin(); err == nil || !strings.HasPrefix(err.Error(), "LZ_TRIGGERS: ") {
		t.Fatalf("error %v", err)
	}
}

// The answers of lz_policy.py, character for character.
func TestAnswers(t *testing.T) {
	b := start(t, "limited", `{"max_calls": 1}`, `[{"type": 0, "pattern": "/cmd"}]`)
	ann := hearthtest.WithCaller(hearth.Caller{UserID: "ann"})
	for i, c := range []struct {
		args any
		want string
	}{
		{map[string]any{"what": "a"}, `limited ran #1 for ann: {"what": "a"}`},
		{map[string]any{}, `limited ran #2 for ann: {}`},
		{map[string]any{"what": "中文", "n": 2, "x": 1.5, "l": []any{true, nil, "q\"\n"}},
			`limited ran #3 for ann: {"l": [true, null, "q\"\n"], "n": 2, "what": "\u4e2d\u6587", "x": 1.5}`},
		{map[string]any{"what": "😀"}, `limited ran #4 for ann: {"what": "\ud83d\ude00"}`},
	} {
		r, err := b.Call("limited", c.args, ann)
		if err != nil || !r.Success || r.Content != c.want {
			t.Fatalf("call %d: %+v, %v\nwant %s", i, r, err, c.want)
		}
	}
	r, err := b.Call("limited", map[string]any{})
	if err != nil || r.Content != "limited ran #5 for : {}" {
		t.Fatalf("%+v, %v", r, err)
	}

	trig := sdk.Trigger{Type: sdk.TriggerCommand, Pattern: "/cmd"}
	p, err := b.StartEvent(trig, `/cmd a "b c" twice 中文`, []string{"a", "b c", "twice", "中文"}, ann)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := p.EventResult()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`limited got ["a", "b c", "twice", "中文"] from ann`, "limited again"}
	if !reflect.DeepEqual(ev.Replies, want) || ev.Error != "" {
		t.Fatalf("%q, %q", ev.Replies, ev.Error)
	}
	ev, err = b.Event(trig, "/cmd")
	if err != nil || !reflect.DeepEqual(ev.Replies, []string{"limited got [] from "}) {
		t.Fatalf("%+v, %v", ev, err)
	}
}

// sleep:<ms> sleeps, and a cancelled sleep ends at once, without counting or answering.
func TestSleepAndCancel(t *testing.T) {
	b := start(t, "slow", `{"timeout": 0.5}`, "")
	t0 := time.Now()
	r, err := b.Call("slow", map[string]any{"what": "sleep:200"})
	if err != nil || !r.Success || !strings.HasPrefix(r.Content, "slow ran #1 for : ") || time.Since(t0) < 200*time.Millisecond {
		t.Fatalf("%+v, %v after %v", r, err, time.Since(t0))
	}
	p, err := b.Invoke("slow", map[string]any{"what": "sleep:300"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := p.Cancel("timed out"); err != nil {
		t.Fatal(err)
	}
	// Had the handler slept on, it would have counted its call by now.
	time.Sleep(500 * time.Millisecond)
	r, err = b.Call("slow", map[string]any{})
	if err != nil || r.Content != "slow ran #2 for : {}" {
		t.Fatalf("the cancelled call counted: %+v, %v", r, err)
	}
	if late := b.Late(); len(late) != 0 {
		t.Fatalf("answered a cancelled call: %v", late)
	}
}

// TestJSONLikePython compares pyJSON with Python's json.dumps on the same values, when a
// python3 is on PATH.
func TestJSONLikePython(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	value := `{"b": [1, 2.5, -3, 1e-07, 123456789, "tab\there", "\u007f\u0001", "é😀中", {"z": null, "a": false}], "a": "\"\\/"}`
	for _, ascii := range []bool{true, false} {
		script := "import json, sys; sys.stdout.write(json.dumps(json.loads(sys.argv[1]), sort_keys=True, ensure_ascii=" +
			map[bool]string{true: "True", false: "False"}[ascii] + "))"
		out, err := exec.Command(python, "-c", script, value).Output()
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := decodeStrict(value, &v); err != nil {
			t.Fatal(err)
		}
		if got := pyJSON(v, ascii); got != string(out) {
			t.Errorf("ensure_ascii=%v:\n Go:     %s\n Python: %s", ascii, got, out)
		}
	}
}
