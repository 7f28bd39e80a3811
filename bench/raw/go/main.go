// Raw floor of a Go plugin for the benchmarks: the Attach stream with the generated
// stubs only (grpc-go, no SDK), as bench/raw/raw_plugin.py is for Python. Answers
// RunStage with its context unchanged, InvokeTool with its arguments as content, Ping
// with Pong; exits on Shutdown or when the stream ends. Dials HEARTH_ADDR with
// HEARTH_TOKEN like a real plugin. One writer goroutine owns Send, as grpc-go requires
// and as the SDK does, so the floor pays the same channel hop.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

const maxMsg = 64 << 20

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "raw go plugin:", err)
		os.Exit(1)
	}
}

func run() error {
	target := os.Getenv("HEARTH_ADDR")
	if rest, ok := strings.CutPrefix(target, "http://"); ok {
		target = strings.TrimSuffix(rest, "/")
	}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-hearth-token", os.Getenv("HEARTH_TOKEN"))
	stream, err := pb.NewPluginHostClient(conn).Attach(ctx)
	if err != nil {
		return err
	}
	out := make(chan *pb.PluginMessage, 64)
	done := make(chan error, 1)
	go func() {
		for m := range out {
			if err := stream.Send(m); err != nil {
				done <- err
				return
			}
		}
		done <- stream.CloseSend()
	}()
	for {
		msg, err := stream.Recv()
		if err != nil {
			close(out)
			<-done
			return nil
		}
		switch m := msg.Msg.(type) {
		case *pb.HostMessage_RunStage:
			out <- &pb.PluginMessage{Msg: &pb.PluginMessage_StageResult{StageResult: &pb.StageResult{
				CallId: m.RunStage.CallId, Context: m.RunStage.Context}}}
		case *pb.HostMessage_InvokeTool:
			out <- &pb.PluginMessage{Msg: &pb.PluginMessage_ToolResult{ToolResult: &pb.ToolResult{
				CallId: m.InvokeTool.CallId, Success: true, Content: m.InvokeTool.ArgsJson}}}
		case *pb.HostMessage_Ping:
			out <- &pb.PluginMessage{Msg: &pb.PluginMessage_Pong{Pong: &pb.Pong{Nonce: m.Ping.Nonce}}}
		case *pb.HostMessage_Shutdown:
			close(out)
			<-done
			return nil
		}
	}
}
