package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// Names shared with the broker and the other SDKs (hearth-proto's constants).
const (
	// ProtocolVersion is the wire contract version sent in Hello.
	ProtocolVersion = "1.0.0"
	// SDKName is Hello.sdk.
	SDKName = "hearth-plugin-go"
	// SDKVersion is Hello.sdk_version.
	SDKVersion = "0.1.0"
	// MaxMessageBytes is the gRPC message limit both sides set (64 MiB).
	MaxMessageBytes = 64 << 20
	// StreamWindowBytes and ConnWindowBytes are the static HTTP/2 flow-control
	// windows of the session's connection (see Dial).
	StreamWindowBytes = 4 << 20
	ConnWindowBytes   = 16 << 20
	// TokenMetadata is the metadata key of the spawn token.
	TokenMetadata = "x-hearth-token"

	// EnvAddr is the broker address variable.
	EnvAddr = "HEARTH_ADDR"
	// EnvPlugin is the plugin name variable.
	EnvPlugin = "HEARTH_PLUGIN"
	// EnvToken is the spawn token variable of manual runs.
	EnvToken = "HEARTH_TOKEN"
	// EnvTokenFD names the inherited pipe the broker writes the token into.
	EnvTokenFD = "HEARTH_TOKEN_FD"
	// EnvPluginData is the plugin's own writable folder.
	EnvPluginData = "HEARTH_PLUGIN_DATA"
)

// Features are the optional behaviours announced in Hello.features.
var Features = []string{"cancel", "progress", "trace", "batch"}

// Config says where and as whom a session serves. FromEnv fills it from the
// variables the broker sets; tests (hearthtest) build one and pass it with
// WithConfig.
type Config struct {
	// Addr is the broker address: unix:///abs/path or http://host:port.
	Addr string
	// RawTarget, when set, is given to grpc.NewClient as is instead of the target
	// derived from Addr (an in-memory listener in tests).
	RawTarget string
	// Token is the spawn token, sent as x-hearth-token.
	Token string
	// Plugin is the name the broker knows the plugin by; empty = the plugin's own.
	Plugin string
	// DataDir is HEARTH_PLUGIN_DATA ("" when unset).
	DataDir string
	// ProtocolVersion replaces ProtocolVersion in Hello (test knob).
	ProtocolVersion string
	// AfterHello, when set, runs once Hello has been written and before Register is
	// sent; nothing is read from the broker meanwhile (test knob).
	AfterHello func()
	// DialOptions are added to the dial (tests: a context dialer).
	DialOptions []grpc.DialOption
	// Logf writes one line of the plugin log (a newline is added); nil = stderr.
	Logf func(format string, args ...any)
}

type configKey struct{}

// WithConfig returns ctx carrying cfg: Run then serves with cfg instead of the
// environment (used by hearthtest).
func WithConfig(ctx context.Context, cfg Config) context.Context {
	return context.WithValue(ctx, configKey{}, cfg)
}

func configFrom(ctx context.Context) (Config, bool) {
	cfg, ok := ctx.Value(configKey{}).(Config)
	return cfg, ok
}

// FromEnv is the config the broker passes: HEARTH_ADDR, HEARTH_PLUGIN,
// HEARTH_PLUGIN_DATA and the spawn token (SpawnToken). Errors name the variable.
func FromEnv() (Config, error) {
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		return Config{}, fmt.Errorf("environment variable %s is not set (the broker sets %s, %s and passes the token in %s; for a manual run set %s, %s and %s yourself)",
			EnvAddr, EnvAddr, EnvPlugin, EnvTokenFD, EnvAddr, EnvPlugin, EnvToken)
	}
	token, err := SpawnToken()
	if err != nil {
		return Config{}, err
	}
	return Config{
		Addr:    addr,
		Token:   token,
		Plugin:  os.Getenv(EnvPlugin),
		DataDir: os.Getenv(EnvPluginData),
	}, nil
}

var (
	tokenOnce sync.Once
	tokenVal  string
	tokenErr  error
)

// SpawnToken is this process's spawn token: read from the pipe whose fd is in
// HEARTH_TOKEN_FD on the first call (to end of file, then closed, and the variable
// removed so child processes do not read a closed or reused fd number), else
// HEARTH_TOKEN. Every call returns the same outcome.
func SpawnToken() (string, error) {
	tokenOnce.Do(func() {
		if v, ok := os.LookupEnv(EnvTokenFD); ok {
			os.Unsetenv(EnvTokenFD)
			tokenVal, tokenErr = readTokenFD(v)
			if tokenErr != nil {
				tokenErr = fmt.Errorf("%s=%s: %w", EnvTokenFD, v, tokenErr)
			}
			return
		}
		tokenVal = os.Getenv(EnvToken)
		if tokenVal == "" {
			tokenErr = errors.New("no spawn token: neither HEARTH_TOKEN_FD nor HEARTH_TOKEN is set (the broker passes the token in a pipe named by HEARTH_TOKEN_FD; set HEARTH_TOKEN for a manual run)")
		}
	})
	return tokenVal, tokenErr
}

// Limits of the token pipe (as the Rust SDK's): more than maxTokenBytes is not a
// token pipe; a non-blocking pipe may stay open without data for tokenWait.
const (
	maxTokenBytes = 64 << 10
	tokenWait     = 10 * time.Second
)

// readTokenFD reads the token pipe named by value to end of file and closes it.
// The checks keep it from taking over a file that is not the broker's pipe: the fd
// must be above 2 and be a pipe or a socket.
func readTokenFD(value string) (string, error) {
	if value == "" || len(value) > 9 || strings.Trim(value, "0123456789") != "" {
		return "", errors.New("not a file descriptor number")
	}
	fd, _ := strconv.Atoi(value)
	if fd <= 2 {
		return "", fmt.Errorf("cannot read the token: fd %d is stdin, stdout or stderr", fd)
	}
	dir := "/dev/fd"
	if runtime.GOOS == "linux" {
		dir = "/proc/self/fd"
	}
	info, err := os.Stat(fmt.Sprintf("%s/%d", dir, fd))
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("cannot read the token: fd %d is not open", fd)
	}
	if err != nil {
		return "", fmt.Errorf("cannot read the token: %v", err)
	}
	if info.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		// Not ours to close: some other file has the number.
		return "", fmt.Errorf("cannot read the token: fd %d is not a pipe", fd)
	}
	f := os.NewFile(uintptr(fd), "hearth-token")
	defer f.Close()
	// A non-blocking pipe is read through the poller, where a deadline bounds the
	// wait; on a blocking pipe SetReadDeadline fails and the read waits for EOF.
	_ = f.SetReadDeadline(time.Now().Add(tokenWait))
	data, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return "", fmt.Errorf("cannot read the token: no end of file within %d s (the writer keeps the pipe open)", int(tokenWait/time.Second))
	}
	if err != nil {
		return "", fmt.Errorf("cannot read the token: %v", err)
	}
	if len(data) > maxTokenBytes {
		return "", fmt.Errorf("cannot read the token: more than %d bytes", maxTokenBytes)
	}
	for _, b := range data {
		if b >= 0x80 {
			return "", errors.New("cannot read the token: it is not ASCII text")
		}
	}
	token := strings.TrimRight(string(data), " \t\r\n")
	if token == "" {
		return "", errors.New("cannot read the token: the pipe held no token")
	}
	return token, nil
}

// checkToken reports whether token can travel as gRPC metadata (printable ASCII).
func checkToken(token string) error {
	for i := 0; i < len(token); i++ {
		if c := token[i]; c < 0x20 || c > 0x7e {
			return errors.New("the spawn token is not a valid gRPC metadata value (printable ASCII only)")
		}
	}
	return nil
}

// Target turns HEARTH_ADDR into a grpc-go target: unix:///abs/path (and
// unix:/abs/path) as is — grpc-go sends `localhost` as :authority for these, which
// the broker accepts — and http://host:port as host:port.
func Target(addr string) (string, error) {
	switch {
	case strings.HasPrefix(addr, "unix:"):
		path := strings.TrimPrefix(addr, "unix:")
		if strings.HasPrefix(path, "//") {
			path = strings.TrimPrefix(path, "//")
			if !strings.HasPrefix(path, "/") {
				return "", fmt.Errorf("broker address %q: a unix address needs an absolute path (unix:///abs/path)", addr)
			}
		}
		if !strings.HasPrefix(path, "/") || len(path) < 2 {
			return "", fmt.Errorf("broker address %q: a unix address needs an absolute path (unix:///abs/path)", addr)
		}
		return addr, nil
	case strings.HasPrefix(addr, "http://"):
		hostport := strings.TrimSuffix(strings.TrimPrefix(addr, "http://"), "/")
		if hostport == "" || strings.Contains(hostport, "/") {
			return "", fmt.Errorf("broker address %q is neither unix:///abs/path nor http://host:port", addr)
		}
		return hostport, nil
	}
	return "", fmt.Errorf("broker address %q is neither unix:///abs/path nor http://host:port", addr)
}

// Dial opens the connection the session and the host services share: insecure
// (a local socket), 64 MiB messages both ways, no client keepalive (the broker's
// Ping on the stream is the liveness check), static flow-control windows, and a
// unary interceptor adding x-hearth-token to every call, so generated host clients
// need nothing more.
//
// Static windows: with grpc-go's default dynamic windows, every message the broker
// sends is answered with a WINDOW_UPDATE and a BDP PING, and the broker's PING ACK
// wakes the plugin once more — one extra write and wake-up per tool call on each side.
// A local socket has no bandwidth-delay product to discover; 4 MiB per stream and
// 16 MiB per connection are acknowledged a quarter at a time.
func Dial(cfg Config) (*grpc.ClientConn, error) {
	target := cfg.RawTarget
	if target == "" {
		t, err := Target(cfg.Addr)
		if err != nil {
			return nil, err
		}
		target = t
	}
	if err := checkToken(cfg.Token); err != nil {
		return nil, err
	}
	token := cfg.Token
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
		grpc.WithStaticStreamWindowSize(StreamWindowBytes),
		grpc.WithStaticConnWindowSize(ConnWindowBytes),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, TokenMetadata, token), method, req, reply, cc, opts...)
		}),
	}
	opts = append(opts, cfg.DialOptions...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s failed: %v", cfg.Addr, err)
	}
	return conn, nil
}

// stderrLogf writes one line to stderr, the plugin log the broker keeps.
func stderrLogf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}
