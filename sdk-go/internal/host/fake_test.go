package host

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// hub is an in-process fake broker for the host services: it records every request
// by method (`Settings.Get`) and answers with the handler set by on, else an empty
// response of the right type.
type hub struct {
	mu     sync.Mutex
	reqs   map[string][]proto.Message
	tokens []string
	on     map[string]func(req proto.Message) (proto.Message, error)
}

// handle registers the answer of method.
func (h *hub) handle(method string, f func(req proto.Message) (proto.Message, error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.on[method] = f
}

// answer sets a fixed answer of method.
func (h *hub) answer(method string, resp proto.Message, err error) {
	h.handle(method, func(proto.Message) (proto.Message, error) { return resp, err })
}

// last is the latest request of method (fails the test when there is none).
func (h *hub) last(t *testing.T, method string) proto.Message {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.reqs[method]
	if len(r) == 0 {
		t.Fatalf("no %s request reached the fake broker (requests: %v)", method, h.methods())
	}
	return r[len(r)-1]
}

// calls is how many requests of method arrived.
func (h *hub) calls(method string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.reqs[method])
}

func (h *hub) methods() []string {
	var m []string
	for k := range h.reqs {
		m = append(m, k)
	}
	return m
}

// reply records req and runs method's handler; def is the answer without one.
func reply[R proto.Message](ctx context.Context, h *hub, method string, req proto.Message, def R) (R, error) {
	h.mu.Lock()
	h.reqs[method] = append(h.reqs[method], proto.Clone(req))
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		h.tokens = append(h.tokens, md.Get("x-test-token")...)
	}
	f := h.on[method]
	h.mu.Unlock()
	if f == nil {
		return def, nil
	}
	resp, err := f(req)
	if err != nil {
		var zero R
		return zero, err
	}
	if resp == nil {
		return def, nil
	}
	r, ok := resp.(R)
	if !ok {
		panic(fmt.Sprintf("fake %s: answer %T, want %T", method, resp, def))
	}
	return r, nil
}

type fakeSettings struct {
	pb.UnimplementedSettingsServer
	h *hub
}

func (f fakeSettings) Get(ctx context.Context, r *pb.KeyRequest) (*pb.ValueResponse, error) {
	return reply(ctx, f.h, "Settings.Get", r, &pb.ValueResponse{})
}
func (f fakeSettings) Set(ctx context.Context, r *pb.SetRequest) (*pb.Empty, error) {
	return reply(ctx, f.h, "Settings.Set", r, &pb.Empty{})
}
func (f fakeSettings) List(ctx context.Context, r *pb.PrefixRequest) (*pb.KeysResponse, error) {
	return reply(ctx, f.h, "Settings.List", r, &pb.KeysResponse{})
}
func (f fakeSettings) GetCore(ctx context.Context, r *pb.KeyRequest) (*pb.ValueResponse, error) {
	return reply(ctx, f.h, "Settings.GetCore", r, &pb.ValueResponse{})
}
func (f fakeSettings) SetCore(ctx context.Context, r *pb.SetRequest) (*pb.Empty, error) {
	return reply(ctx, f.h, "Settings.SetCore", r, &pb.Empty{})
}
func (f fakeSettings) ListCore(ctx context.Context, r *pb.PrefixRequest) (*pb.KeysResponse, error) {
	return reply(ctx, f.h, "Settings.ListCore", r, &pb.KeysResponse{})
}
func (f fakeSettings) GetPlugin(ctx context.Context, r *pb.KeyRequest) (*pb.ValueResponse, error) {
	return reply(ctx, f.h, "Settings.GetPlugin", r, &pb.ValueResponse{})
}
func (f fakeSettings) SetPlugin(ctx context.Context, r *pb.SetRequest) (*pb.Empty, error) {
	return reply(ctx, f.h, "Settings.SetPlugin", r, &pb.Empty{})
}
func (f fakeSettings) ListPlugin(ctx context.Context, r *pb.PrefixRequest) (*pb.KeysResponse, error) {
	return reply(ctx, f.h, "Settings.ListPlugin", r, &pb.KeysResponse{})
}
func (f fakeSettings) RegisterDef(ctx context.Context, r *pb.ConfigDef) (*pb.Empty, error) {
	return reply(ctx, f.h, "Settings.RegisterDef", r, &pb.Empty{})
}
func (f fakeSettings) Defs(ctx context.Context, r *pb.PrefixRequest) (*pb.DefsResponse, error) {
	return reply(ctx, f.h, "Settings.Defs", r, &pb.DefsResponse{})
}
func (f fakeSettings) Dump(ctx context.Context, r *pb.Empty) (*pb.DumpResponse, error) {
	return reply(ctx, f.h, "Settings.Dump", r, &pb.DumpResponse{})
}
func (f fakeSettings) Plugins(ctx context.Context, r *pb.Empty) (*pb.KeysResponse, error) {
	return reply(ctx, f.h, "Settings.Plugins", r, &pb.KeysResponse{})
}

type fakeMemory struct {
	pb.UnimplementedMemoryServer
	h *hub
}

func (f fakeMemory) Recall(ctx context.Context, r *pb.RecallRequest) (*pb.RecallResponse, error) {
	return reply(ctx, f.h, "Memory.Recall", r, &pb.RecallResponse{})
}
func (f fakeMemory) Commit(ctx context.Context, r *pb.CommitRequest) (*pb.CommitResponse, error) {
	return reply(ctx, f.h, "Memory.Commit", r, &pb.CommitResponse{})
}
func (f fakeMemory) Introspect(ctx context.Context, r *pb.Empty) (*pb.IntrospectResponse, error) {
	return reply(ctx, f.h, "Memory.Introspect", r, &pb.IntrospectResponse{})
}
func (f fakeMemory) MergeEntities(ctx context.Context, r *pb.MergeRequest) (*pb.CountResponse, error) {
	return reply(ctx, f.h, "Memory.MergeEntities", r, &pb.CountResponse{})
}
func (f fakeMemory) Purge(ctx context.Context, r *pb.PurgeRequest) (*pb.CountResponse, error) {
	return reply(ctx, f.h, "Memory.Purge", r, &pb.CountResponse{})
}

type fakeTextMemory struct {
	pb.UnimplementedTextMemoryServer
	h *hub
}

func (f fakeTextMemory) Append(ctx context.Context, r *pb.TextEvent) (*pb.Empty, error) {
	return reply(ctx, f.h, "TextMemory.Append", r, &pb.Empty{})
}

type fakeDocMemory struct {
	pb.UnimplementedDocMemoryServer
	h *hub
}

func (f fakeDocMemory) Query(ctx context.Context, r *pb.DocQuery) (*pb.DocsResponse, error) {
	return reply(ctx, f.h, "DocMemory.Query", r, &pb.DocsResponse{})
}
func (f fakeDocMemory) Insert(ctx context.Context, r *pb.Doc) (*pb.Empty, error) {
	return reply(ctx, f.h, "DocMemory.Insert", r, &pb.Empty{})
}
func (f fakeDocMemory) Remove(ctx context.Context, r *pb.IdRequest) (*pb.Empty, error) {
	return reply(ctx, f.h, "DocMemory.Remove", r, &pb.Empty{})
}
func (f fakeDocMemory) Stats(ctx context.Context, r *pb.Empty) (*pb.StatsResponse, error) {
	return reply(ctx, f.h, "DocMemory.Stats", r, &pb.StatsResponse{})
}

type fakeKnowledge struct {
	pb.UnimplementedKnowledgeServer
	h *hub
}

func (f fakeKnowledge) Search(ctx context.Context, r *pb.KnowledgeQuery) (*pb.KnowledgeResponse, error) {
	return reply(ctx, f.h, "Knowledge.Search", r, &pb.KnowledgeResponse{})
}
func (f fakeKnowledge) Add(ctx context.Context, r *pb.KnowledgeEntry) (*pb.Empty, error) {
	return reply(ctx, f.h, "Knowledge.Add", r, &pb.Empty{})
}
func (f fakeKnowledge) List(ctx context.Context, r *pb.Empty) (*pb.KeysResponse, error) {
	return reply(ctx, f.h, "Knowledge.List", r, &pb.KeysResponse{})
}

type fakeLlm struct {
	pb.UnimplementedLlmServer
	h *hub
}

func (f fakeLlm) ListSources(ctx context.Context, r *pb.Empty) (*pb.KeysResponse, error) {
	return reply(ctx, f.h, "Llm.ListSources", r, &pb.KeysResponse{})
}
func (f fakeLlm) SetSource(ctx context.Context, r *pb.SourceRequest) (*pb.Empty, error) {
	return reply(ctx, f.h, "Llm.SetSource", r, &pb.Empty{})
}
func (f fakeLlm) CurrentSource(ctx context.Context, r *pb.Empty) (*pb.SourceRequest, error) {
	return reply(ctx, f.h, "Llm.CurrentSource", r, &pb.SourceRequest{})
}

type fakeInput struct {
	pb.UnimplementedInputServer
	h *hub
}

func (f fakeInput) InjectText(ctx context.Context, r *pb.InjectRequest) (*pb.Empty, error) {
	return reply(ctx, f.h, "Input.InjectText", r, &pb.Empty{})
}
func (f fakeInput) InjectTextNoMemory(ctx context.Context, r *pb.InjectRequest) (*pb.Empty, error) {
	return reply(ctx, f.h, "Input.InjectTextNoMemory", r, &pb.Empty{})
}
func (f fakeInput) InjectInterruptText(ctx context.Context, r *pb.InjectRequest) (*pb.Empty, error) {
	return reply(ctx, f.h, "Input.InjectInterruptText", r, &pb.Empty{})
}

type fakeMcp struct {
	pb.UnimplementedMcpServer
	h *hub
}

func (f fakeMcp) Request(ctx context.Context, r *pb.McpRequest) (*pb.McpResponse, error) {
	return reply(ctx, f.h, "Mcp.Request", r, &pb.McpResponse{})
}

// fixture is a Services over a bufconn connection to a fake broker; logs collects
// what the Services logged.
type fixture struct {
	hub  *hub
	svc  *Services
	conn *grpc.ClientConn
	mu   sync.Mutex
	logs []string
}

func (f *fixture) logged() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.logs...)
}

// newFixture starts the fake broker serving every host service except those in
// skip (so they answer UNIMPLEMENTED), and dials it with a token interceptor as
// the session does.
func newFixture(t *testing.T, skip ...string) *fixture {
	t.Helper()
	h := &hub{reqs: map[string][]proto.Message{}, on: map[string]func(proto.Message) (proto.Message, error){}}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	skipped := map[string]bool{}
	for _, s := range skip {
		skipped[s] = true
	}
	if !skipped["Settings"] {
		pb.RegisterSettingsServer(srv, fakeSettings{h: h})
	}
	pb.RegisterMemoryServer(srv, fakeMemory{h: h})
	pb.RegisterTextMemoryServer(srv, fakeTextMemory{h: h})
	pb.RegisterDocMemoryServer(srv, fakeDocMemory{h: h})
	pb.RegisterKnowledgeServer(srv, fakeKnowledge{h: h})
	pb.RegisterLlmServer(srv, fakeLlm{h: h})
	pb.RegisterInputServer(srv, fakeInput{h: h})
	pb.RegisterMcpServer(srv, fakeMcp{h: h})
	go func() { _ = srv.Serve(lis) }()
	token := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(metadata.AppendToOutgoingContext(ctx, "x-test-token", "tok"), method, req, reply, cc, opts...)
	}
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(token))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{hub: h, conn: conn}
	f.svc = New(conn, "weather", func(format string, args ...any) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.logs = append(f.logs, fmt.Sprintf(format, args...))
	})
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
	})
	return f
}
