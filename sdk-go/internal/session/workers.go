package session

import "time"

// workers runs each call on a goroutine of its own, reusing goroutines that
// finished a call: a fresh goroutine starts with a small stack that decoding the
// arguments (encoding/json's recursion) grows by copying — measured as a quarter
// of the CPU of a small tool call. A finished goroutine waits idleWorker for its
// next call, then exits. Calls never wait for each other: with no goroutine idle a
// new one starts.
type workers struct {
	idle chan func() // unbuffered: a send succeeds only into a waiting goroutine
}

// idleWorker is how long a goroutine waits for another call before it exits.
const idleWorker = 10 * time.Second

func newWorkers() *workers { return &workers{idle: make(chan func())} }

// run runs task on an idle goroutine, or a new one.
func (w *workers) run(task func()) {
	select {
	case w.idle <- task:
	default:
		go w.loop(task)
	}
}

func (w *workers) loop(task func()) {
	var t *time.Timer
	for {
		task()
		task = nil
		if t == nil {
			t = time.NewTimer(idleWorker)
		} else {
			t.Reset(idleWorker)
		}
		select {
		case task = <-w.idle:
			if !t.Stop() {
				<-t.C
			}
		case <-t.C:
			return
		}
	}
}
