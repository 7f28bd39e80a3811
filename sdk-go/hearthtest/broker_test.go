package hearthtest_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/hearth-dev/hearth/sdk-go/hearth"
	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
	"github.com/hearth-dev/hearth/sdk-go/hearthtest"
	"github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
)

type progressPlugin struct{ release chan struct{} }

func (progressPlugin) Name() string { return "progress" }
func (progressPlugin) Stop() error  { return nil }
func (p progressPlugin) Start(s *sdk.PluginSDK) error {
	return s.RegisterTool("steps", sdk.ToolDef{}, func(args map[string]interface{}) (interface{}, error) {
		call := hearth.CallFrom(args)
		call.ProgressCount("step 1", 1, 2)
		call.ProgressCount("step 2", 2, 2)
		<-p.release
		return "done", nil
	})
}

func TestWaitProgressWhileTheCallRuns(t *testing.T) {
	p := progressPlugin{release: make(chan struct{})}
	b := hearthtest.StartWith(t, p, hearthtest.Options{Quiet: true})
	c, err := b.Invoke("steps", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.WaitProgress(2)
	if err != nil || len(got) != 2 || got[1].Message != "step 2" || got[1].Fraction != 1 {
		t.Fatalf("progress %v %v", got, err)
	}
	select {
	case <-c.Done():
		t.Fatal("the call ended before it was released")
	default:
	}
	close(p.release)
	r, err := c.Result()
	if err != nil || r.Content != "done" || len(r.Progress) != 2 {
		t.Errorf("%+v %v", r, err)
	}
}

// A client without the SDK: the broker's registration rules reject bad items by
// name and register the rest.
func TestRegistrationRulesOnARawClient(t *testing.T) {
	b := hearthtest.NewBroker(t, hearthtest.Options{Quiet: true})
	conn, err := grpc.NewClient("passthrough:///hearthtest", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(b.Dialer()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-hearth-token", "hearthtest-token")
	stream, err := pb.NewPluginHostClient(conn).Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&pb.PluginMessage{Msg: &pb.PluginMessage_Hello{Hello: &pb.Hello{ProtocolVersion: "1.2.0", Sdk: "raw"}}})
	stream.Send(&pb.PluginMessage{Msg: &pb.PluginMessage_Register{Register: &pb.Register{
		Tools: []*pb.ToolSpec{
			{Name: "ok", ParametersJson: `{"type":"object"}`},
			{Name: "bad name"},
			{Name: "arr", ParametersJson: `{"type":"array"}`},
			{Name: "ok"},
		},
		Stages:   []*pb.StageHook{{Stage: pb.Stage_STAGE_UNSPECIFIED, HookId: "x"}},
		Triggers: []*pb.Trigger{{Type: pb.TriggerType_TRIGGER_COMMAND}},
	}}})
	m, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	reg := m.GetRegistered()
	if reg == nil || strings.Join(reg.Tools, ",") != "ok" || len(reg.Rejected) != 5 {
		t.Fatalf("answer %v", m)
	}
	var reasons []string
	for _, r := range reg.Rejected {
		reasons = append(reasons, r.Kind+" "+r.Name+": "+r.Reason)
	}
	want := "tool bad name: tool \"bad name\": name contains ' '; use letters, digits, `_` and `-`|" +
		"tool arr: parameters must describe an object (\"type\": \"object\"), not array|" +
		"tool ok: duplicate tool name|stage x: unknown stage 0|trigger TRIGGER_COMMAND: empty pattern"
	if got := strings.Join(reasons, "|"); got != want {
		t.Errorf("rejected:\n%s\nwant\n%s", got, want)
	}
	if err := b.WaitRegistered(); err != nil {
		t.Error(err)
	}
	if err := b.Wait(); err == nil {
		t.Error("Wait on a broker without a launched plugin returned nil")
	}
}

type batchEchoPlugin struct{}

func (batchEchoPlugin) Name() string { return "echo" }
func (batchEchoPlugin) Stop() error  { return nil }
func (batchEchoPlugin) Start(s *sdk.PluginSDK) error {
	return s.RegisterTool("echo", sdk.ToolDef{}, func(args map[string]interface{}) (interface{}, error) {
		return args["i"], nil
	})
}

func TestCallsStartedInOneHostBatchAreEachAnswered(t *testing.T) {
	b := hearthtest.StartWith(t, batchEchoPlugin{}, hearthtest.Options{Quiet: true})
	if !strings.Contains(strings.Join(b.Hello().Features, ","), "batch") {
		t.Fatalf("Hello.features %v lacks batch", b.Hello().Features)
	}
	var calls []*hearthtest.Pending
	if err := b.Batched(func() {
		for i := 0; i < 20; i++ {
			p, err := b.Invoke("echo", map[string]int{"i": i})
			if err != nil {
				t.Fatal(err)
			}
			calls = append(calls, p)
		}
	}); err != nil {
		t.Fatal(err)
	}
	for i, p := range calls {
		r, err := p.Result()
		if err != nil || !r.Success || r.Content != strconv.Itoa(i) {
			t.Fatalf("call %d: %+v, %v", i, r, err)
		}
	}
	// A nested batch is ignored with a log line; the session goes on.
	if err := b.Send(&pb.HostMessage{Msg: &pb.HostMessage_Batch{Batch: &pb.HostBatch{Msgs: []*pb.HostMessage{
		{Msg: &pb.HostMessage_Batch{Batch: &pb.HostBatch{}}}}}}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Ping(); err != nil {
		t.Fatal(err)
	}
	if r, err := b.Call("echo", map[string]int{"i": 7}); err != nil || r.Content != "7" {
		t.Fatalf("after a nested batch: %+v, %v", r, err)
	}
}
