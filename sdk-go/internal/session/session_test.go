package session

import (
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

func TestTarget(t *testing.T) {
	ok := map[string]string{
		"unix:///tmp/h/hearth.sock":  "unix:///tmp/h/hearth.sock",
		"unix:/tmp/h/hearth.sock":    "unix:/tmp/h/hearth.sock",
		"http://127.0.0.1:7070":      "127.0.0.1:7070",
		"http://127.0.0.1:7070/":     "127.0.0.1:7070",
		"http://localhost:9":         "localhost:9",
		"unix:///a":                  "unix:///a",
		"http://[::1]:8080":          "[::1]:8080",
		"unix:///with space/so.sock": "unix:///with space/so.sock",
	}
	for addr, want := range ok {
		got, err := Target(addr)
		if err != nil || got != want {
			t.Errorf("Target(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
	for _, bad := range []string{"", "unix://relative/x", "unix:relative", "unix:///", "https://h:1", "h:1", "http://", "http://h:1/path"} {
		if got, err := Target(bad); err == nil {
			t.Errorf("Target(%q) = %q, want an error", bad, got)
		} else if !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("Target(%q) error %q does not name the address", bad, err)
		}
	}
}

// pipeWith is the read end's fd of a pipe holding data (write end closed).
func pipeWith(t *testing.T, data string) (fd int) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w.WriteString(data)
		w.Close()
	}()
	// Detach the fd from r: readTokenFD takes it over (and closes it).
	fd, err = syscall.Dup(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	return fd
}

func fdOpen(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil
}

func TestReadTokenFD(t *testing.T) {
	fd := pipeWith(t, "s3cret-token\n")
	tok, err := readTokenFD(strconv.Itoa(fd))
	if err != nil || tok != "s3cret-token" {
		t.Fatalf("readTokenFD = %q, %v", tok, err)
	}
	if fdOpen(fd) {
		t.Errorf("fd %d still open after reading the token", fd)
	}

	cases := []struct {
		data, want string
	}{
		{"", "the pipe held no token"},
		{"  \n", "the pipe held no token"},
		{"tök", "not ASCII"},
		{strings.Repeat("x", maxTokenBytes+1), "more than 65536 bytes"},
	}
	for _, c := range cases {
		fd := pipeWith(t, c.data)
		if _, err := readTokenFD(strconv.Itoa(fd)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("pipe %.10q: err = %v, want %q", c.data, err, c.want)
		}
	}

	for value, want := range map[string]string{
		"abc":         "not a file descriptor number",
		"":            "not a file descriptor number",
		"-3":          "not a file descriptor number",
		"1234567890":  "not a file descriptor number",
		"2":           "fd 2 is stdin, stdout or stderr",
		"987654":      "fd 987654 is not open",
		"0000000001 ": "not a file descriptor number",
	} {
		if _, err := readTokenFD(value); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("readTokenFD(%q) = %v, want %q", value, err, want)
		}
	}

	// A regular file is not ours to take over: refused and left open.
	f, err := os.CreateTemp(t.TempDir(), "notapipe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := readTokenFD(strconv.Itoa(int(f.Fd()))); err == nil || !strings.Contains(err.Error(), "is not a pipe") {
		t.Errorf("regular file: %v", err)
	}
	if !fdOpen(int(f.Fd())) {
		t.Error("the regular file's fd was closed")
	}
}

func TestSpawnTokenFromFD(t *testing.T) {
	tokenOnce = sync.Once{} // SpawnToken keeps its first outcome for the process
	fd := pipeWith(t, "from-the-pipe")
	t.Setenv(EnvToken, "from-the-env")
	t.Setenv(EnvTokenFD, strconv.Itoa(fd))
	tok, err := SpawnToken()
	if err != nil || tok != "from-the-pipe" {
		t.Fatalf("SpawnToken = %q, %v", tok, err)
	}
	if _, set := os.LookupEnv(EnvTokenFD); set {
		t.Errorf("%s still set", EnvTokenFD)
	}
	if tok2, err2 := SpawnToken(); tok2 != tok || err2 != nil {
		t.Errorf("second SpawnToken = %q, %v", tok2, err2)
	}
}

func TestCheckToken(t *testing.T) {
	if err := checkToken("abc-DEF_123.~"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"a\nb", "tab\t", "é"} {
		if checkToken(bad) == nil {
			t.Errorf("checkToken(%q) accepted", bad)
		}
	}
}

func TestValueResult(t *testing.T) {
	cases := []struct {
		name string
		v    any
		err  error
		want Result
	}{
		{"string as is", "晴 <b>", nil, Result{Success: true, Content: "晴 <b>"}},
		{"nil is empty", nil, nil, Result{Success: true}},
		{"map as JSON, sorted, no HTML escaping", map[string]any{"temp": 25, "w": "<晴>"}, nil,
			Result{Success: true, Content: `{"temp":25,"w":"<晴>"}`, DataJSON: `{"temp":25,"w":"<晴>"}`}},
		{"isError with content", map[string]any{"isError": true, "content": "城市不存在"}, nil, Result{Error: "城市不存在"}},
		{"isError with error", map[string]any{"isError": true, "error": "bad"}, nil, Result{Error: "bad"}},
		{"isError bare", map[string]any{"isError": true}, nil, Result{Error: "tool reported an error"}},
		{"isError false is data", map[string]any{"isError": false}, nil, Result{Success: true, Content: `{"isError":false}`, DataJSON: `{"isError":false}`}},
		{"error wins", "x", errors.New("boom"), Result{Error: "boom"}},
		{"raw JSON", json.RawMessage(` {"a":1} `), nil, Result{Success: true, Content: `{"a":1}`, DataJSON: `{"a":1}`}},
		{"bytes as text", []byte("hi"), nil, Result{Success: true, Content: "hi"}},
		{"number", 42, nil, Result{Success: true, Content: "42", DataJSON: "42"}},
		{"struct with tags", struct {
			A int `json:"a"`
		}{1}, nil, Result{Success: true, Content: `{"a":1}`, DataJSON: `{"a":1}`}},
	}
	for _, c := range cases {
		if got := ValueResult("t", c.v, c.err); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
	got := ValueResult("weather", map[string]any{"ch": make(chan int)}, nil)
	if got.Success || !strings.HasPrefix(got.Error, "tool weather: result is not JSON") {
		t.Errorf("unencodable: %+v", got)
	}
}

func TestLinkZoneResult(t *testing.T) {
	got := LinkZoneResult("calc", map[string]any{"success": true, "content": "1+1 = 2", "data": map[string]any{"v": 2}}, nil)
	if want := (Result{Success: true, Content: "1+1 = 2", DataJSON: `{"v":2}`}); got != want {
		t.Errorf("ok: %+v", got)
	}
	got = LinkZoneResult("calc", map[string]any{"success": false, "error": "计算错误"}, nil)
	if want := (Result{Error: "计算错误"}); got != want {
		t.Errorf("failure: %+v", got)
	}
	got = LinkZoneResult("calc", map[string]any{"success": false, "content": "only content"}, nil)
	if want := (Result{Content: "only content", Error: "only content"}); got != want {
		t.Errorf("failure without error: %+v", got)
	}
	got = LinkZoneResult("calc", "plain", nil)
	if want := (Result{Success: true, Content: "plain"}); got != want {
		t.Errorf("plain: %+v", got)
	}
}

func TestDecodeArgs(t *testing.T) {
	for _, text := range []string{"", "null", "{}"} {
		m, err := DecodeArgs(text)
		if err != nil || m == nil || len(m) != 0 {
			t.Errorf("DecodeArgs(%q) = %v, %v", text, m, err)
		}
	}
	m, err := DecodeArgs(`{"n":12345678901234567,"s":"x","o":{"a":[1,true,null]}}`)
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := m["n"].(float64); !ok || n != 12345678901234567 {
		t.Errorf("n = %#v (numbers are float64, as the seed's HomeAgent gave them)", m["n"])
	}
	for text, want := range map[string]string{
		"[1,2]": "not a JSON object (got a JSON array)",
		`"s"`:   "not a JSON object (got a JSON string)",
		"{":     "not a JSON object",
	} {
		if _, err := DecodeArgs(text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeArgs(%q) = %v, want %q", text, err, want)
		}
	}
}

func testSession() *Session {
	return &Session{name: "p", logLine: func(string, ...any) {}}
}

func TestToolResultMessageChecks(t *testing.T) {
	s := testSession()
	c := &Call{id: 7, name: "big", kind: KindTool}
	m := s.toolResultMessage(c, Result{Success: true, Content: strings.Repeat("x", MaxMessageBytes)}).GetToolResult()
	if m.Success || m.CallId != 7 || !strings.Contains(m.Error, "tool big: result is 67108864 bytes, over the 64 MiB message limit") || m.Content != "" {
		t.Errorf("oversized: success=%v error=%q content=%d bytes", m.Success, m.Error, len(m.Content))
	}
	m = s.toolResultMessage(c, Result{Success: true, Content: "a\xffb"}).GetToolResult()
	if m.Success || m.Error != "tool big: result content is not valid UTF-8" {
		t.Errorf("invalid UTF-8: %+v", m)
	}
	m = s.toolResultMessage(c, Result{}).GetToolResult()
	if m.Error != "tool big failed without an error message" {
		t.Errorf("failure without text: %+v", m)
	}
	m = s.toolResultMessage(c, Result{Success: true, Content: "ok", DataJSON: `"ok"`}).GetToolResult()
	if !m.Success || m.Content != "ok" || m.DataJson != `"ok"` {
		t.Errorf("ok: %+v", m)
	}
}

func TestStageResultMessageChecks(t *testing.T) {
	s := testSession()
	c := &Call{id: 3, name: "on_input#0", kind: KindStage}
	r := s.stageResultMessage(c, &pb.StageContext{RawMessage: "ok"}, "").GetStageResult()
	if r.Error != "" || r.Context.GetRawMessage() != "ok" {
		t.Errorf("ok: %+v", r)
	}
	r = s.stageResultMessage(c, &pb.StageContext{ToolCalls: []*pb.ToolCallInfo{{Name: "x", DenyReason: "\xfe"}}}, "").GetStageResult()
	if r.Context != nil || r.Error != "stage hook on_input#0: context field tool_calls[0] is not valid UTF-8" {
		t.Errorf("invalid UTF-8: %+v", r)
	}
	r = s.stageResultMessage(c, &pb.StageContext{ExtraJson: strings.Repeat("x", MaxMessageBytes)}, "").GetStageResult()
	if r.Context != nil || !strings.Contains(r.Error, "over the 64 MiB message limit") {
		t.Errorf("oversized: %q", r.Error)
	}
}

func TestRegisterMessageChecks(t *testing.T) {
	run := func(*Call, map[string]any) Result { return Result{} }
	tool := func(name, desc string) *Tool {
		return &Tool{Spec: &pb.ToolSpec{Name: name, Description: desc}, Run: run}
	}
	reg, err := registerMessage("p", &Spec{Tools: []*Tool{tool("a", "A"), tool("b", "B")}})
	if err != nil || reg.Plugin.Name != "p" || len(reg.Tools) != 2 {
		t.Fatalf("ok: %v %v", reg, err)
	}
	_, err = registerMessage("p", &Spec{Tools: []*Tool{tool("a", "A"), tool("a", "again")}})
	if err == nil || err.Error() != `tool name "a" is registered twice` {
		t.Errorf("duplicate: %v", err)
	}
	_, err = registerMessage("p", &Spec{Tools: []*Tool{tool("a", "bad \xff")}})
	if err == nil || err.Error() != "registration field tools[0].description is not valid UTF-8" {
		t.Errorf("utf8: %v", err)
	}
	handle := func(*Sender) error { return nil }
	_, err = registerMessage("p", &Spec{Events: []*Event{
		{Trigger: Trigger{TriggerCommand, "/w"}, Handle: handle},
		{Trigger: Trigger{TriggerCommand, "/w"}, Handle: handle},
	}})
	if err == nil || err.Error() != "trigger command /w is registered twice" {
		t.Errorf("duplicate trigger: %v", err)
	}
	_, err = registerMessage("p", &Spec{Events: []*Event{{Trigger: Trigger{9, "x"}, Handle: handle}}})
	if err == nil || !strings.Contains(err.Error(), "trigger type 9 x: type must be") {
		t.Errorf("bad trigger type: %v", err)
	}
}

func TestCodeName(t *testing.T) {
	for c, want := range map[codes.Code]string{
		codes.OK: "OK", codes.NotFound: "NOT_FOUND", codes.Unauthenticated: "UNAUTHENTICATED",
		codes.PermissionDenied: "PERMISSION_DENIED", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	} {
		if got := CodeName(c); got != want {
			t.Errorf("CodeName(%v) = %q, want %q", c, got, want)
		}
	}
}

func TestCheckToolNameAndSchema(t *testing.T) {
	for _, ok := range []string{"a", "weather_query", "x-1", strings.Repeat("a", 64)} {
		if err := CheckToolName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for name, want := range map[string]string{
		"":                      "tool name is empty",
		"a b":                   `tool "a b": name contains ' '`,
		"天气":                    `tool "天气": name contains '天'`,
		strings.Repeat("a", 65): "name is 65 bytes; at most 64",
	} {
		if err := CheckToolName(name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckToolName(%q) = %v, want %q", name, err, want)
		}
	}
	if s, err := SchemaJSON(nil); err != nil || s != `{"type":"object","properties":{}}` {
		t.Errorf("nil schema: %q %v", s, err)
	}
	if _, err := SchemaJSON(map[string]any{"type": 12}); err == nil || err.Error() != `parameters must describe an object ("type": "object"), not 12` {
		t.Errorf("type 12: %v", err)
	}
	if _, err := SchemaJSON(map[string]any{"type": "object", "bad": make(chan int)}); err == nil || !strings.HasPrefix(err.Error(), "parameters are not JSON") {
		t.Errorf("chan: %v", err)
	}
}
