package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// Process exit codes, as the other SDKs use them.
const (
	// ExitOK: after Shutdown, or when the broker ended the session cleanly.
	ExitOK = 0
	// ExitFailed: the session failed (broker unreachable, UNAUTHENTICATED, stream
	// reset, closed before answering Register).
	ExitFailed = 1
	// ExitConfig: the plugin cannot be served (bad environment, not a plugin, its
	// start-up or registration failed).
	ExitConfig = 2
	// ExitRejected: the broker rejected the registration.
	ExitRejected = 3
)

// ExitError is why serving ended, with the process exit code that goes with it.
type ExitError struct {
	// Code is ExitFailed, ExitConfig or ExitRejected.
	Code int
	// Err says what failed, naming the plugin.
	Err error
}

// Error is the cause's text.
func (e *ExitError) Error() string { return e.Err.Error() }

// Unwrap is the cause.
func (e *ExitError) Unwrap() error { return e.Err }

func exitErr(code int, format string, args ...any) *ExitError {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}

// Options are the test knobs of a session (hearth.Options).
type Options struct {
	// ProtocolVersion replaces ProtocolVersion in Hello ("" = the SDK's).
	ProtocolVersion string
	// AfterHello runs once Hello has been written, before Register; nothing is read
	// from the broker meanwhile. A hook that exits is a plugin dying after Hello; one
	// that never returns is a plugin that never registers.
	AfterHello func()
}

// How long Stop may take when the broker gave no grace period or went away.
const defaultStopBudget = 2 * time.Second

// How long a runtime RegisterTool / UnregisterTool waits for the broker's answer.
const registrationWait = 10 * time.Second

// Session is one plugin's session with the broker: the connection (shared with the
// host services), the tables of what it serves, and the calls in flight.
type Session struct {
	cfg     Config
	name    string
	conn    *grpc.ClientConn
	base    context.Context // the caller's values, never cancelled
	logLine func(format string, args ...any)
	w       *writer
	workers *workers

	mu      sync.Mutex
	calls   map[uint64]*Call
	closed  bool
	pending map[string]chan *pb.ToolRegistration
	reqSeq  uint64

	regMu  sync.Mutex // serializes changes of tools
	tools  atomic.Pointer[map[string]*Tool]
	hooks  map[string]*Hook
	events map[Trigger]*Event

	live  chan struct{} // closed once Register is queued
	ended chan struct{} // closed when the session ends
}

// Name is the name the broker knows the plugin by.
func (s *Session) Name() string { return s.name }

// DataDir is the plugin's own writable folder (HEARTH_PLUGIN_DATA; "" when unset).
func (s *Session) DataDir() string { return s.cfg.DataDir }

// Conn is the connection to the broker; every unary call on it carries the token.
func (s *Session) Conn() grpc.ClientConnInterface { return s.conn }

// Context is the session's context for start-up and host calls: the values of the
// context Run was given, never cancelled by the session.
func (s *Session) Context() context.Context { return s.base }

// LogLine is the plugin log's line writer (stderr unless a test replaced it); it
// adds nothing but the newline.
func (s *Session) LogLine(format string, args ...any) { s.logLine(format, args...) }

// Logf writes `hearth-plugin: plugin NAME: …` to the plugin log.
func (s *Session) Logf(format string, args ...any) { s.logf(format, args...) }

func (s *Session) logf(format string, args ...any) {
	s.logLine("hearth-plugin: plugin %s: "+format, append([]any{s.name}, args...)...)
}

// Run serves value (a plugin of a registered style) until the session ends: with
// the config of WithConfig when ctx carries one, else of the environment (FromEnv).
// It returns nil after Shutdown, when the broker ended the session cleanly, or when
// ctx is done (the plugin's Stop has run in each case); otherwise an *ExitError.
func Run(ctx context.Context, value any, opts Options) error {
	p, err := Adapt(value)
	if err != nil {
		return &ExitError{Code: ExitConfig, Err: fmt.Errorf("hearth.Serve: %w", err)}
	}
	cfg, ok := configFrom(ctx)
	if !ok {
		if cfg, err = FromEnv(); err != nil {
			return &ExitError{Code: ExitConfig, Err: err}
		}
	}
	if opts.ProtocolVersion != "" {
		cfg.ProtocolVersion = opts.ProtocolVersion
	}
	if opts.AfterHello != nil {
		cfg.AfterHello = opts.AfterHello
	}
	name := cfg.Plugin
	if name == "" {
		name = p.Name()
	}
	if name == "" {
		name = filepath.Base(os.Args[0])
	}
	logLine := cfg.Logf
	if logLine == nil {
		logLine = stderrLogf
	}
	conn, err := Dial(cfg)
	if err != nil {
		return exitErr(ExitConfig, "plugin %s: %v", name, err)
	}
	defer conn.Close()
	s := &Session{
		cfg:     cfg,
		name:    name,
		conn:    conn,
		base:    context.WithoutCancel(ctx),
		logLine: logLine,
		calls:   map[uint64]*Call{},
		pending: map[string]chan *pb.ToolRegistration{},
		live:    make(chan struct{}),
		workers: newWorkers(),
		ended:   make(chan struct{}),
	}
	empty := map[string]*Tool{}
	s.tools.Store(&empty)
	spec, err := s.startPlugin(p)
	if err != nil {
		s.closeCalls() // runtime registrations from goroutines Start began now fail
		return exitErr(ExitConfig, "plugin %s: start failed: %v", name, err)
	}
	return s.serve(ctx, p, spec)
}

// startPlugin runs p.Start; a panic is an error (with the stack in the log).
func (s *Session) startPlugin(p Plugin) (spec *Spec, err error) {
	defer func() {
		if v := recover(); v != nil {
			s.logf("start panicked: %v\n%s", v, debug.Stack())
			spec, err = nil, fmt.Errorf("panicked: %v", v)
		}
	}()
	spec, err = p.Start(s)
	if err == nil && spec == nil {
		spec = &Spec{}
	}
	return spec, err
}

// install builds the lookup tables of spec (checked by registerMessage).
func (s *Session) install(spec *Spec) {
	tools := make(map[string]*Tool, len(spec.Tools))
	for _, t := range spec.Tools {
		tools[t.Spec.Name] = t
	}
	s.tools.Store(&tools)
	s.hooks = make(map[string]*Hook, len(spec.Hooks))
	for _, h := range spec.Hooks {
		s.hooks[h.Spec.HookId] = h
	}
	s.events = make(map[Trigger]*Event, len(spec.Events))
	for _, e := range spec.Events {
		s.events[e.Trigger] = e
	}
}

// ending is how the read loop ended: the budget Stop gets and the error to return.
type ending struct {
	budget time.Duration
	err    error
}

func (s *Session) serve(ctx context.Context, p Plugin, spec *Spec) error {
	reg, err := registerMessage(s.name, spec)
	if err != nil {
		s.closeCalls()
		s.stop(p, defaultStopBudget)
		return exitErr(ExitConfig, "plugin %s: %v", s.name, err)
	}
	s.install(spec)

	streamCtx, cancelStream := context.WithCancel(ctx)
	defer cancelStream()
	streamCtx = metadata.AppendToOutgoingContext(streamCtx, TokenMetadata, s.cfg.Token)
	stream, err := pb.NewPluginHostClient(s.conn).Attach(streamCtx)
	if err != nil {
		s.closeCalls()
		s.stop(p, defaultStopBudget)
		if ctx.Err() != nil {
			return nil
		}
		st := status.Convert(err)
		return exitErr(ExitFailed, "plugin %s: attach to %s failed: %s: %s", s.name, s.cfg.Addr, CodeName(st.Code()), st.Message())
	}
	s.w = newWriter(stream)
	go s.w.run()

	version := s.cfg.ProtocolVersion
	if version == "" {
		version = ProtocolVersion
	}
	s.w.send(&pb.PluginMessage{Msg: &pb.PluginMessage_Hello{Hello: &pb.Hello{
		ProtocolVersion: version, Sdk: SDKName, SdkVersion: SDKVersion,
		Features: Features, Pid: uint32(os.Getpid()),
	}}})
	if hook := s.cfg.AfterHello; hook != nil {
		select {
		case <-s.w.first:
		case <-s.w.done:
		case <-time.After(10 * time.Second):
			s.logf("Hello not written within 10 s; running AfterHello anyway")
		}
		time.Sleep(50 * time.Millisecond) // for Hello to reach the socket
		hook()
	}
	s.w.send(&pb.PluginMessage{Msg: &pb.PluginMessage_Register{Register: reg}})
	close(s.live)

	end := s.read(ctx, stream)
	s.closeCalls()
	s.stop(p, end.budget)
	s.w.close(200 * time.Millisecond)
	return end.err
}

// read is the read loop: it answers pings at once, starts a goroutine per call and
// returns when the session ends.
func (s *Session) read(ctx context.Context, stream grpc.BidiStreamingClient[pb.PluginMessage, pb.HostMessage]) ending {
	registered := false
	for {
		m, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return ending{budget: defaultStopBudget}
			}
			if errors.Is(err, io.EOF) {
				if !registered {
					return ending{defaultStopBudget, exitErr(ExitFailed, "plugin %s: broker closed the session before answering Register", s.name)}
				}
				s.logf("the broker closed the session; exiting")
				return ending{budget: defaultStopBudget}
			}
			st := status.Convert(err)
			return ending{defaultStopBudget, exitErr(ExitFailed, "plugin %s: session stream failed: %s: %s", s.name, CodeName(st.Code()), st.Message())}
		}
		if b, ok := m.Msg.(*pb.HostMessage_Batch); ok {
			for _, inner := range b.Batch.GetMsgs() {
				if end, done := s.handle(inner, &registered); done {
					return end
				}
			}
			continue
		}
		if end, done := s.handle(m, &registered); done {
			return end
		}
	}
}

// handle acts on one broker message; done when it ends the session.
func (s *Session) handle(m *pb.HostMessage, registered *bool) (end ending, done bool) {
	switch x := m.Msg.(type) {
	case *pb.HostMessage_Ping:
		s.w.pong(x.Ping.GetNonce())
	case *pb.HostMessage_InvokeTool:
		s.invoke(x.InvokeTool)
	case *pb.HostMessage_RunStage:
		s.runStage(x.RunStage)
	case *pb.HostMessage_HandleEvent:
		s.handleEvent(x.HandleEvent)
	case *pb.HostMessage_Cancel:
		s.cancelCall(x.Cancel.GetCallId())
	case *pb.HostMessage_Registered:
		*registered = true
		for _, item := range x.Registered.GetRejected() {
			s.logf("broker rejected %s %s: %s", item.Kind, item.Name, item.Reason)
		}
		s.w.batching.Store(slices.Contains(x.Registered.GetFeatures(), "batch"))
	case *pb.HostMessage_Rejected:
		r := x.Rejected
		var items strings.Builder
		for _, item := range r.GetItems() {
			fmt.Fprintf(&items, "; %s %s: %s", item.Kind, item.Name, item.Reason)
		}
		return ending{defaultStopBudget, exitErr(ExitRejected, "plugin %s: registration rejected: %s%s", s.name, r.GetReason(), items.String())}, true
	case *pb.HostMessage_Shutdown:
		sd := x.Shutdown
		if sd.GetReason() != "" {
			s.logf("shutdown requested (%s)", sd.GetReason())
		}
		budget := defaultStopBudget
		if g := sd.GetGraceMs(); g > 0 {
			budget = time.Duration(g) * time.Millisecond * 3 / 4
		}
		return ending{budget: budget}, true
	case *pb.HostMessage_ToolRegistration:
		s.answerRegistration(x.ToolRegistration)
	case *pb.HostMessage_Batch:
		s.logf("ignoring a batch nested in a batch")
	default:
		s.logf("ignoring unsupported broker message %T", m.Msg)
	}
	return ending{}, false
}

// closeCalls ends the session's calls: no new ones start, every one in flight is
// cancelled (its answer is not sent), waiting registrations fail.
func (s *Session) closeCalls() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	calls := s.calls
	s.calls = map[uint64]*Call{}
	s.mu.Unlock()
	close(s.ended)
	for _, c := range calls {
		c.cancel()
	}
}

// stop runs the plugin's Stop within budget; errors and panics are logged.
func (s *Session) stop(p Plugin, budget time.Duration) {
	ctx, cancel := context.WithTimeout(s.base, budget)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				s.logf("stop panicked: %v\n%s", v, debug.Stack())
				done <- nil
			}
		}()
		done <- p.Stop(ctx)
	}()
	select {
	case err := <-done:
		if err != nil {
			s.logf("stop failed: %v", err)
		}
	case <-ctx.Done():
		s.logf("stop did not finish within %d ms", budget.Milliseconds())
	}
}

// RegisterTool registers t at run time (after the plugin's start-up): it sends
// RegisterTool and waits for the broker's answer. The tool serves calls from the
// moment it is sent; a refusal removes it again and is returned, naming the tool.
func (s *Session) RegisterTool(t *Tool) error {
	if t == nil || t.Spec == nil || t.Run == nil {
		return errors.New("RegisterTool: a tool without a spec or handler")
	}
	name := t.Spec.Name
	if path := invalidUTF8(t.Spec.ProtoReflect(), ""); path != "" {
		return fmt.Errorf("plugin %s: tool %s: field %s is not valid UTF-8", s.name, name, path)
	}
	if err := s.waitLive(); err != nil {
		return fmt.Errorf("plugin %s: tool %s: %w", s.name, name, err)
	}
	s.regMu.Lock()
	old := *s.tools.Load()
	if _, dup := old[name]; dup {
		s.regMu.Unlock()
		return fmt.Errorf("plugin %s: tool name %q is registered twice", s.name, name)
	}
	next := make(map[string]*Tool, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[name] = t
	s.tools.Store(&next)
	s.regMu.Unlock()

	answer, err := s.request(func(id string) *pb.PluginMessage {
		return &pb.PluginMessage{Msg: &pb.PluginMessage_RegisterTool{RegisterTool: &pb.RegisterTool{RequestId: id, Tool: t.Spec}}}
	})
	if err == nil && !answer.GetOk() {
		err = fmt.Errorf("broker refused it: %s", answer.GetError())
	}
	if err != nil {
		s.removeTool(name, t)
		return fmt.Errorf("plugin %s: tool %s not registered: %w", s.name, name, err)
	}
	return nil
}

// UnregisterTool removes tool name registered earlier by this plugin, at run time;
// it waits for the broker's answer.
func (s *Session) UnregisterTool(name string) error {
	if err := s.waitLive(); err != nil {
		return fmt.Errorf("plugin %s: tool %s: %w", s.name, name, err)
	}
	t := (*s.tools.Load())[name]
	if t == nil {
		return fmt.Errorf("plugin %s: UnregisterTool: no tool %q", s.name, name)
	}
	answer, err := s.request(func(id string) *pb.PluginMessage {
		return &pb.PluginMessage{Msg: &pb.PluginMessage_UnregisterTool{UnregisterTool: &pb.UnregisterTool{RequestId: id, Name: name}}}
	})
	if err == nil && !answer.GetOk() {
		err = fmt.Errorf("broker refused it: %s", answer.GetError())
	}
	if err != nil {
		return fmt.Errorf("plugin %s: unregister tool %s failed: %w", s.name, name, err)
	}
	s.removeTool(name, t)
	return nil
}

func (s *Session) removeTool(name string, t *Tool) {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	old := *s.tools.Load()
	if old[name] != t {
		return
	}
	next := make(map[string]*Tool, len(old))
	for k, v := range old {
		if k != name {
			next[k] = v
		}
	}
	s.tools.Store(&next)
}

// waitLive waits until Register is queued (a runtime registration must follow it).
func (s *Session) waitLive() error {
	select {
	case <-s.live:
		return nil
	case <-s.ended:
		return errors.New("the session with the broker has ended")
	}
}

// request sends the message build makes with a fresh request id and waits for the
// broker's ToolRegistration with that id.
func (s *Session) request(build func(id string) *pb.PluginMessage) (*pb.ToolRegistration, error) {
	ch := make(chan *pb.ToolRegistration, 1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("the session with the broker has ended")
	}
	s.reqSeq++
	id := fmt.Sprintf("go-%d", s.reqSeq)
	s.pending[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
	}()
	if !s.w.send(build(id)) {
		return nil, errors.New("the session with the broker has ended")
	}
	t := time.NewTimer(registrationWait)
	defer t.Stop()
	select {
	case a := <-ch:
		return a, nil
	case <-s.ended:
		return nil, errors.New("the session with the broker ended before it answered")
	case <-t.C:
		return nil, fmt.Errorf("no answer from the broker within %d s", int(registrationWait/time.Second))
	}
}

func (s *Session) answerRegistration(a *pb.ToolRegistration) {
	s.mu.Lock()
	ch := s.pending[a.GetRequestId()]
	s.mu.Unlock()
	if ch != nil {
		select {
		case ch <- a:
		default:
		}
		return
	}
	if !a.GetOk() {
		s.logf("tool %s: registration refused: %s", a.GetName(), a.GetError())
	}
}

// CodeName is a gRPC code as the spec writes it: NOT_FOUND, UNAUTHENTICATED, …
func CodeName(c codes.Code) string {
	name := c.String()
	var b strings.Builder
	for i, r := range name {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	if c == codes.OK {
		return "OK"
	}
	return b.String()
}
