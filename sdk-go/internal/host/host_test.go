package host

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

func ptr(v float64) *float64 { return &v }

// wantHostError checks err is a *HostError of method with code, whose message
// contains every part.
func wantHostError(t *testing.T, err error, method string, code codes.Code, parts ...string) *HostError {
	t.Helper()
	var he *HostError
	if !errors.As(err, &he) {
		t.Fatalf("want a *HostError of %s, got %T %v", method, err, err)
	}
	if he.Method != method || he.Code() != code || status.Code(err) != code {
		t.Fatalf("want %s %s, got %s %s (status.Code %s): %v", method, code, he.Method, he.Code(), status.Code(err), err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not contain %q", err.Error(), p)
		}
	}
	return he
}

func wantReq(t *testing.T, got, want proto.Message) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Fatalf("request\n got %v\nwant %v", got, want)
	}
}

func TestSettingsValuesAreJSON(t *testing.T) {
	f := newFixture(t)
	st := f.svc.Settings()

	f.hub.answer("Settings.Get", &pb.ValueResponse{ValueJson: `{"city":"北京","days":[1,2.5,"three"],"none":null}`}, nil)
	v, err := st.Get("profile")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]interface{}{"city": "北京", "days": []interface{}{1.0, 2.5, "three"}, "none": nil}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("Get = %#v, want %#v", v, want)
	}
	wantReq(t, f.hub.last(t, "Settings.Get"), &pb.KeyRequest{Key: "profile"})

	for _, c := range []struct {
		json string
		want interface{}
	}{{"42", 42.0}, {"2.5", 2.5}, {"true", true}, {"null", nil}, {`"Ann"`, "Ann"}} {
		f.hub.answer("Settings.Get", &pb.ValueResponse{ValueJson: c.json}, nil)
		v, err := st.Get("k")
		if err != nil || !reflect.DeepEqual(v, c.want) {
			t.Fatalf("Get of %s = %#v, %v; want %#v", c.json, v, err, c.want)
		}
	}

	for _, c := range []struct {
		value interface{}
		json  string
	}{
		{42, "42"}, {2.5, "2.5"}, {false, "false"}, {nil, "null"},
		{"<b>&</b> 七", `"<b>&</b> 七"`},
		{map[string]interface{}{"ok": true, "n": 1}, `{"n":1,"ok":true}`},
		{json.Number("3.0"), "3.0"},
	} {
		if err := st.Set("k", c.value); err != nil {
			t.Fatal(err)
		}
		wantReq(t, f.hub.last(t, "Settings.Set"), &pb.SetRequest{Key: "k", ValueJson: c.json})
	}

	if err := st.SetPlugin("other", "from_weather", []int{1, 2}); err != nil {
		t.Fatal(err)
	}
	wantReq(t, f.hub.last(t, "Settings.SetPlugin"), &pb.SetRequest{Key: "from_weather", ValueJson: "[1,2]", Plugin: "other"})
	if err := st.SetCore("test.level", 7); err != nil {
		t.Fatal(err)
	}
	wantReq(t, f.hub.last(t, "Settings.SetCore"), &pb.SetRequest{Key: "test.level", ValueJson: "7"})

	f.hub.answer("Settings.GetPlugin", &pb.ValueResponse{ValueJson: `"hello"`}, nil)
	if v, err := st.GetPlugin("other", "greeting"); err != nil || v != "hello" {
		t.Fatalf("GetPlugin = %#v, %v", v, err)
	}
	wantReq(t, f.hub.last(t, "Settings.GetPlugin"), &pb.KeyRequest{Key: "greeting", Plugin: "other"})
	f.hub.answer("Settings.GetCore", &pb.ValueResponse{ValueJson: `"/data"`}, nil)
	if v, err := st.GetCore("core.daemon.data_dir"); err != nil || v != "/data" {
		t.Fatalf("GetCore = %#v, %v", v, err)
	}

	// A value that is not JSON fails before any request.
	err = st.Set("bad", make(chan int))
	wantHostError(t, err, "Settings.Set", codes.InvalidArgument, "value is not JSON")
	if n := f.hub.calls("Settings.Set"); n != 7 {
		t.Fatalf("%d Set requests, want 7 (the bad value must not be sent)", n)
	}
	// Invalid JSON from the broker is INTERNAL.
	f.hub.answer("Settings.Get", &pb.ValueResponse{ValueJson: "{nope"}, nil)
	_, err = st.Get("k")
	wantHostError(t, err, "Settings.Get", codes.Internal, "invalid JSON")
}

func TestSettingsLists(t *testing.T) {
	f := newFixture(t)
	st := f.svc.Settings()
	keys, err := st.List("p")
	if err != nil || keys == nil || len(keys) != 0 {
		t.Fatalf("List of nothing = %#v, %v; want an empty non-nil slice", keys, err)
	}
	wantReq(t, f.hub.last(t, "Settings.List"), &pb.PrefixRequest{Prefix: "p"})
	f.hub.answer("Settings.ListPlugin", &pb.KeysResponse{Keys: []string{"a", "b"}}, nil)
	keys, err = st.ListPlugin("other", "")
	if err != nil || !reflect.DeepEqual(keys, []string{"a", "b"}) {
		t.Fatalf("ListPlugin = %#v, %v", keys, err)
	}
	wantReq(t, f.hub.last(t, "Settings.ListPlugin"), &pb.PrefixRequest{Plugin: "other"})
	f.hub.answer("Settings.ListCore", &pb.KeysResponse{Keys: []string{"test.x"}}, nil)
	if keys, err = st.ListCore("test."); err != nil || !reflect.DeepEqual(keys, []string{"test.x"}) {
		t.Fatalf("ListCore = %#v, %v", keys, err)
	}
	f.hub.answer("Settings.Plugins", &pb.KeysResponse{Keys: []string{"weather", "other"}}, nil)
	if p := st.Plugins(); !reflect.DeepEqual(p, []string{"weather", "other"}) {
		t.Fatalf("Plugins = %#v", p)
	}
}

func TestHostErrorWrapsTheStatus(t *testing.T) {
	f := newFixture(t)
	f.hub.answer("Settings.Get", nil, status.Error(codes.NotFound, "no `city` in config_weather"))
	_, err := f.svc.Settings().Get("city")
	he := wantHostError(t, err, "Settings.Get", codes.NotFound)
	if got, want := err.Error(), "plugin weather: Settings.Get: NOT_FOUND: no `city` in config_weather"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if he.Plugin != "weather" || he.Message() != "no `city` in config_weather" {
		t.Fatalf("HostError %+v", he)
	}
	if st, ok := status.FromError(err); !ok || st.Message() != "no `city` in config_weather" {
		t.Fatalf("status.FromError = %v, %v", st, ok)
	}
	// The session's interceptor ran: the token is on the call.
	if f.hub.tokens[0] != "tok" {
		t.Fatalf("tokens %v", f.hub.tokens)
	}
}

func TestUnimplementedServiceGetsAHint(t *testing.T) {
	f := newFixture(t, "Settings")
	_, err := f.svc.Settings().Get("k")
	wantHostError(t, err, "Settings.Get", codes.Unimplemented, "does not serve this host service")
}

func TestConfigDefMapping(t *testing.T) {
	f := newFixture(t)
	st := f.svc.SettingsE()

	st.RegisterDef(ConfigDef{Key: "retries", Type: "number", DisplayName: "Retries", Default: 3,
		Min: 0, HasMin: true, Max: 10, Step: 1, Category: "net"})
	wantReq(t, f.hub.last(t, "Settings.RegisterDef"), &pb.ConfigDef{Key: "retries", Type: "number",
		DisplayName: "Retries", DefaultJson: "3", Min: ptr(0), Max: ptr(10), Step: ptr(1), Category: "net"})

	// Seed defaults: an empty type is "string", a nil default and zero bounds are none.
	if err := st.RegisterDefE(ConfigDef{Key: "api_key", DisplayName: "API Key", Secret: true, Required: true,
		Options: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	wantReq(t, f.hub.last(t, "Settings.RegisterDef"), &pb.ConfigDef{Key: "api_key", Type: "string",
		DisplayName: "API Key", Secret: true, Required: true, Options: []string{"a"}})

	// A null default is sent when flagged.
	if err := st.RegisterDefE(ConfigDef{Key: "n", HasDefault: true}); err != nil {
		t.Fatal(err)
	}
	wantReq(t, f.hub.last(t, "Settings.RegisterDef"), &pb.ConfigDef{Key: "n", Type: "string", DefaultJson: "null"})

	// No key: refused locally, and logged by the seed method.
	n := f.hub.calls("Settings.RegisterDef")
	err := st.RegisterDefE(ConfigDef{Type: "string"})
	wantHostError(t, err, "Settings.RegisterDef", codes.InvalidArgument, "needs a key")
	st.RegisterDef(ConfigDef{})
	if f.hub.calls("Settings.RegisterDef") != n {
		t.Fatal("a def without key was sent")
	}
	if logs := f.logged(); len(logs) != 1 || !strings.Contains(logs[0], "plugin weather: Settings.RegisterDef: INVALID_ARGUMENT") {
		t.Fatalf("logs %q", logs)
	}

	f.hub.answer("Settings.Defs", &pb.DefsResponse{Defs: []*pb.ConfigDef{
		{Key: "mode", Type: "string", DisplayName: "Mode", DefaultJson: `"fast"`, Options: []string{"fast", "slow"}},
		{Key: "retries", Type: "number", DisplayName: "Retries", DefaultJson: "3", Min: ptr(0), Max: ptr(10), Step: ptr(1)},
	}}, nil)
	defs, err := st.DefsE("")
	if err != nil {
		t.Fatal(err)
	}
	want := []*ConfigDef{
		{Key: "mode", Type: "string", DisplayName: "Mode", Default: "fast", HasDefault: true, Options: []string{"fast", "slow"}},
		{Key: "retries", Type: "number", DisplayName: "Retries", Default: 3.0, HasDefault: true, Min: 0, HasMin: true, Max: 10, HasMax: true, Step: 1, HasStep: true},
	}
	if !reflect.DeepEqual(defs, want) {
		t.Fatalf("Defs = %+v, want %+v", defs, want)
	}
	// The seed's JSON: empty fields left out, flagged zeros kept.
	b, _ := json.Marshal(defs)
	if got := string(b); got != `[{"key":"mode","default":"fast","type":"string","display_name":"Mode","options":["fast","slow"]},`+
		`{"key":"retries","default":3,"type":"number","display_name":"Retries","min":0,"max":10,"step":1}]` {
		t.Fatalf("JSON of defs %s", got)
	}
	wantReq(t, f.hub.last(t, "Settings.Defs"), &pb.PrefixRequest{})

	f.hub.answer("Settings.Defs", nil, status.Error(codes.Unavailable, "gone"))
	if d := st.Defs("x"); d != nil {
		t.Fatalf("Defs on error = %v, want nil", d)
	}
	if _, err := st.DefsE("x"); status.Code(err) != codes.Unavailable {
		t.Fatalf("DefsE err %v", err)
	}
}

func TestConfigDefJSON(t *testing.T) {
	var d ConfigDef
	if err := json.Unmarshal([]byte(`{"key":"k","type":"number","display_name":"K","min":0.0,"step":0.5,"default":null,"required":true}`), &d); err != nil {
		t.Fatal(err)
	}
	want := ConfigDef{Key: "k", Type: "number", DisplayName: "K", HasMin: true, Step: 0.5, HasStep: true, HasDefault: true, Required: true}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("Unmarshal = %+v, want %+v", d, want)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"key":"k","default":null,"type":"number","display_name":"K","min":0,"step":0.5,"required":true}` {
		t.Fatalf("Marshal = %s", b)
	}
	// null leaves a def as it is.
	if err := json.Unmarshal([]byte("null"), &d); err != nil || !reflect.DeepEqual(d, want) {
		t.Fatalf("Unmarshal of null = %+v, %v", d, err)
	}
	// Without flags it is exactly the seed's struct tags' JSON.
	b, _ = json.Marshal(ConfigDef{Key: "k", Type: "string", DisplayName: "K", Secret: true})
	if string(b) != `{"key":"k","type":"string","display_name":"K","secret":true}` {
		t.Fatalf("Marshal = %s", b)
	}
}

func TestSeedMethodsWithoutErrorLogAndTwinsReturn(t *testing.T) {
	f := newFixture(t)
	denied := func(m string) error {
		return status.Errorf(codes.PermissionDenied, "%s: capability `x` not granted", m)
	}
	for _, m := range []string{"Settings.Dump", "Settings.Plugins", "DocMemory.Query", "DocMemory.Remove",
		"DocMemory.Stats", "Llm.ListSources", "Llm.CurrentSource", "Input.InjectText",
		"Input.InjectTextNoMemory", "Input.InjectInterruptText"} {
		f.hub.answer(m, nil, denied(m))
	}
	s := f.svc
	if s.Settings().Dump() != nil || s.Settings().Plugins() != nil || s.DocMemory().Query("x", 1) != nil ||
		s.DocMemory().Stats() != nil || s.LLM().ListSources() != nil || s.LLM().CurrentSource() != "" {
		t.Fatal("a seed method returned a non-zero value on error")
	}
	s.DocMemory().Remove("x")
	s.Input().InjectText("", "c", "t")
	s.Input().InjectTextNoMemory("", "c", "t")
	s.Input().InjectInterruptText("", "c", "t")
	logs := f.logged()
	if len(logs) != 10 {
		t.Fatalf("%d lines logged, want 10: %q", len(logs), logs)
	}
	for i, m := range []string{"Settings.Dump", "Settings.Plugins", "DocMemory.Query", "DocMemory.Stats",
		"Llm.ListSources", "Llm.CurrentSource", "DocMemory.Remove", "Input.InjectText",
		"Input.InjectTextNoMemory", "Input.InjectInterruptText"} {
		if !strings.Contains(logs[i], "plugin weather: "+m+": PERMISSION_DENIED") {
			t.Fatalf("log %d = %q, want %s", i, logs[i], m)
		}
	}

	_, err := s.SettingsE().DumpE()
	wantHostError(t, err, "Settings.Dump", codes.PermissionDenied, "capability `x`")
	_, err = s.SettingsE().PluginsE()
	wantHostError(t, err, "Settings.Plugins", codes.PermissionDenied)
	_, err = s.DocMemoryE().QueryE("x", 1)
	wantHostError(t, err, "DocMemory.Query", codes.PermissionDenied)
	wantHostError(t, s.DocMemoryE().RemoveE("x"), "DocMemory.Remove", codes.PermissionDenied)
	_, err = s.DocMemoryE().StatsE()
	wantHostError(t, err, "DocMemory.Stats", codes.PermissionDenied)
	_, err = s.LLME().ListSourcesE()
	wantHostError(t, err, "Llm.ListSources", codes.PermissionDenied)
	_, err = s.LLME().CurrentSourceE()
	wantHostError(t, err, "Llm.CurrentSource", codes.PermissionDenied)
	wantHostError(t, s.InputE().InjectTextE("", "c", "t"), "Input.InjectText", codes.PermissionDenied)
	wantHostError(t, s.InputE().InjectTextNoMemoryE("", "c", "t"), "Input.InjectTextNoMemory", codes.PermissionDenied)
	wantHostError(t, s.InputE().InjectInterruptTextE("", "c", "t"), "Input.InjectInterruptText", codes.PermissionDenied)

	// The accessors' seed values are the twins too.
	if _, ok := s.Settings().(SettingsAPIE); !ok {
		t.Fatal("Settings() is no SettingsAPIE")
	}
	if _, ok := s.DocMemory().(DocMemoryAPIE); !ok {
		t.Fatal("DocMemory() is no DocMemoryAPIE")
	}
	if _, ok := s.LLM().(LLMAPIE); !ok {
		t.Fatal("LLM() is no LLMAPIE")
	}
	if _, ok := s.Input().(IOInjectorE); !ok {
		t.Fatal("Input() is no IOInjectorE")
	}
	if _, ok := s.Memory().(MemoryAPIE); !ok {
		t.Fatal("Memory() is no MemoryAPIE")
	}
}

func TestDumpAndStatsObjects(t *testing.T) {
	f := newFixture(t)
	f.hub.answer("Settings.Dump", &pb.DumpResponse{DumpJson: `{"core":{"a":1},"plugins":{"weather":{"api_key":"••••••"}}}`}, nil)
	d := f.svc.Settings().Dump()
	want := map[string]interface{}{"core": map[string]interface{}{"a": 1.0},
		"plugins": map[string]interface{}{"weather": map[string]interface{}{"api_key": "••••••"}}}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("Dump = %#v", d)
	}
	// Empty JSON text is an empty object, not nil.
	if st := f.svc.DocMemory().Stats(); st == nil || len(st) != 0 {
		t.Fatalf("Stats of empty text = %#v", st)
	}
	f.hub.answer("DocMemory.Stats", &pb.StatsResponse{StatsJson: `{"docs":2,"text_bytes":120}`}, nil)
	if st := f.svc.DocMemory().Stats(); !reflect.DeepEqual(st, map[string]interface{}{"docs": 2.0, "text_bytes": 120.0}) {
		t.Fatalf("Stats = %#v", st)
	}
}

func TestMemory(t *testing.T) {
	f := newFixture(t)
	m := f.svc.MemoryE()

	f.hub.answer("Memory.Recall", &pb.RecallResponse{
		Entities:  []*pb.Entity{{Name: "Alice", Type: "Person", MentionCount: 4}, {Name: "tea", MentionCount: 1}},
		Relations: []*pb.Relation{{SourceName: "Alice", TargetName: "tea", RelationType: "likes"}},
	}, nil)
	ents, rels, err := m.Recall([]string{"alice"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ents, []Entity{{Name: "Alice", Type: "Person", MentionCount: 4}, {Name: "tea", MentionCount: 1}}) ||
		!reflect.DeepEqual(rels, []Relation{{SourceName: "Alice", TargetName: "tea", RelationType: "likes"}}) {
		t.Fatalf("Recall = %+v %+v", ents, rels)
	}
	wantReq(t, f.hub.last(t, "Memory.Recall"), &pb.RecallRequest{Keywords: []string{"alice"}, Depth: 2})
	f.hub.answer("Memory.Recall", &pb.RecallResponse{}, nil)
	ents, rels, err = m.Recall(nil, -1)
	if err != nil || ents == nil || rels == nil || len(ents)+len(rels) != 0 {
		t.Fatalf("empty Recall = %#v %#v %v; want empty non-nil slices", ents, rels, err)
	}
	wantReq(t, f.hub.last(t, "Memory.Recall"), &pb.RecallRequest{Depth: 0})

	f.hub.answer("Memory.Commit", &pb.CommitResponse{Committed: 2}, nil)
	triples := []Triple{
		{Subject: "Alice", Relation: "likes", Object: "coffee", SubjectType: "Person", ObjectType: "Drink", SessionID: "s1"},
		{Subject: "Carol", Relation: "likes", Object: "tea"},
	}
	if n, err := m.CommitN(triples); err != nil || n != 2 {
		t.Fatalf("CommitN = %d, %v", n, err)
	}
	wantReq(t, f.hub.last(t, "Memory.Commit"), &pb.CommitRequest{Triples: []*pb.Triple{
		{Subject: "Alice", Relation: "likes", Object: "coffee", SubjectType: "Person", ObjectType: "Drink", SessionId: "s1"},
		{Subject: "Carol", Relation: "likes", Object: "tea"},
	}})
	if err := m.Commit(triples[1:]); err != nil {
		t.Fatal(err)
	}
	f.hub.answer("Memory.Commit", nil, status.Error(codes.InvalidArgument, "triple 0: empty subject"))
	wantHostError(t, m.Commit([]Triple{{Relation: "x"}}), "Memory.Commit", codes.InvalidArgument, "empty subject")

	f.hub.answer("Memory.Introspect", &pb.IntrospectResponse{StatsJson: `{"entities":7,"entity_types":{"":2}}`}, nil)
	if st, err := m.Introspect(); err != nil || !reflect.DeepEqual(st, map[string]interface{}{"entities": 7.0, "entity_types": map[string]interface{}{"": 2.0}}) {
		t.Fatalf("Introspect = %#v, %v", st, err)
	}

	f.hub.answer("Memory.MergeEntities", &pb.CountResponse{Count: 1}, nil)
	if n, err := m.MergeEntities("Robert", "Bob"); err != nil || n != 1 {
		t.Fatalf("MergeEntities = %d, %v", n, err)
	}
	wantReq(t, f.hub.last(t, "Memory.MergeEntities"), &pb.MergeRequest{Source: "Robert", Target: "Bob"})
	f.hub.answer("Memory.MergeEntities", nil, status.Error(codes.NotFound, "no entity Nobody"))
	n, err := m.MergeEntities("Nobody", "Bob")
	wantHostError(t, err, "Memory.MergeEntities", codes.NotFound, "Nobody")
	if n != 0 {
		t.Fatalf("count on error %d", n)
	}

	f.hub.answer("Memory.Purge", &pb.CountResponse{Count: 3}, nil)
	if n, err := m.Purge(map[string]string{"relation_type": "likes"}, "soft"); err != nil || n != 3 {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	wantReq(t, f.hub.last(t, "Memory.Purge"), &pb.PurgeRequest{Criteria: map[string]string{"relation_type": "likes"}, Mode: "soft"})
}

func TestTextMemory(t *testing.T) {
	f := newFixture(t)
	if err := f.svc.TextMemory().Append(TextEvent{Role: "user", Content: "今天", Timestamp: 1700000000, Channel: "test"}); err != nil {
		t.Fatal(err)
	}
	wantReq(t, f.hub.last(t, "TextMemory.Append"), &pb.TextEvent{Role: "user", Content: "今天", Timestamp: 1700000000, Channel: "test"})
	f.hub.answer("TextMemory.Append", nil, status.Error(codes.PermissionDenied, "TextMemory.Append: capability `memory` not granted"))
	wantHostError(t, f.svc.TextMemory().Append(TextEvent{}), "TextMemory.Append", codes.PermissionDenied, "`memory`")
}

func TestDocMemory(t *testing.T) {
	f := newFixture(t)
	dm := f.svc.DocMemoryE()
	if err := dm.Insert(&Doc{ID: "d1", Title: "Weather", Content: "sunny", Score: 9}); err != nil {
		t.Fatal(err)
	}
	wantReq(t, f.hub.last(t, "DocMemory.Insert"), &pb.Doc{Id: "d1", Title: "Weather", Content: "sunny"})
	if err := dm.Insert(nil); err != nil {
		t.Fatal(err)
	}
	wantReq(t, f.hub.last(t, "DocMemory.Insert"), &pb.Doc{})

	f.hub.answer("DocMemory.Query", &pb.DocsResponse{Docs: []*pb.Doc{{Id: "d1", Title: "Weather", Content: "sunny", Score: 0.7}}}, nil)
	docs := dm.Query("sunny weather", 5)
	if !reflect.DeepEqual(docs, []*Doc{{ID: "d1", Title: "Weather", Content: "sunny", Score: 0.7}}) {
		t.Fatalf("Query = %+v", docs)
	}
	wantReq(t, f.hub.last(t, "DocMemory.Query"), &pb.DocQuery{Text: "sunny weather", TopK: 5})
	f.hub.answer("DocMemory.Query", &pb.DocsResponse{}, nil)
	if docs, err := dm.QueryE("quantum", 5); err != nil || docs == nil || len(docs) != 0 {
		t.Fatalf("empty QueryE = %#v, %v; want an empty non-nil slice", docs, err)
	}

	dm.Remove("d1")
	wantReq(t, f.hub.last(t, "DocMemory.Remove"), &pb.IdRequest{Id: "d1"})
	f.hub.answer("DocMemory.Remove", nil, status.Error(codes.NotFound, "no document d3"))
	wantHostError(t, dm.RemoveE("d3"), "DocMemory.Remove", codes.NotFound, "d3")
	if len(f.logged()) != 0 {
		t.Fatalf("logged %q", f.logged())
	}
}

func TestKnowledge(t *testing.T) {
	f := newFixture(t)
	k := f.svc.Knowledge()
	if err := k.Add("天气知识", "带伞"); err != nil {
		t.Fatal(err)
	}
	wantReq(t, f.hub.last(t, "Knowledge.Add"), &pb.KnowledgeEntry{Name: "天气知识", Content: "带伞"})
	f.hub.answer("Knowledge.Search", &pb.KnowledgeResponse{Entries: []*pb.KnowledgeEntry{{Name: "a", Content: "x", Score: 1.5}, {Name: "b", Content: "y", Score: 0.5}}}, nil)
	got, err := k.Search("plugin", 2)
	if err != nil || !reflect.DeepEqual(got, []*Knowledge{{Name: "a", Content: "x", Score: 1.5}, {Name: "b", Content: "y", Score: 0.5}}) {
		t.Fatalf("Search = %+v, %v", got, err)
	}
	wantReq(t, f.hub.last(t, "Knowledge.Search"), &pb.KnowledgeQuery{Query: "plugin", TopK: 2})
	if names, err := k.List(); err != nil || names == nil || len(names) != 0 {
		t.Fatalf("List = %#v, %v", names, err)
	}
	f.hub.answer("Knowledge.Add", nil, status.Error(codes.InvalidArgument, "empty name"))
	wantHostError(t, k.Add("", "x"), "Knowledge.Add", codes.InvalidArgument, "empty name")
}

func TestLLM(t *testing.T) {
	f := newFixture(t)
	l := f.svc.LLM()
	f.hub.answer("Llm.ListSources", &pb.KeysResponse{Keys: []string{"alpha", "beta"}}, nil)
	if s := l.ListSources(); !reflect.DeepEqual(s, []string{"alpha", "beta"}) {
		t.Fatalf("ListSources = %v", s)
	}
	f.hub.answer("Llm.CurrentSource", &pb.SourceRequest{Name: "alpha"}, nil)
	if c := l.CurrentSource(); c != "alpha" {
		t.Fatalf("CurrentSource = %q", c)
	}
	if err := l.SetSource("beta"); err != nil {
		t.Fatal(err)
	}
	wantReq(t, f.hub.last(t, "Llm.SetSource"), &pb.SourceRequest{Name: "beta"})
	f.hub.answer("Llm.SetSource", nil, status.Error(codes.NotFound, "no LLM source nope"))
	wantHostError(t, l.SetSource("nope"), "Llm.SetSource", codes.NotFound, "nope")
}

func TestInput(t *testing.T) {
	f := newFixture(t)
	in := f.svc.InputE()
	in.InjectText("", "test", "hello")
	wantReq(t, f.hub.last(t, "Input.InjectText"), &pb.InjectRequest{Source: "weather", Channel: "test", Text: "hello"})
	if err := in.InjectTextNoMemoryE("qq:42", "qq", "quiet"); err != nil {
		t.Fatal(err)
	}
	wantReq(t, f.hub.last(t, "Input.InjectTextNoMemory"), &pb.InjectRequest{Source: "qq:42", Channel: "qq", Text: "quiet"})
	in.InjectInterruptText("weather", "", "now")
	wantReq(t, f.hub.last(t, "Input.InjectInterruptText"), &pb.InjectRequest{Source: "weather", Text: "now"})
	f.hub.answer("Input.InjectText", nil, status.Error(codes.ResourceExhausted, "queue full"))
	wantHostError(t, in.InjectTextE("", "test", "x"), "Input.InjectText", codes.ResourceExhausted, "queue full")
}

func TestMcp(t *testing.T) {
	f := newFixture(t)
	mc := f.svc.Mcp()

	f.hub.answer("Mcp.Request", &pb.McpResponse{ResultJson: `{"resources":[]}`}, nil)
	r, err := mc.Request("docs", "resources/list", nil)
	if err != nil || !reflect.DeepEqual(r, map[string]interface{}{"resources": []interface{}{}}) {
		t.Fatalf("Request = %#v, %v", r, err)
	}
	wantReq(t, f.hub.last(t, "Mcp.Request"), &pb.McpRequest{Server: "docs", Method: "resources/list"})
	if _, err := mc.Request("docs", "resources/list", map[string]interface{}{}); err != nil {
		t.Fatal(err)
	}
	wantReq(t, f.hub.last(t, "Mcp.Request"), &pb.McpRequest{Server: "docs", Method: "resources/list", ParamsJson: "{}"})

	// Listings follow nextCursor over every page.
	f.hub.handle("Mcp.Request", func(req proto.Message) (proto.Message, error) {
		switch req.(*pb.McpRequest).GetParamsJson() {
		case "":
			return &pb.McpResponse{ResultJson: `{"resources":[{"uri":"a"}],"nextCursor":"p2"}`}, nil
		case `{"cursor":"p2"}`:
			return &pb.McpResponse{ResultJson: `{"resources":[{"uri":"b"},{"uri":"c"}]}`}, nil
		}
		return nil, status.Error(codes.InvalidArgument, "bad cursor")
	})
	res, err := mc.Resources("docs")
	if err != nil || !reflect.DeepEqual(res, []map[string]interface{}{{"uri": "a"}, {"uri": "b"}, {"uri": "c"}}) {
		t.Fatalf("Resources = %#v, %v", res, err)
	}
	if n := f.hub.calls("Mcp.Request"); n != 4 {
		t.Fatalf("%d requests, want 4", n)
	}

	f.hub.answer("Mcp.Request", &pb.McpResponse{ResultJson: `{"resourceTemplates":[{"uriTemplate":"t/{x}"}]}`}, nil)
	if tl, err := mc.ResourceTemplates("docs"); err != nil || !reflect.DeepEqual(tl, []map[string]interface{}{{"uriTemplate": "t/{x}"}}) {
		t.Fatalf("ResourceTemplates = %#v, %v", tl, err)
	}
	wantReq(t, f.hub.last(t, "Mcp.Request"), &pb.McpRequest{Server: "docs", Method: "resources/templates/list"})
	f.hub.answer("Mcp.Request", &pb.McpResponse{ResultJson: `{"prompts":[{"name":"greet"}]}`}, nil)
	if p, err := mc.Prompts("docs"); err != nil || !reflect.DeepEqual(p, []map[string]interface{}{{"name": "greet"}}) {
		t.Fatalf("Prompts = %#v, %v", p, err)
	}
	// A result without the list is an error, not an empty list.
	_, err = mc.Resources("docs")
	wantHostError(t, err, "Mcp.Request", codes.Internal, "no `resources` list")

	f.hub.answer("Mcp.Request", &pb.McpResponse{ResultJson: `{"contents":[{"uri":"test://doc/1","text":"hi"}]}`}, nil)
	c, err := mc.ReadResource("docs", "test://doc/1")
	if err != nil || !reflect.DeepEqual(c, []map[string]interface{}{{"uri": "test://doc/1", "text": "hi"}}) {
		t.Fatalf("ReadResource = %#v, %v", c, err)
	}
	wantReq(t, f.hub.last(t, "Mcp.Request"), &pb.McpRequest{Server: "docs", Method: "resources/read", ParamsJson: `{"uri":"test://doc/1"}`})

	f.hub.answer("Mcp.Request", &pb.McpResponse{ResultJson: `{"messages":[]}`}, nil)
	if _, err := mc.GetPrompt("docs", "greet", map[string]string{"name": "Ann"}); err != nil {
		t.Fatal(err)
	}
	wantReq(t, f.hub.last(t, "Mcp.Request"), &pb.McpRequest{Server: "docs", Method: "prompts/get", ParamsJson: `{"arguments":{"name":"Ann"},"name":"greet"}`})
	if _, err := mc.GetPrompt("docs", "greet", nil); err != nil {
		t.Fatal(err)
	}
	wantReq(t, f.hub.last(t, "Mcp.Request"), &pb.McpRequest{Server: "docs", Method: "prompts/get", ParamsJson: `{"arguments":{},"name":"greet"}`})

	f.hub.answer("Mcp.Request", nil, status.Error(codes.NotFound, "no MCP plugin named nope"))
	_, err = mc.GetPrompt("nope", "greet", nil)
	wantHostError(t, err, "Mcp.Request", codes.NotFound, "no MCP plugin named nope")
	_, err = mc.Prompts("nope")
	wantHostError(t, err, "Mcp.Request", codes.NotFound, "nope")
}

func TestDeadlineAndContext(t *testing.T) {
	f := newFixture(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	f.hub.handle("Llm.CurrentSource", func(proto.Message) (proto.Message, error) {
		<-release
		return nil, nil
	})

	if f.svc.timeout != DefaultTimeout || DefaultTimeout != 30*time.Second {
		t.Fatalf("default timeout %v", f.svc.timeout)
	}
	start := time.Now()
	_, err := f.svc.WithTimeout(50 * time.Millisecond).LLME().CurrentSourceE()
	wantHostError(t, err, "Llm.CurrentSource", codes.DeadlineExceeded)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("deadline took %v", d)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	_, err = f.svc.WithContext(ctx).LLME().CurrentSourceE()
	wantHostError(t, err, "Llm.CurrentSource", codes.Canceled)

	// The copies leave the original alone.
	if f.svc.ctx != context.Background() || f.svc.timeout != DefaultTimeout {
		t.Fatal("WithContext / WithTimeout changed the receiver")
	}
	if f.svc.Plugin() != "weather" {
		t.Fatalf("Plugin() = %q", f.svc.Plugin())
	}
}

func TestNewHostErrorAndCodeName(t *testing.T) {
	err := NewHostError("p", "Knowledge.Add", codes.FailedPrecondition, "x")
	if err.Error() != "plugin p: Knowledge.Add: FAILED_PRECONDITION: x" || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("%v", err)
	}
	if CodeName(codes.Canceled) != "CANCELLED" || CodeName(codes.Code(99)) != "CODE(99)" {
		t.Fatal("CodeName")
	}
}
