package hearthtest_test

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
	"github.com/hearth-dev/hearth/sdk-go/hearthtest"
	"github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
)

// echoPlugin is the SDK side of the benchmark: a HomeAgent tool that returns its
// arguments, a no-op stage hook.
type echoPlugin struct{}

func (echoPlugin) Name() string { return "echo" }
func (echoPlugin) Stop() error  { return nil }
func (echoPlugin) Start(s *sdk.PluginSDK) error {
	s.RegisterStage(sdk.StagePreAction, func(*sdk.StageContext) error { return nil })
	return s.RegisterTool("echo", sdk.ToolDef{Description: "echo"}, func(args map[string]interface{}) (interface{}, error) {
		return args, nil
	})
}

// rawPlugin is the floor: the Attach stream with the generated stubs only (as
// bench/raw/go), answering InvokeTool with its arguments and RunStage with its
// context unchanged, one writer goroutine owning Send.
type rawPlugin struct{}

func (rawPlugin) serve(ctx context.Context, br *hearthtest.Broker, token string) error {
	conn, err := grpc.NewClient("passthrough:///hearthtest", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(br.Dialer()))
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := pb.NewPluginHostClient(conn).Attach(metadata.AppendToOutgoingContext(ctx, "x-hearth-token", token))
	if err != nil {
		return err
	}
	out := make(chan *pb.PluginMessage, 64)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m := range out {
			if stream.Send(m) != nil {
				return
			}
		}
		stream.CloseSend()
	}()
	out <- &pb.PluginMessage{Msg: &pb.PluginMessage_Hello{Hello: &pb.Hello{ProtocolVersion: "1.0.0", Sdk: "raw"}}}
	out <- &pb.PluginMessage{Msg: &pb.PluginMessage_Register{Register: &pb.Register{
		Plugin: &pb.PluginInfo{Name: "raw"},
		Tools:  []*pb.ToolSpec{{Name: "echo", ParametersJson: `{"type":"object"}`}},
		Stages: []*pb.StageHook{{Stage: pb.Stage_STAGE_PRE_ACTION, HookId: "pre_action#0"}},
	}}}
	for {
		m, err := stream.Recv()
		if err != nil {
			close(out)
			wg.Wait()
			return nil
		}
		switch x := m.Msg.(type) {
		case *pb.HostMessage_Ping:
			out <- &pb.PluginMessage{Msg: &pb.PluginMessage_Pong{Pong: &pb.Pong{Nonce: x.Ping.Nonce}}}
		case *pb.HostMessage_InvokeTool:
			out <- &pb.PluginMessage{Msg: &pb.PluginMessage_ToolResult{ToolResult: &pb.ToolResult{
				CallId: x.InvokeTool.CallId, Success: true, Content: x.InvokeTool.ArgsJson}}}
		case *pb.HostMessage_RunStage:
			out <- &pb.PluginMessage{Msg: &pb.PluginMessage_StageResult{StageResult: &pb.StageResult{
				CallId: x.RunStage.CallId, Context: x.RunStage.Context}}}
		case *pb.HostMessage_Shutdown:
			close(out)
			wg.Wait()
			return nil
		}
	}
}

const benchArgs = `{"city":"Paris","days":3,"units":"metric"}`

func benchCalls(b *testing.B, br *hearthtest.Broker) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := br.Call("echo", benchArgs)
		if err != nil || !r.Success {
			b.Fatalf("call: %+v %v", r, err)
		}
	}
}

func benchParallel(b *testing.B, br *hearthtest.Broker) {
	b.ReportAllocs()
	b.SetParallelism(8) // 16 in flight on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, err := br.Call("echo", benchArgs)
			if err != nil || !r.Success {
				b.Errorf("call: %+v %v", r, err)
				return
			}
		}
	})
}

func benchStage(b *testing.B, br *hearthtest.Broker) {
	ctx := &pb.StageContext{UserId: "u1", ContextMsgsJson: `[{"role":"user","content":"hi"}]`, ExtraJson: `{"k":1}`}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := br.RunHook("pre_action#0", ctx)
		if err != nil || r.Error != "" {
			b.Fatalf("hook: %+v %v", r, err)
		}
	}
}

func rawBroker(b *testing.B) *hearthtest.Broker {
	br := hearthtest.NewBroker(b, hearthtest.Options{Quiet: true})
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	go rawPlugin{}.serve(ctx, br, "hearthtest-token")
	if err := br.WaitRegistered(); err != nil {
		b.Fatal(err)
	}
	return br
}

func sdkBroker(b *testing.B) *hearthtest.Broker {
	return hearthtest.StartWith(b, echoPlugin{}, hearthtest.Options{Quiet: true})
}

// BenchmarkToolCall compares one tool call at a time through the SDK with the same
// call answered by a raw grpc-go plugin (stubs only) on the same fake broker.
func BenchmarkToolCall(b *testing.B) {
	b.Run("raw", func(b *testing.B) { benchCalls(b, rawBroker(b)) })
	b.Run("sdk", func(b *testing.B) { benchCalls(b, sdkBroker(b)) })
}

// BenchmarkToolCallParallel is BenchmarkToolCall with 16 calls in flight.
func BenchmarkToolCallParallel(b *testing.B) {
	b.Run("raw", func(b *testing.B) { benchParallel(b, rawBroker(b)) })
	b.Run("sdk", func(b *testing.B) { benchParallel(b, sdkBroker(b)) })
}

// BenchmarkStageHook compares a no-op pre_action hook through the SDK with the raw
// plugin echoing the context.
func BenchmarkStageHook(b *testing.B) {
	b.Run("raw", func(b *testing.B) { benchStage(b, rawBroker(b)) })
	b.Run("sdk", func(b *testing.B) { benchStage(b, sdkBroker(b)) })
}
