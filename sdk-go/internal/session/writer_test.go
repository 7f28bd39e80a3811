package session

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// fakeStream records what the writer sends; while gate is set, Send waits on it.
type fakeStream struct {
	sent  chan *pb.PluginMessage
	gate  chan struct{}
	enter chan struct{} // a Send began
}

func (f *fakeStream) Send(m *pb.PluginMessage) error {
	f.enter <- struct{}{}
	if f.gate != nil {
		<-f.gate
	}
	f.sent <- m
	return nil
}
func (f *fakeStream) Recv() (*pb.HostMessage, error) { select {} }
func (f *fakeStream) Header() (metadata.MD, error)   { return nil, nil }
func (f *fakeStream) Trailer() metadata.MD           { return nil }
func (f *fakeStream) CloseSend() error               { return nil }
func (f *fakeStream) Context() context.Context       { return context.Background() }
func (f *fakeStream) SendMsg(any) error              { return nil }
func (f *fakeStream) RecvMsg(any) error              { return nil }

func result(id uint64, content string) *pb.PluginMessage {
	return &pb.PluginMessage{Msg: &pb.PluginMessage_ToolResult{ToolResult: &pb.ToolResult{CallId: id, Content: content}}}
}

// ids lists the call ids of m, a ToolResult or a PluginBatch of them.
func ids(m *pb.PluginMessage) []uint64 {
	if b := m.GetBatch(); b != nil {
		var out []uint64
		for _, inner := range b.GetMsgs() {
			out = append(out, ids(inner)...)
		}
		return out
	}
	return []uint64{m.GetToolResult().GetCallId()}
}

func TestWriterSendsAtOnceWhenIdleAndBatchesWhatQueuesBehindASend(t *testing.T) {
	for _, batching := range []bool{true, false} {
		f := &fakeStream{sent: make(chan *pb.PluginMessage, 200), enter: make(chan struct{}, 200)}
		w := newWriter(f)
		w.batching.Store(batching)
		go w.run()

		// Idle: the message goes out from the sending goroutine itself.
		w.send(result(1, "a"))
		if got := ids(<-f.sent); len(got) != 1 || got[0] != 1 {
			t.Fatalf("idle send: %v", got)
		}
		<-f.enter

		// A send that blocks in the transport holds 100 results (and one over the
		// byte limit) behind it; they go out in order once it returns.
		f.gate = make(chan struct{})
		go w.send(result(2, "b"))
		<-f.enter
		for id := uint64(3); id <= 102; id++ {
			w.send(result(id, "c"))
		}
		w.send(result(103, strings.Repeat("x", batchBytes)))
		w.send(result(104, "d"))
		close(f.gate)
		var got []uint64
		var messages []int
		for len(got) < 103 {
			select {
			case m := <-f.sent:
				got = append(got, ids(m)...)
				messages = append(messages, len(ids(m)))
			case <-time.After(5 * time.Second):
				t.Fatalf("batching=%v: only %v arrived", batching, got)
			}
		}
		for i, id := range got {
			if id != uint64(i+2) {
				t.Fatalf("batching=%v: out of order: %v", batching, got)
			}
		}
		if batching {
			// 2 alone (it was being sent), 3..66 and 67..102 in batches of at most
			// batchMsgs, 103 alone (over batchBytes), 104 alone (nothing left to join).
			want := []int{1, batchMsgs, 100 - batchMsgs, 1, 1}
			if len(messages) != len(want) {
				t.Fatalf("messages %v, want %v", messages, want)
			}
			for i := range want {
				if messages[i] != want[i] {
					t.Fatalf("messages %v, want %v", messages, want)
				}
			}
		} else if len(messages) != 103 {
			t.Fatalf("without batching %d messages for 103 results", len(messages))
		}
		w.close(time.Second)
	}
}
