package session

import (
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// Batch limits (the broker's HostBatch limits): at most batchMsgs messages and
// batchBytes bytes in one PluginBatch; a larger message goes alone.
const (
	batchMsgs  = 64
	batchBytes = 256 * 1024
)

// writer sends what the plugin sends (grpc-go allows one sender and one receiver at
// a time, not two senders; sendMu is the one sender). A message goes out from the
// goroutine that sends it when nothing is queued and no send is under way (one
// goroutine hand-off less per call); otherwise it is queued without blocking the
// caller, and the writer goroutine sends the queue, in order — as PluginBatch
// messages once both sides agreed on "batch". Pongs have a channel of their own that
// the writer drains before every message, so a queue of results never delays them.
type writer struct {
	stream grpc.BidiStreamingClient[pb.PluginMessage, pb.HostMessage]

	// batching: Registered.features lists "batch".
	batching atomic.Bool
	// sendMu is held around every stream.Send.
	sendMu sync.Mutex
	// firstSent: Hello was handed to the transport (w.first is closed).
	firstSent bool

	mu      sync.Mutex
	queue   []*pb.PluginMessage
	spare   []*pb.PluginMessage
	closing bool // no more messages; CloseSend once the queue is written
	dead    bool // Send failed: nothing more goes out
	err     error

	wake  chan struct{} // a message was queued or closing was set
	pongs chan uint64
	// first is closed once the first message (Hello) has been handed to the
	// transport (the AfterHello test knob waits for it).
	first chan struct{}
	done  chan struct{} // closed when the goroutine returns
}

func newWriter(stream grpc.BidiStreamingClient[pb.PluginMessage, pb.HostMessage]) *writer {
	return &writer{
		stream: stream,
		wake:   make(chan struct{}, 1),
		pongs:  make(chan uint64, 16),
		first:  make(chan struct{}),
		done:   make(chan struct{}),
	}
}

// send sends or queues m; false when the writer is closing or dead (the message is
// dropped).
func (w *writer) send(m *pb.PluginMessage) bool {
	if w.sendMu.TryLock() {
		w.mu.Lock()
		if w.closing || w.dead {
			w.mu.Unlock()
			w.sendMu.Unlock()
			return false
		}
		if len(w.queue) == 0 {
			// Nothing before it: send it from here.
			w.mu.Unlock()
			w.sendOne(m)
			w.sendMu.Unlock()
			return true
		}
		w.queue = append(w.queue, m)
		w.mu.Unlock()
		w.sendMu.Unlock()
	} else {
		w.mu.Lock()
		if w.closing || w.dead {
			w.mu.Unlock()
			return false
		}
		w.queue = append(w.queue, m)
		w.mu.Unlock()
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return true
}

// pong queues a Pong ahead of everything else.
func (w *writer) pong(nonce uint64) {
	select {
	case w.pongs <- nonce:
	case <-w.done:
	}
}

// close writes what is queued, then half-closes the stream; it waits up to budget
// for that to happen.
func (w *writer) close(budget time.Duration) {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	t := time.NewTimer(budget)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
	}
}

// failure is the Send error that stopped the writer, if any.
func (w *writer) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// sendOne hands m to the transport (sendMu held); false once sending failed.
func (w *writer) sendOne(m *pb.PluginMessage) bool {
	if err := w.stream.Send(m); err != nil {
		w.mu.Lock()
		w.dead, w.err = true, err
		w.queue = nil
		w.mu.Unlock()
		return false
	}
	if !w.firstSent {
		w.firstSent = true
		close(w.first)
	}
	return true
}

// sendAll sends batch in order (sendMu held): in PluginBatch messages of what fits
// when batching, else one by one; pongs waiting go first. False once sending failed.
func (w *writer) sendAll(batch []*pb.PluginMessage) bool {
	batching := w.batching.Load() && len(batch) > 1
	for i := 0; i < len(batch); {
		select {
		case n := <-w.pongs:
			if !w.sendPong(n) {
				return false
			}
		default:
		}
		m, next := batch[i], i+1
		if batching {
			size := proto.Size(m)
			for next < len(batch) && next-i < batchMsgs {
				size += proto.Size(batch[next])
				if size > batchBytes {
					break
				}
				next++
			}
			if next-i > 1 {
				m = &pb.PluginMessage{Msg: &pb.PluginMessage_Batch{Batch: &pb.PluginBatch{
					Msgs: append([]*pb.PluginMessage(nil), batch[i:next]...)}}}
			}
		}
		if !w.sendOne(m) {
			return false
		}
		for ; i < next; i++ {
			batch[i] = nil
		}
	}
	return true
}

// sendPong sends a Pong (sendMu held).
func (w *writer) sendPong(nonce uint64) bool {
	return w.sendOne(&pb.PluginMessage{Msg: &pb.PluginMessage_Pong{Pong: &pb.Pong{Nonce: nonce}}})
}

func (w *writer) run() {
	defer close(w.done)
	for {
		// Pongs first.
		select {
		case n := <-w.pongs:
			w.sendMu.Lock()
			ok := w.sendPong(n)
			w.sendMu.Unlock()
			if !ok {
				return
			}
			continue
		default:
		}
		w.sendMu.Lock()
		w.mu.Lock()
		if len(w.queue) == 0 {
			closing := w.closing
			w.mu.Unlock()
			if closing {
				_ = w.stream.CloseSend()
				w.sendMu.Unlock()
				return
			}
			w.sendMu.Unlock()
			select {
			case n := <-w.pongs:
				w.sendMu.Lock()
				ok := w.sendPong(n)
				w.sendMu.Unlock()
				if !ok {
					return
				}
			case <-w.wake:
			}
			continue
		}
		// Swap buffers: handlers append to the other one while this batch is sent.
		batch := w.queue
		w.queue, w.spare = w.spare[:0], nil
		w.mu.Unlock()
		ok := w.sendAll(batch)
		w.sendMu.Unlock()
		if !ok {
			return
		}
		w.mu.Lock()
		if cap(batch) <= 1024 {
			w.spare = batch[:0]
		} else {
			w.spare = nil
		}
		w.mu.Unlock()
	}
}
