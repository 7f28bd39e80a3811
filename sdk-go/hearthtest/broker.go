// Package hearthtest tests a Go plugin without a broker: a fake broker in process,
// on an in-memory gRPC connection (google.golang.org/grpc/test/bufconn), that serves
// the plugin with the SDK's real session code — the same Hello, Register, calls,
// pings, cancels and Shutdown the real broker exchanges with it.
//
//	func TestHello(t *testing.T) {
//		b := hearthtest.Start(t, &HelloPlugin{})
//		r, err := b.Call("hello", map[string]any{"name": "Ann"})
//		if err != nil || !r.Success || r.Content != "Ann，昔涟向你问好♪" {
//			t.Fatalf("got %+v, %v", r, err)
//		}
//	}
//
// What a Broker does, as the broker does it:
//
//   - Start / StartWith / Launch: serve a plugin value (anything hearth.Serve
//     takes); Registration, Tools, Hooks: what it registered (bad items rejected by
//     name, as the broker's rules do: tool names, object schemas, stages, triggers).
//   - Call, Invoke: a tool call; Invoke returns a Pending to watch Progress, Cancel
//     it, or wait for its Result. No arguments check against the schema.
//   - RunStage: every hook of a stage in registration order, through the stage
//     permission matrix (each hook gets its stage's view; writes the stage may not
//     make are dropped and reported). RunHook: one hook, raw.
//   - Event: a message for one of the plugin's triggers, with its replies.
//   - Ping, Shutdown (the plugin's Stop runs; the session's outcome is returned),
//     EndSession (the broker closing the stream), Logs (the plugin log).
//
// Host services (Settings, Memory, …) are not faked here: register your own
// implementations of the hearthpb servers with Options.Services; calls to services
// not registered fail with UNIMPLEMENTED. Every call (Attach and host calls) must
// carry the plugin's token, as with the real broker.
//
// A Broker is cleaned up with the test (tb.Cleanup): the plugin is shut down if it
// still runs, and the server stopped.
package hearthtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/hearth-dev/hearth/sdk-go/hearth"
	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
	"github.com/hearth-dev/hearth/sdk-go/internal/session"
)

// Options configure a fake broker.
type Options struct {
	// Name is the plugin's name (HEARTH_PLUGIN); default "test".
	Name string
	// Token is the spawn token the broker expects; default "hearthtest-token".
	Token string
	// PluginToken, when set, is the token the plugin is given instead of Token (a
	// wrong token: the broker answers UNAUTHENTICATED).
	PluginToken string
	// DataDir is HEARTH_PLUGIN_DATA as the plugin sees it.
	DataDir string
	// Services registers fake host services on the broker's gRPC server, e.g.
	// func(s *grpc.Server) { hearthpb.RegisterSettingsServer(s, mySettings) }.
	Services func(s *grpc.Server)
	// Reject, when set, answers the plugin's Register with Rejected{Reason: Reject}.
	Reject string
	// Timeout bounds every wait of the broker (registration, answers); default 10 s.
	Timeout time.Duration
	// Serve are the session's test knobs (protocol version, AfterHello).
	Serve hearth.Options
	// Quiet keeps the plugin log out of the test log (Logs still has it).
	Quiet bool
}

// Broker is a fake broker serving one plugin.
type Broker struct {
	tb      testing.TB
	opts    Options
	lis     *bufconn.Listener
	srv     *grpc.Server
	cancel  context.CancelFunc
	served  chan struct{} // closed when the plugin's ServeContext returned
	serveOK error         // its result (read after served is closed)

	registered chan struct{} // closed when Registered (or Rejected) was sent
	endSession chan struct{} // closed by EndSession
	endOnce    sync.Once

	sendMu sync.Mutex
	stream grpc.BidiStreamingServer[pb.PluginMessage, pb.HostMessage]
	held   []*pb.HostMessage // messages Batched holds back (nil: not batching)

	batches atomic.Int64 // PluginBatch messages received

	mu       sync.Mutex
	hello    *pb.Hello
	register *pb.Register
	answer   *pb.HostMessage // Registered or Rejected
	tools    []string
	hooks    []*pb.StageHook
	pending  map[uint64]*Pending
	pongs    map[uint64]chan struct{}
	late     []*pb.PluginMessage // answers to calls no longer pending (cancelled)
	regs     []*pb.PluginMessage // RegisterTool / UnregisterTool requests seen
	logs     []string
	closed   bool
	ended    error // why the session's stream ended; nil while it runs

	nextID atomic.Uint64
}

const defaultTimeout = 10 * time.Second

// Start serves plugin (any value hearth.Serve takes) on a fake broker and waits
// until it is registered; the test fails if it is not.
func Start(tb testing.TB, plugin any) *Broker {
	tb.Helper()
	return StartWith(tb, plugin, Options{})
}

// StartWith is Start with options.
func StartWith(tb testing.TB, plugin any, opts Options) *Broker {
	tb.Helper()
	b := Launch(tb, plugin, opts)
	if err := b.WaitRegistered(); err != nil {
		tb.Fatalf("hearthtest: %v", err)
	}
	return b
}

// Launch serves plugin on a fake broker and returns at once, for tests of plugins
// that fail to start or register: WaitRegistered and Wait tell the outcome.
func Launch(tb testing.TB, plugin any, opts Options) *Broker {
	tb.Helper()
	b := NewBroker(tb, opts)
	opts = b.opts
	token := opts.Token
	if opts.PluginToken != "" {
		token = opts.PluginToken
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	ctx = session.WithConfig(ctx, session.Config{
		Addr:        "hearthtest",
		RawTarget:   "passthrough:///hearthtest",
		Token:       token,
		Plugin:      opts.Name,
		DataDir:     opts.DataDir,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(b.Dialer())},
		Logf:        b.logLine,
	})
	b.served = make(chan struct{})
	go func() {
		defer close(b.served)
		b.serveOK = hearth.ServeContextWith(ctx, plugin, opts.Serve)
	}()
	return b
}

// NewBroker is a fake broker with no plugin: a test dials it itself (Dialer, with
// Options.Token as x-hearth-token), e.g. to drive a plugin written without the SDK.
// Wait and Shutdown then report nothing about a plugin process.
func NewBroker(tb testing.TB, opts Options) *Broker {
	tb.Helper()
	if opts.Name == "" {
		opts.Name = "test"
	}
	if opts.Token == "" {
		opts.Token = "hearthtest-token"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = defaultTimeout
	}
	b := &Broker{
		tb:         tb,
		opts:       opts,
		lis:        bufconn.Listen(1 << 20),
		cancel:     func() {},
		registered: make(chan struct{}),
		endSession: make(chan struct{}),
		pending:    map[uint64]*Pending{},
		pongs:      map[uint64]chan struct{}{},
	}
	b.srv = grpc.NewServer(
		grpc.MaxRecvMsgSize(session.MaxMessageBytes), grpc.MaxSendMsgSize(session.MaxMessageBytes),
		grpc.UnaryInterceptor(b.checkUnary),
	)
	pb.RegisterPluginHostServer(b.srv, hostServer{b: b})
	if opts.Services != nil {
		opts.Services(b.srv)
	}
	go b.srv.Serve(b.lis)
	tb.Cleanup(b.close)
	return b
}

// Dialer dials the broker's in-memory listener: use it with grpc.WithContextDialer
// and the target "passthrough:///hearthtest".
func (b *Broker) Dialer() func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, _ string) (net.Conn, error) { return b.lis.DialContext(ctx) }
}

// logLine is the plugin log: kept, and shown in the test log unless Quiet.
func (b *Broker) logLine(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	b.mu.Lock()
	b.logs = append(b.logs, line)
	show := !b.closed && !b.opts.Quiet
	b.mu.Unlock()
	if show {
		b.tb.Logf("plugin log: %s", line)
	}
}

// Logs is every line the plugin's session logged so far (not the plugin's own
// prints to stdout/stderr).
func (b *Broker) Logs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.logs...)
}

// checkUnary refuses host calls without the plugin's token, as the broker does.
func (b *Broker) checkUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := b.checkToken(ctx); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (b *Broker) checkToken(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	got := md.Get(session.TokenMetadata)
	if len(got) == 0 {
		return status.Error(codes.Unauthenticated, "missing x-hearth-token")
	}
	if got[0] != b.opts.Token {
		return status.Error(codes.Unauthenticated, "unknown or stale plugin token")
	}
	return nil
}

// WaitRegistered waits until the broker answered the plugin's Register; an error
// when the plugin ended first (its ServeContext error), was rejected, or did not
// register within the timeout.
func (b *Broker) WaitRegistered() error {
	t := time.NewTimer(b.opts.Timeout)
	defer t.Stop()
	select {
	case <-b.registered:
		b.mu.Lock()
		ans := b.answer
		b.mu.Unlock()
		if r := ans.GetRejected(); r != nil {
			return fmt.Errorf("plugin %s: registration rejected: %s", b.opts.Name, r.Reason)
		}
		return nil
	case <-b.served:
		if b.serveOK != nil {
			return fmt.Errorf("plugin %s ended before registering: %w", b.opts.Name, b.serveOK)
		}
		return fmt.Errorf("plugin %s ended before registering", b.opts.Name)
	case <-t.C:
		return fmt.Errorf("plugin %s did not register within %v", b.opts.Name, b.opts.Timeout)
	}
}

// Hello is the plugin's Hello message (nil before it arrived).
func (b *Broker) Hello() *pb.Hello {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hello
}

// Registration is the plugin's Register message (nil before it arrived).
func (b *Broker) Registration() *pb.Register {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.register
}

// Answer is the broker's answer to Register: a Registered (with the items it
// rejected) or a Rejected message; nil before.
func (b *Broker) Answer() *pb.HostMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.answer
}

// Tools is the names of the plugin's registered tools, sorted (runtime
// registrations included).
func (b *Broker) Tools() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := append([]string(nil), b.tools...)
	sort.Strings(out)
	return out
}

// Hooks is the plugin's registered stage hooks in registration order.
func (b *Broker) Hooks() []*pb.StageHook {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*pb.StageHook(nil), b.hooks...)
}

// RuntimeRegistrations is the RegisterTool / UnregisterTool messages the plugin sent
// after registering, in order.
func (b *Broker) RuntimeRegistrations() []*pb.PluginMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*pb.PluginMessage(nil), b.regs...)
}

// Late is the answers that arrived for calls no longer waited for (cancelled): a
// plugin should send none.
func (b *Broker) Late() []*pb.PluginMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*pb.PluginMessage(nil), b.late...)
}

// Send sends a raw message to the plugin (for protocol tests).
func (b *Broker) Send(m *pb.HostMessage) error {
	b.sendMu.Lock()
	defer b.sendMu.Unlock()
	if b.stream == nil {
		return errors.New("hearthtest: no session attached")
	}
	if b.held != nil {
		b.held = append(b.held, m)
		return nil
	}
	return b.stream.Send(m)
}

// Batched runs fn, holding back every message it sends to the plugin (Invoke,
// StartHook, Send …), then sends them in one HostBatch, as the broker does with
// calls that start together (the plugin must list "batch" in Hello.features, as
// every Hearth SDK does).
func (b *Broker) Batched(fn func()) error {
	b.sendMu.Lock()
	b.held = []*pb.HostMessage{}
	b.sendMu.Unlock()
	fn()
	b.sendMu.Lock()
	held := b.held
	b.held = nil
	b.sendMu.Unlock()
	if len(held) == 0 {
		return nil
	}
	return b.Send(&pb.HostMessage{Msg: &pb.HostMessage_Batch{Batch: &pb.HostBatch{Msgs: held}}})
}

// Batches is how many PluginBatch messages the plugin sent (their messages are
// handled one by one, like any other).
func (b *Broker) Batches() int { return int(b.batches.Load()) }

// Ping sends a Ping and waits for its Pong.
func (b *Broker) Ping() error {
	nonce := b.nextID.Add(1)
	ch := make(chan struct{})
	b.mu.Lock()
	b.pongs[nonce] = ch
	b.mu.Unlock()
	if err := b.Send(&pb.HostMessage{Msg: &pb.HostMessage_Ping{Ping: &pb.Ping{Nonce: nonce}}}); err != nil {
		return err
	}
	t := time.NewTimer(b.opts.Timeout)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return fmt.Errorf("no Pong for ping %d within %v", nonce, b.opts.Timeout)
	}
}

// Shutdown sends Shutdown (grace 2 s) and waits for the plugin's session to end;
// it returns what ServeContext returned (nil for a clean exit).
func (b *Broker) Shutdown() error {
	return b.ShutdownGrace(2 * time.Second)
}

// ShutdownGrace is Shutdown with a grace period.
func (b *Broker) ShutdownGrace(grace time.Duration) error {
	if b.served != nil {
		select {
		case <-b.served:
			return b.serveOK
		default:
		}
	}
	if err := b.Send(&pb.HostMessage{Msg: &pb.HostMessage_Shutdown{Shutdown: &pb.Shutdown{
		GraceMs: uint32(grace / time.Millisecond), Reason: "hearthtest shutdown",
	}}}); err != nil {
		return fmt.Errorf("hearthtest: sending Shutdown: %w", err)
	}
	return b.Wait()
}

// EndSession ends the session from the broker's side (the stream closes with OK),
// as a broker going away cleanly does; Wait then tells how the plugin took it.
func (b *Broker) EndSession() {
	b.endOnce.Do(func() { close(b.endSession) })
}

// Wait waits for the plugin's ServeContext to return and returns its result.
func (b *Broker) Wait() error {
	if b.served == nil {
		return errors.New("hearthtest: no plugin was launched on this broker")
	}
	t := time.NewTimer(b.opts.Timeout)
	defer t.Stop()
	select {
	case <-b.served:
		return b.serveOK
	case <-t.C:
		return fmt.Errorf("hearthtest: plugin %s still serving after %v", b.opts.Name, b.opts.Timeout)
	}
}

// Done is closed when the plugin's ServeContext has returned (never for a
// NewBroker).
func (b *Broker) Done() <-chan struct{} { return b.served }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// noPlugin is a closed channel when no plugin was launched.
func (b *Broker) noPlugin() <-chan struct{} {
	if b.served == nil {
		return closedChan
	}
	return nil
}

func (b *Broker) close() {
	select {
	case <-b.served:
	case <-b.noPlugin():
		b.EndSession()
	default:
		b.sendMu.Lock()
		attached := b.stream != nil
		b.sendMu.Unlock()
		if attached {
			_ = b.ShutdownGrace(500 * time.Millisecond)
		}
		b.cancel()
		select {
		case <-b.served:
		case <-time.After(b.opts.Timeout):
		}
	}
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.srv.Stop()
	b.lis.Close()
}

// ---------------------------------------------------------------- the session

type hostServer struct {
	pb.UnimplementedPluginHostServer
	b *Broker
}

func (h hostServer) Attach(stream grpc.BidiStreamingServer[pb.PluginMessage, pb.HostMessage]) error {
	return h.b.attach(stream)
}

func (b *Broker) attach(stream grpc.BidiStreamingServer[pb.PluginMessage, pb.HostMessage]) error {
	if err := b.checkToken(stream.Context()); err != nil {
		return err
	}
	b.sendMu.Lock()
	if b.stream != nil {
		b.sendMu.Unlock()
		return status.Error(codes.FailedPrecondition, "hearthtest: a session is already attached")
	}
	b.stream = stream
	b.sendMu.Unlock()
	defer func() {
		b.sendMu.Lock()
		b.stream = nil
		b.sendMu.Unlock()
	}()

	first, err := stream.Recv()
	if err != nil {
		return b.endWith(err)
	}
	hello := first.GetHello()
	if hello == nil {
		return b.endWith(status.Errorf(codes.InvalidArgument, "the first message must be Hello, got %T", first.Msg))
	}
	b.mu.Lock()
	b.hello = hello
	b.mu.Unlock()
	if major, _, _ := strings.Cut(hello.ProtocolVersion, "."); major != "1" {
		b.answerRegister(&pb.HostMessage{Msg: &pb.HostMessage_Rejected{Rejected: &pb.Rejected{
			Reason: fmt.Sprintf("protocol version %s is not supported (the broker speaks %s)", hello.ProtocolVersion, session.ProtocolVersion),
			Items:  []*pb.RejectedItem{{Kind: "plugin", Name: b.opts.Name, Reason: "incompatible protocol major version"}},
		}}})
		return b.endWith(nil)
	}
	second, err := stream.Recv()
	if err != nil {
		return b.endWith(err)
	}
	reg := second.GetRegister()
	if reg == nil {
		return b.endWith(status.Errorf(codes.InvalidArgument, "the second message must be Register, got %T", second.Msg))
	}
	b.mu.Lock()
	b.register = reg
	b.mu.Unlock()
	if b.opts.Reject != "" {
		b.answerRegister(&pb.HostMessage{Msg: &pb.HostMessage_Rejected{Rejected: &pb.Rejected{Reason: b.opts.Reject}}})
		return b.endWith(nil)
	}
	accepted, rejected := b.checkRegister(reg)
	if reg.AllOrNothing && len(rejected) > 0 {
		b.answerRegister(&pb.HostMessage{Msg: &pb.HostMessage_Rejected{Rejected: &pb.Rejected{Reason: "an item was rejected (all_or_nothing)", Items: rejected}}})
		return b.endWith(nil)
	}
	b.mu.Lock()
	b.tools = accepted
	b.mu.Unlock()
	b.answerRegister(&pb.HostMessage{Msg: &pb.HostMessage_Registered{Registered: &pb.Registered{
		Plugin: b.opts.Name, Tools: accepted, Rejected: rejected,
		ProtocolVersion: session.ProtocolVersion, Features: hello.Features,
	}}})

	msgs := make(chan *pb.PluginMessage)
	errc := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			msgs <- m
		}
	}()
	for {
		select {
		case m := <-msgs:
			b.dispatch(m)
		case err := <-errc:
			return b.endWith(err)
		case <-b.endSession:
			b.endWith(errors.New("the broker ended the session"))
			return nil
		case <-stream.Context().Done():
			return b.endWith(stream.Context().Err())
		}
	}
}

func (b *Broker) answerRegister(m *pb.HostMessage) {
	b.mu.Lock()
	b.answer = m
	b.mu.Unlock()
	_ = b.Send(m)
	close(b.registered)
}

// endWith records why the stream ended and fails everything waiting on it.
func (b *Broker) endWith(err error) error {
	why := err
	if why == nil || errors.Is(why, io.EOF) {
		why = errors.New("the plugin closed the session")
	}
	b.mu.Lock()
	if b.ended == nil {
		b.ended = why
	}
	pending := b.pending
	b.pending = map[uint64]*Pending{}
	b.mu.Unlock()
	for _, p := range pending {
		p.finish(nil, fmt.Errorf("the session ended before call %d was answered: %v", p.id, why))
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

func (b *Broker) dispatch(m *pb.PluginMessage) {
	switch x := m.Msg.(type) {
	case *pb.PluginMessage_Batch:
		b.batches.Add(1)
		for _, inner := range x.Batch.GetMsgs() {
			b.dispatch(inner)
		}
	case *pb.PluginMessage_ToolResult:
		b.complete(x.ToolResult.CallId, m)
	case *pb.PluginMessage_StageResult:
		b.complete(x.StageResult.CallId, m)
	case *pb.PluginMessage_EventDone:
		b.complete(x.EventDone.CallId, m)
	case *pb.PluginMessage_Reply:
		if p := b.lookup(x.Reply.CallId); p != nil {
			p.addReply(x.Reply.Text)
		} else {
			b.addLate(m)
		}
	case *pb.PluginMessage_Progress:
		if p := b.lookup(x.Progress.CallId); p != nil {
			p.addProgress(x.Progress)
		} else {
			b.addLate(m)
		}
	case *pb.PluginMessage_Pong:
		b.mu.Lock()
		ch := b.pongs[x.Pong.Nonce]
		delete(b.pongs, x.Pong.Nonce)
		b.mu.Unlock()
		if ch != nil {
			close(ch)
		}
	case *pb.PluginMessage_RegisterTool:
		b.mu.Lock()
		b.regs = append(b.regs, m)
		b.mu.Unlock()
		b.runtimeRegister(x.RegisterTool)
	case *pb.PluginMessage_UnregisterTool:
		b.mu.Lock()
		b.regs = append(b.regs, m)
		b.mu.Unlock()
		b.runtimeUnregister(x.UnregisterTool)
	default:
		b.logLine("hearthtest: unexpected message from the plugin: %T", m.Msg)
	}
}

func (b *Broker) lookup(id uint64) *Pending {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pending[id]
}

func (b *Broker) addLate(m *pb.PluginMessage) {
	b.mu.Lock()
	b.late = append(b.late, m)
	b.mu.Unlock()
}

func (b *Broker) complete(id uint64, m *pb.PluginMessage) {
	b.mu.Lock()
	p := b.pending[id]
	delete(b.pending, id)
	if p == nil {
		b.late = append(b.late, m)
	}
	b.mu.Unlock()
	if p != nil {
		p.finish(m, nil)
	}
}

// ---------------------------------------------------------------- registration rules

// checkRegister applies the broker's registration rules (broker/src/registry.rs is
// the reference) to reg: the accepted tool names and the rejected items.
func (b *Broker) checkRegister(reg *pb.Register) ([]string, []*pb.RejectedItem) {
	var accepted []string
	var rejected []*pb.RejectedItem
	seen := map[string]bool{}
	for _, t := range reg.Tools {
		if reason := checkTool(t); reason != "" {
			rejected = append(rejected, &pb.RejectedItem{Kind: "tool", Name: t.Name, Reason: reason})
			continue
		}
		if seen[t.Name] {
			rejected = append(rejected, &pb.RejectedItem{Kind: "tool", Name: t.Name, Reason: "duplicate tool name"})
			continue
		}
		seen[t.Name] = true
		accepted = append(accepted, t.Name)
	}
	hookIDs := map[string]bool{}
	var hooks []*pb.StageHook
	for _, h := range reg.Stages {
		switch {
		case h.Stage < pb.Stage_STAGE_ON_INPUT || h.Stage > pb.Stage_STAGE_AFTER_OUTPUT:
			rejected = append(rejected, &pb.RejectedItem{Kind: "stage", Name: h.HookId, Reason: fmt.Sprintf("unknown stage %d", h.Stage)})
		case h.HookId == "" || hookIDs[h.HookId]:
			rejected = append(rejected, &pb.RejectedItem{Kind: "stage", Name: h.HookId, Reason: "empty or duplicate hook id"})
		default:
			hookIDs[h.HookId] = true
			hooks = append(hooks, h)
		}
	}
	for _, t := range reg.Triggers {
		if t.Pattern == "" {
			rejected = append(rejected, &pb.RejectedItem{Kind: "trigger", Name: t.Type.String(), Reason: "empty pattern"})
		}
	}
	if reg.Inject != nil && reg.Inject.Format == "" {
		rejected = append(rejected, &pb.RejectedItem{Kind: "inject", Name: "ai.inject", Reason: "format is required"})
	}
	b.mu.Lock()
	b.hooks = hooks
	b.mu.Unlock()
	return accepted, rejected
}

// checkTool is why the broker refuses tool t, or "".
func checkTool(t *pb.ToolSpec) string {
	if err := session.CheckToolName(t.Name); err != nil {
		return err.Error()
	}
	if t.ParametersJson == "" {
		return ""
	}
	var schema map[string]any
	if err := json.Unmarshal([]byte(t.ParametersJson), &schema); err != nil {
		return fmt.Sprintf("parameters is not a JSON Schema object: %v", err)
	}
	if typ, ok := schema["type"]; ok && typ != "object" {
		return fmt.Sprintf("parameters must describe an object (\"type\": \"object\"), not %v", typ)
	}
	return ""
}

func (b *Broker) runtimeRegister(r *pb.RegisterTool) {
	ans := &pb.ToolRegistration{RequestId: r.RequestId, Name: r.GetTool().GetName(), Ok: true}
	if r.Tool == nil {
		ans.Ok, ans.Error = false, "no tool given"
	} else if reason := checkTool(r.Tool); reason != "" {
		ans.Ok, ans.Error = false, reason
	} else {
		b.mu.Lock()
		for _, t := range b.tools {
			if t == r.Tool.Name {
				ans.Ok, ans.Error = false, fmt.Sprintf("tool %s is already registered", t)
			}
		}
		if ans.Ok {
			b.tools = append(b.tools, r.Tool.Name)
		}
		b.mu.Unlock()
	}
	_ = b.Send(&pb.HostMessage{Msg: &pb.HostMessage_ToolRegistration{ToolRegistration: ans}})
}

func (b *Broker) runtimeUnregister(u *pb.UnregisterTool) {
	ans := &pb.ToolRegistration{RequestId: u.RequestId, Name: u.Name}
	b.mu.Lock()
	for i, t := range b.tools {
		if t == u.Name {
			b.tools = append(b.tools[:i], b.tools[i+1:]...)
			ans.Ok = true
			break
		}
	}
	b.mu.Unlock()
	if !ans.Ok {
		ans.Error = fmt.Sprintf("no tool %s of this plugin", u.Name)
	}
	_ = b.Send(&pb.HostMessage{Msg: &pb.HostMessage_ToolRegistration{ToolRegistration: ans}})
}

// clone copies a message the test gave, so the broker's later changes do not show.
func clone[M proto.Message](m M) M { return proto.Clone(m).(M) }
