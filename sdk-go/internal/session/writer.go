package session

import (
	"sync"
	"time"

	"google.golang.org/grpc"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// writer is the one goroutine that calls stream.Send (grpc-go allows one sender and
// one receiver at a time, not two senders). Everything the plugin sends is queued
// here without blocking the caller; pongs have a channel of their own that the
// writer drains before every message, so a queue of results never delays them.
type writer struct {
	stream grpc.BidiStreamingClient[pb.PluginMessage, pb.HostMessage]

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

// send queues m; false when the writer is closing or dead (the message is dropped).
func (w *writer) send(m *pb.PluginMessage) bool {
	w.mu.Lock()
	if w.closing || w.dead {
		w.mu.Unlock()
		return false
	}
	w.queue = append(w.queue, m)
	w.mu.Unlock()
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

func (w *writer) run() {
	defer close(w.done)
	firstSent := false
	sendOne := func(m *pb.PluginMessage) bool {
		if err := w.stream.Send(m); err != nil {
			w.mu.Lock()
			w.dead, w.err = true, err
			w.queue = nil
			w.mu.Unlock()
			return false
		}
		if !firstSent {
			firstSent = true
			close(w.first)
		}
		return true
	}
	pong := func(nonce uint64) bool {
		return sendOne(&pb.PluginMessage{Msg: &pb.PluginMessage_Pong{Pong: &pb.Pong{Nonce: nonce}}})
	}
	for {
		// Pongs first.
		select {
		case n := <-w.pongs:
			if !pong(n) {
				return
			}
			continue
		default:
		}
		w.mu.Lock()
		if len(w.queue) == 0 {
			closing := w.closing
			w.mu.Unlock()
			if closing {
				_ = w.stream.CloseSend()
				return
			}
			select {
			case n := <-w.pongs:
				if !pong(n) {
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
		for i, m := range batch {
			select {
			case n := <-w.pongs:
				if !pong(n) {
					return
				}
			default:
			}
			if !sendOne(m) {
				return
			}
			batch[i] = nil
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
