package hearth_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/hearth-dev/hearth/sdk-go/hearth"
	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
	"github.com/hearth-dev/hearth/sdk-go/hearthtest"
	"github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
	"github.com/hearth-dev/hearth/sdk-go/internal/session"
)

type pingPlugin struct{ stops int }

func (p *pingPlugin) Name() string { return "pinger" }
func (p *pingPlugin) Stop() error  { p.stops++; return nil }
func (p *pingPlugin) Start(s *sdk.PluginSDK) error {
	return s.RegisterTool("ping", sdk.ToolDef{Description: "pong"}, func(map[string]interface{}) (interface{}, error) { return "pong", nil })
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var exit *hearth.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("%v is not an *hearth.ExitError", err)
	}
	return exit.Code
}

func TestHelloAndRegistration(t *testing.T) {
	b := hearthtest.StartWith(t, &pingPlugin{}, hearthtest.Options{Quiet: true})
	h := b.Hello()
	if h.ProtocolVersion != "1.0.0" || h.Sdk != "hearth-plugin-go" || h.SdkVersion == "" || h.Pid != uint32(os.Getpid()) ||
		strings.Join(h.Features, ",") != "cancel,progress,trace,batch" {
		t.Errorf("hello %v", h)
	}
	if reg := b.Registration(); reg.Plugin.GetName() != "pinger" || len(reg.Tools) != 1 {
		t.Errorf("register %v", reg)
	}
}

func TestSessionEndings(t *testing.T) {
	t.Run("shutdown", func(t *testing.T) {
		p := &pingPlugin{}
		b := hearthtest.StartWith(t, p, hearthtest.Options{Quiet: true})
		if err := b.Shutdown(); err != nil || p.stops != 1 {
			t.Errorf("err %v, stops %d", err, p.stops)
		}
	})
	t.Run("broker closes the session", func(t *testing.T) {
		p := &pingPlugin{}
		b := hearthtest.StartWith(t, p, hearthtest.Options{Quiet: true})
		b.EndSession()
		if err := b.Wait(); err != nil || p.stops != 1 {
			t.Errorf("err %v, stops %d", err, p.stops)
		}
		if !strings.Contains(strings.Join(b.Logs(), "\n"), "the broker closed the session; exiting") {
			t.Errorf("logs %q", b.Logs())
		}
	})
	t.Run("rejected", func(t *testing.T) {
		p := &pingPlugin{}
		b := hearthtest.Launch(t, p, hearthtest.Options{Reject: "tool ping: not today", Quiet: true})
		err := b.Wait()
		if exitCode(t, err) != hearth.ExitRejected || err.Error() != "plugin test: registration rejected: tool ping: not today" || p.stops != 1 {
			t.Errorf("err %v, stops %d", err, p.stops)
		}
	})
	t.Run("incompatible protocol version", func(t *testing.T) {
		b := hearthtest.Launch(t, &pingPlugin{}, hearthtest.Options{Serve: hearth.Options{ProtocolVersion: "99.0.0"}, Quiet: true})
		err := b.Wait()
		if exitCode(t, err) != hearth.ExitRejected || !strings.Contains(err.Error(), "protocol version 99.0.0 is not supported") ||
			!strings.Contains(err.Error(), "plugin test: incompatible protocol major version") {
			t.Errorf("err %v", err)
		}
	})
	t.Run("wrong token", func(t *testing.T) {
		b := hearthtest.Launch(t, &pingPlugin{}, hearthtest.Options{PluginToken: "stale", Quiet: true})
		err := b.Wait()
		if exitCode(t, err) != hearth.ExitFailed || !strings.Contains(err.Error(), "UNAUTHENTICATED: unknown or stale plugin token") {
			t.Errorf("err %v", err)
		}
	})
	t.Run("not a plugin", func(t *testing.T) {
		err := hearthtest.Launch(t, 42, hearthtest.Options{Quiet: true}).Wait()
		if exitCode(t, err) != hearth.ExitConfig || !strings.Contains(err.Error(), "int is neither a HomeAgent plugin") {
			t.Errorf("err %v", err)
		}
	})
}

func TestAfterHelloRunsBeforeRegister(t *testing.T) {
	var b *hearthtest.Broker
	ran := make(chan bool, 1)
	ready := make(chan struct{})
	opts := hearthtest.Options{Quiet: true, Serve: hearth.Options{AfterHello: func() {
		<-ready
		ran <- b.Hello() != nil && b.Registration() == nil
	}}}
	b = hearthtest.Launch(t, &pingPlugin{}, opts)
	close(ready)
	if err := b.WaitRegistered(); err != nil {
		t.Fatal(err)
	}
	if !<-ran {
		t.Error("AfterHello did not run between Hello and Register")
	}
}

func TestServeContextCancel(t *testing.T) {
	// ServeContext's ctx ends the session; the plugin's Stop runs; nil is returned.
	b := hearthtest.NewBroker(t, hearthtest.Options{Quiet: true})
	ctx, cancel := context.WithCancel(context.Background())
	ctx = session.WithConfig(ctx, session.Config{
		Addr: "test", RawTarget: "passthrough:///hearthtest", Token: "hearthtest-token", Plugin: "embedded",
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(b.Dialer())}, Logf: t.Logf,
	})
	p := &pingPlugin{}
	served := make(chan error, 1)
	go func() { served <- hearth.ServeContext(ctx, p) }()
	if err := b.WaitRegistered(); err != nil {
		t.Fatal(err)
	}
	if r, err := b.Call("ping", nil); err != nil || r.Content != "pong" {
		t.Fatal(r, err)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil || p.stops != 1 {
			t.Errorf("err %v, stops %d", err, p.stops)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeContext did not return after its context was cancelled")
	}
}

// ---- Serve exits the process: run this test binary as the plugin ----

const childEnv = "HEARTH_GO_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "serve" {
		hearth.Serve(&pingPlugin{})
	}
	os.Exit(m.Run())
}

func runChild(t *testing.T, env []string, extra ...*os.File) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append([]string{childEnv + "=serve", "PATH=" + os.Getenv("PATH")}, env...)
	cmd.ExtraFiles = extra
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

func TestServeExitCodes(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "missing.sock")
	code, out := runChild(t, nil)
	if code != 2 || !strings.Contains(out, "hearth-plugin: environment variable HEARTH_ADDR is not set") {
		t.Errorf("no env: %d %q", code, out)
	}
	code, out = runChild(t, []string{"HEARTH_ADDR=unix:///x.sock"})
	if code != 2 || !strings.Contains(out, "no spawn token: neither HEARTH_TOKEN_FD nor HEARTH_TOKEN is set") {
		t.Errorf("no token: %d %q", code, out)
	}
	code, out = runChild(t, []string{"HEARTH_ADDR=ftp://x", "HEARTH_TOKEN=t", "HEARTH_PLUGIN=p"})
	if code != 2 || !strings.Contains(out, `plugin p: broker address "ftp://x" is neither unix:///abs/path nor http://host:port`) {
		t.Errorf("bad addr: %d %q", code, out)
	}
	code, out = runChild(t, []string{"HEARTH_ADDR=unix://" + sock, "HEARTH_TOKEN=t", "HEARTH_PLUGIN=p"})
	if code != 1 || !strings.Contains(out, "plugin p:") || !strings.Contains(out, "UNAVAILABLE") {
		t.Errorf("no broker: %d %q", code, out)
	}

	// The token from the pipe named by HEARTH_TOKEN_FD (fd 3 in the child).
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("piped-token\n")
	w.Close()
	code, out = runChild(t, []string{"HEARTH_ADDR=unix://" + sock, "HEARTH_TOKEN_FD=3", "HEARTH_PLUGIN=p"}, r)
	r.Close()
	if code != 1 || !strings.Contains(out, "UNAVAILABLE") {
		t.Errorf("token from fd: %d %q", code, out)
	}
	f, _ := os.Open(os.Args[0])
	defer f.Close()
	code, out = runChild(t, []string{"HEARTH_ADDR=unix://" + sock, "HEARTH_TOKEN_FD=3"}, f)
	if code != 2 || !strings.Contains(out, "HEARTH_TOKEN_FD=3: cannot read the token: fd 3 is not a pipe") {
		t.Errorf("fd not a pipe: %d %q", code, out)
	}
}

// TestServeOverAUnixSocket runs the plugin as a process against a fake broker on a
// real Unix socket: dial, token, Hello, Register, a call, Shutdown, exit 0.
func TestServeOverAUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "hg")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "h.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	got := make(chan string, 4)
	pb.RegisterPluginHostServer(srv, &miniBroker{got: got})
	go srv.Serve(lis)
	defer srv.Stop()

	done := make(chan struct{})
	var code int
	var out string
	go func() {
		defer close(done)
		code, out = runChild(t, []string{"HEARTH_ADDR=unix://" + sock, "HEARTH_TOKEN=sock-token", "HEARTH_PLUGIN=proc"})
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the plugin process did not exit")
	}
	if code != 0 {
		t.Errorf("exit %d: %s", code, out)
	}
	close(got)
	var seen []string
	for s := range got {
		seen = append(seen, s)
	}
	if strings.Join(seen, "|") != "token sock-token|registered ping|result pong" {
		t.Errorf("broker saw %q", seen)
	}
}

// miniBroker answers one session: Registered, one InvokeTool, then Shutdown.
type miniBroker struct {
	pb.UnimplementedPluginHostServer
	got chan string
}

func (m *miniBroker) Attach(stream grpc.BidiStreamingServer[pb.PluginMessage, pb.HostMessage]) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	m.got <- "token " + strings.Join(md.Get("x-hearth-token"), ",")
	if _, err := stream.Recv(); err != nil { // Hello
		return err
	}
	reg, err := stream.Recv()
	if err != nil {
		return err
	}
	m.got <- "registered " + reg.GetRegister().GetTools()[0].GetName()
	stream.Send(&pb.HostMessage{Msg: &pb.HostMessage_Registered{Registered: &pb.Registered{Plugin: "proc"}}})
	stream.Send(&pb.HostMessage{Msg: &pb.HostMessage_InvokeTool{InvokeTool: &pb.InvokeTool{CallId: 1, Tool: "ping", ArgsJson: "{}"}}})
	res, err := stream.Recv()
	if err != nil {
		return err
	}
	m.got <- "result " + res.GetToolResult().GetContent()
	stream.Send(&pb.HostMessage{Msg: &pb.HostMessage_Shutdown{Shutdown: &pb.Shutdown{GraceMs: 1000}}})
	ctx, cancel := context.WithTimeout(stream.Context(), 5*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
	}
	return nil
}
