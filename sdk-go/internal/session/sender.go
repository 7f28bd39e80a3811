package session

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// Sender is a message that matched one of the plugin's triggers, as LinkZone's
// `handleEvent(sender)` receives it: Param(i) is `sender.param(i)`, Reply(text) is
// `sender.reply(text)` (any number of times; each text reaches the user). Methods
// are safe for concurrent use.
type Sender struct {
	c       *Call
	message string
	params  []string
	trigger Trigger
}

// Message is the full message text that matched.
func (s *Sender) Message() string { return s.message }

// Param is parameter i (0-based) parsed from the message, "" when there is none.
func (s *Sender) Param(i int) string {
	if i < 0 || i >= len(s.params) {
		return ""
	}
	return s.params[i]
}

// Params is a copy of every parsed parameter.
func (s *Sender) Params() []string { return append([]string(nil), s.params...) }

// Trigger is the trigger the message matched.
func (s *Sender) Trigger() Trigger { return s.trigger }

// Caller is who wrote the message.
func (s *Sender) Caller() Caller { return s.c.caller }

// Context is the event's context: done when the broker cancels it or the plugin
// shuts down.
func (s *Sender) Context() context.Context { return s.c.Context() }

// Call is the event's Call (id, trace context, timeout).
func (s *Sender) Call() *Call { return s.c }

// Reply sends text to the user (LinkZone `sender.reply`). It fails when the handler
// has already returned, the event was cancelled, the session is gone, or text is
// not valid UTF-8.
func (s *Sender) Reply(text string) error {
	c := s.c
	if c.s == nil {
		return errors.New("reply: the event is not served by a broker")
	}
	if c.ended.Load() {
		return fmt.Errorf("reply: event %d of trigger %s has already finished", c.id, s.trigger)
	}
	if err := c.cctx.Err(); err != nil {
		return fmt.Errorf("reply: event %d of trigger %s: %w", c.id, s.trigger, context.Cause(&c.cctx))
	}
	if !utf8.ValidString(text) {
		return fmt.Errorf("reply: event %d of trigger %s: text is not valid UTF-8", c.id, s.trigger)
	}
	if len(text) > MaxMessageBytes-1024 {
		return fmt.Errorf("reply: event %d of trigger %s: text is %d bytes, over the %d MiB message limit", c.id, s.trigger, len(text), MaxMessageBytes>>20)
	}
	if !c.s.w.send(&pb.PluginMessage{Msg: &pb.PluginMessage_Reply{Reply: &pb.Reply{CallId: c.id, Text: text}}}) {
		return errors.New("reply: the session with the broker has ended")
	}
	return nil
}
