// Command host_cases runs the shared host-service cases (tests/host_cases.json)
// through the Go SDK's HomeAgent-style API (`s.Settings().Get(…)`,
// `s.Memory().MergeEntities(…)` …), the Go member of the case runners beside
// tests/plugins/host_cases.py, tests/plugins/host_cases.js and
// sdk-rust/examples/host_cases.rs, driven by the broker's tests/integration/host.rs.
//
// It calls the seed's method where the seed gives it an error result and its E twin
// (SettingsAPIE.DumpE, DocMemoryAPIE.QueryE, LLMAPIE.CurrentSourceE,
// IOInjectorE.InjectTextE …) where the seed's method has none; memory.commit uses
// MemoryAPIE.CommitN, which also returns the count the seed's Commit drops.
//
// HOST_CASES_ROLE picks what the plugin does (its name is HEARTH_PLUGIN):
//   - `runner` (default): tool `<name>_run` runs the file's `cases` and answers the
//     report {lang, section, total, passed, failed: [{step, note, call, args,
//     expected, got, why?}]};
//   - `nocap`: the same tool runs `refusals` (manifest `"capabilities": []`);
//   - `other`: declares the setting `greeting` (default "hello") in Start, the target
//     of the cases' cross-plugin settings calls; tool `<name>_ping`.
//
// HOST_CASES_OTHER names that other plugin (`${other}` in the cases);
// HOST_CASES_FILE overrides the case file.
//
// Numbers: the case file is read with json.Decoder.UseNumber, so a setting's value
// reaches the wire with the file's own text (42 stays 42, 2.5 stays 2.5); the SDK
// gives numbers back as float64, which cannot tell 42 from 42.0, so expectations
// compare numbers by value (as the Node runner does).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"

	"github.com/hearth-dev/hearth/sdk-go/hearth"
	"github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
)

const lang = "go"

type plugin struct {
	name, role, other, file string
	s                       *sdk.PluginSDK
}

func (p *plugin) Name() string { return p.name }
func (p *plugin) Stop() error  { return nil }

func (p *plugin) Start(s *sdk.PluginSDK) error {
	p.s = s
	noParams := map[string]interface{}{"type": "object", "properties": map[string]interface{}{}}
	switch p.role {
	case "other":
		settings, ok := s.Settings().(sdk.SettingsAPIE)
		if !ok {
			return fmt.Errorf("Settings() is no SettingsAPIE")
		}
		err := settings.RegisterDefE(sdk.ConfigDef{Key: "greeting", Type: "string", DisplayName: "Greeting", Default: "hello"})
		if err != nil {
			return err
		}
		return s.RegisterTool(p.name+"_ping", sdk.ToolDef{Description: "Answers pong.", Parameters: noParams},
			func(map[string]interface{}) (interface{}, error) { return "pong", nil })
	case "nocap", "runner", "":
		section := "cases"
		if p.role == "nocap" {
			section = "refusals"
		}
		return s.RegisterTool(p.name+"_run", sdk.ToolDef{Description: "Runs the host-service " + section + ".", Parameters: noParams},
			func(map[string]interface{}) (interface{}, error) { return p.run(section) })
	default:
		return fmt.Errorf("unknown HOST_CASES_ROLE %q (runner, nocap, other)", p.role)
	}
}

// ---------------------------------------------------------------- JSON values

// decode reads JSON keeping numbers as json.Number.
func decode(data []byte) (interface{}, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v interface{}
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// norm is v as generic JSON (maps, slices, json.Number, string, bool, nil).
func norm(v interface{}) (interface{}, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return decode(buf.Bytes())
}

// show is the JSON text of a generic value.
func show(v interface{}) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprintf("%v", v)
	}
	return strings.TrimRight(buf.String(), "\n")
}

// into converts a generic value into out through its JSON.
func into(v interface{}, out interface{}) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

func number(v interface{}) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

// ---------------------------------------------------------------- variables and matching

var variable = regexp.MustCompile(`\$\{(\w+)\}`)

// subst is `${name}` substitution (the `about` of tests/host_cases.json).
func subst(v interface{}, env map[string]interface{}) (interface{}, error) {
	switch x := v.(type) {
	case string:
		if m := variable.FindStringSubmatch(x); m != nil && m[0] == x {
			val, ok := env[m[1]]
			if !ok {
				return nil, fmt.Errorf("unknown variable ${%s}", m[1])
			}
			return val, nil
		}
		var bad error
		out := variable.ReplaceAllStringFunc(x, func(s string) string {
			name := variable.FindStringSubmatch(s)[1]
			val, ok := env[name]
			if !ok {
				bad = fmt.Errorf("unknown variable ${%s}", name)
				return s
			}
			if str, ok := val.(string); ok {
				return str
			}
			return show(val)
		})
		return out, bad
	case []interface{}:
		out := make([]interface{}, len(x))
		for i, e := range x {
			var err error
			if out[i], err = subst(e, env); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]interface{}:
		out := make(map[string]interface{}, len(x))
		for k, e := range x {
			key, err := subst(k, env)
			if err != nil {
				return nil, err
			}
			if out[key.(string)], err = subst(e, env); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return v, nil
}

func isInteger(v interface{}) bool {
	n, ok := v.(json.Number)
	return ok && !strings.ContainsAny(n.String(), ".eE")
}

func typeIs(t string, v interface{}) bool {
	switch t {
	case "string":
		_, ok := v.(string)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		return isInteger(v)
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "object":
		_, ok := v.(map[string]interface{})
		return ok
	case "array":
		_, ok := v.([]interface{})
		return ok
	case "null":
		return v == nil
	}
	return false
}

// match is "" when got satisfies exp, else why not.
func match(exp, got interface{}, path string) string {
	if m, ok := exp.(map[string]interface{}); ok && len(m) == 1 {
		for op, arg := range m {
			if strings.HasPrefix(op, "$") {
				return matcher(op, arg, got, path)
			}
		}
	}
	switch e := exp.(type) {
	case map[string]interface{}:
		g, ok := got.(map[string]interface{})
		if !ok {
			return fmt.Sprintf("%s: expected an object, got %s", path, show(got))
		}
		if !sameKeys(e, g) {
			return fmt.Sprintf("%s: keys %v instead of %v", path, sortedKeys(g), sortedKeys(e))
		}
		for _, k := range sortedKeys(e) {
			if why := match(e[k], g[k], path+"."+k); why != "" {
				return why
			}
		}
		return ""
	case []interface{}:
		g, ok := got.([]interface{})
		if !ok || len(g) != len(e) {
			return fmt.Sprintf("%s: expected %s, got %s", path, show(exp), show(got))
		}
		for i := range e {
			if why := match(e[i], g[i], fmt.Sprintf("%s[%d]", path, i)); why != "" {
				return why
			}
		}
		return ""
	case json.Number:
		ef, _ := number(e)
		gf, ok := number(got)
		if !ok || ef != gf {
			return fmt.Sprintf("%s: expected %s, got %s", path, show(exp), show(got))
		}
		return ""
	case string, bool, nil:
		if got != exp {
			return fmt.Sprintf("%s: expected %s, got %s", path, show(exp), show(got))
		}
		return ""
	}
	return fmt.Sprintf("%s: cannot compare with %s", path, show(exp))
}

func matcher(op string, arg, got interface{}, path string) string {
	switch op {
	case "$any":
		return ""
	case "$type":
		t, _ := arg.(string)
		if typeIs(t, got) {
			return ""
		}
		return fmt.Sprintf("%s: expected a %s, got %s", path, t, show(got))
	case "$gt":
		a, _ := number(arg)
		if g, ok := number(got); ok && g > a {
			return ""
		}
		return fmt.Sprintf("%s: expected a number > %s, got %s", path, show(arg), show(got))
	case "$contains":
		a, _ := arg.(string)
		if g, ok := got.(string); ok && strings.Contains(g, a) {
			return ""
		}
		return fmt.Sprintf("%s: expected a string containing %s, got %s", path, show(arg), show(got))
	case "$no_text":
		a, _ := arg.(string)
		if !strings.Contains(show(got), a) {
			return ""
		}
		return fmt.Sprintf("%s: %s must not appear in %s", path, show(arg), show(got))
	case "$len":
		a, _ := number(arg)
		n := -1
		switch g := got.(type) {
		case []interface{}:
			n = len(g)
		case map[string]interface{}:
			n = len(g)
		case string:
			n = len([]rune(g))
		}
		if n >= 0 && float64(n) == a {
			return ""
		}
		return fmt.Sprintf("%s: expected length %s, got %s", path, show(arg), show(got))
	case "$subset":
		g, ok := got.(map[string]interface{})
		if !ok {
			return fmt.Sprintf("%s: expected an object, got %s", path, show(got))
		}
		a, _ := arg.(map[string]interface{})
		for _, k := range sortedKeys(a) {
			gv, ok := g[k]
			if !ok {
				return fmt.Sprintf("%s: missing key %s in %s", path, show(k), show(got))
			}
			if why := match(a[k], gv, path+"."+k); why != "" {
				return why
			}
		}
		return ""
	case "$includes":
		g, ok := got.([]interface{})
		if !ok {
			return fmt.Sprintf("%s: expected an array, got %s", path, show(got))
		}
		a, _ := arg.([]interface{})
		for _, e := range a {
			found := false
			for _, x := range g {
				if match(e, x, path) == "" {
					found = true
					break
				}
			}
			if !found {
				return fmt.Sprintf("%s: no element matches %s in %s", path, show(e), show(got))
			}
		}
		return ""
	case "$unordered":
		g, ok := got.([]interface{})
		a, _ := arg.([]interface{})
		if !ok || len(g) != len(a) {
			return fmt.Sprintf("%s: expected %d elements in any order, got %s", path, len(a), show(got))
		}
		left := append([]interface{}(nil), g...)
		for _, e := range a {
			i := -1
			for j, x := range left {
				if match(e, x, path) == "" {
					i = j
					break
				}
			}
			if i < 0 {
				return fmt.Sprintf("%s: no element matches %s in %s", path, show(e), show(got))
			}
			left = append(left[:i], left[i+1:]...)
		}
		return ""
	case "$each":
		g, ok := got.([]interface{})
		if !ok {
			return fmt.Sprintf("%s: expected an array, got %s", path, show(got))
		}
		for i, x := range g {
			if why := match(arg, x, fmt.Sprintf("%s[%d]", path, i)); why != "" {
				return why
			}
		}
		return ""
	case "$desc_by":
		field, _ := arg.(string)
		g, ok := got.([]interface{})
		if !ok {
			return fmt.Sprintf("%s: expected objects with a numeric %s, got %s", path, field, show(got))
		}
		prev := math.Inf(1)
		for _, x := range g {
			o, ok := x.(map[string]interface{})
			if !ok {
				return fmt.Sprintf("%s: expected objects with a numeric %s, got %s", path, field, show(got))
			}
			v, ok := number(o[field])
			if !ok {
				return fmt.Sprintf("%s: expected objects with a numeric %s, got %s", path, field, show(got))
			}
			if v > prev {
				return fmt.Sprintf("%s: not sorted by %s, highest first: %s", path, field, show(got))
			}
			prev = v
		}
		return ""
	case "$all":
		a, _ := arg.([]interface{})
		for _, e := range a {
			if why := match(e, got, path); why != "" {
				return why
			}
		}
		return ""
	}
	return fmt.Sprintf("%s: unknown matcher %s", path, op)
}

func sortedKeys(m map[string]interface{}) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sameKeys(a, b map[string]interface{}) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

// ---------------------------------------------------------------- calls

// args are one step's arguments with typed accessors; a wrong argument panics with
// argError, which the step reports as an exception.
type args []interface{}

type argError struct{ msg string }

func (a args) at(i int) interface{} {
	if i >= len(a) {
		panic(argError{fmt.Sprintf("argument %d missing", i)})
	}
	return a[i]
}

func (a args) str(i int) string {
	s, ok := a.at(i).(string)
	if !ok {
		panic(argError{fmt.Sprintf("argument %d: expected a string, got %s", i, show(a.at(i)))})
	}
	return s
}

func (a args) int(i int) int {
	f, ok := number(a.at(i))
	if !ok {
		panic(argError{fmt.Sprintf("argument %d: expected a number, got %s", i, show(a.at(i)))})
	}
	return int(f)
}

func (a args) parse(i int, out interface{}) {
	if err := into(a.at(i), out); err != nil {
		panic(argError{fmt.Sprintf("argument %d: %v", i, err)})
	}
}

// triples reads a list of triples: objects with the seed's names or [s, r, o].
func (a args) triples(i int) []sdk.Triple {
	list, ok := a.at(i).([]interface{})
	if !ok {
		panic(argError{fmt.Sprintf("argument %d: expected a list of triples", i)})
	}
	out := make([]sdk.Triple, 0, len(list))
	for j, t := range list {
		if arr, ok := t.([]interface{}); ok {
			if len(arr) != 3 {
				panic(argError{fmt.Sprintf("triple %d: expected [subject, relation, object]", j)})
			}
			x := args(arr)
			out = append(out, sdk.Triple{Subject: x.str(0), Relation: x.str(1), Object: x.str(2)})
			continue
		}
		var tr sdk.Triple
		if err := into(t, &tr); err != nil {
			panic(argError{fmt.Sprintf("triple %d: %v", j, err)})
		}
		out = append(out, tr)
	}
	return out
}

// call runs one `service.method` of the case file with its arguments and returns
// the result as Go values (nil for a method without result).
func (p *plugin) call(name string, a args) (interface{}, error) {
	s := p.s
	settings := s.Settings()
	settingsE := settings.(sdk.SettingsAPIE)
	memory := s.Memory()
	docs := s.DocMemory()
	docsE := docs.(sdk.DocMemoryAPIE)
	llm := s.LLM()
	llmE := llm.(sdk.LLMAPIE)
	none := func(err error) (interface{}, error) { return nil, err }

	switch name {
	case "settings.get":
		return settings.Get(a.str(0))
	case "settings.set":
		return none(settings.Set(a.str(0), a.at(1)))
	case "settings.list":
		return settings.List(a.str(0))
	case "settings.get_core":
		return settings.GetCore(a.str(0))
	case "settings.set_core":
		return none(settings.SetCore(a.str(0), a.at(1)))
	case "settings.list_core":
		return settings.ListCore(a.str(0))
	case "settings.get_plugin":
		return settings.GetPlugin(a.str(0), a.str(1))
	case "settings.set_plugin":
		return none(settings.SetPlugin(a.str(0), a.str(1), a.at(2)))
	case "settings.list_plugin":
		return settings.ListPlugin(a.str(0), a.str(1))
	case "settings.register_def":
		var def sdk.ConfigDef
		a.parse(0, &def)
		return none(settingsE.RegisterDefE(def))
	case "settings.defs":
		return settingsE.DefsE(a.str(0))
	case "settings.dump":
		return settingsE.DumpE()
	case "settings.plugins":
		return settingsE.PluginsE()

	case "memory.recall":
		var keywords []string
		a.parse(0, &keywords)
		ents, rels, err := memory.Recall(keywords, a.int(1))
		if err != nil {
			return nil, err
		}
		return map[string]interface{}{"entities": ents, "relations": rels}, nil
	case "memory.commit":
		return memory.(sdk.MemoryAPIE).CommitN(a.triples(0))
	case "memory.introspect":
		return memory.Introspect()
	case "memory.merge_entities":
		return memory.MergeEntities(a.str(0), a.str(1))
	case "memory.purge":
		var criteria map[string]string
		a.parse(0, &criteria)
		return memory.Purge(criteria, a.str(1))

	case "text_memory.append":
		var evt sdk.TextEvent
		a.parse(0, &evt)
		return none(s.TextMemory().Append(evt))

	case "doc_memory.query":
		return docsE.QueryE(a.str(0), a.int(1))
	case "doc_memory.insert":
		var doc sdk.Doc
		a.parse(0, &doc)
		return none(docs.Insert(&doc))
	case "doc_memory.remove":
		return none(docsE.RemoveE(a.str(0)))
	case "doc_memory.stats":
		return docsE.StatsE()

	case "knowledge.search":
		return s.Knowledge().Search(a.str(0), a.int(1))
	case "knowledge.add":
		return none(s.Knowledge().Add(a.str(0), a.str(1)))
	case "knowledge.list":
		return s.Knowledge().List()

	case "llm.list_sources":
		return llmE.ListSourcesE()
	case "llm.set_source":
		return none(llm.SetSource(a.str(0)))
	case "llm.current_source":
		return llmE.CurrentSourceE()

	// Injected input speaks as the plugin itself: its own name as the source.
	case "input.inject_text":
		return none(p.input().InjectTextE(p.name, a.str(0), a.str(1)))
	case "input.inject_text_no_memory":
		return none(p.input().InjectTextNoMemoryE(p.name, a.str(0), a.str(1)))
	case "input.inject_interrupt_text":
		return none(p.input().InjectInterruptTextE(p.name, a.str(0), a.str(1)))

	case "mcp.request":
		var params map[string]interface{}
		if len(a) > 2 {
			a.parse(2, &params)
		}
		return s.Mcp().Request(a.str(0), a.str(1), params)
	case "mcp.resources":
		return s.Mcp().Resources(a.str(0))
	case "mcp.resource_templates":
		return s.Mcp().ResourceTemplates(a.str(0))
	case "mcp.read_resource":
		return s.Mcp().ReadResource(a.str(0), a.str(1))
	case "mcp.prompts":
		return s.Mcp().Prompts(a.str(0))
	case "mcp.get_prompt":
		var arguments map[string]string
		if len(a) > 2 {
			a.parse(2, &arguments)
		}
		return s.Mcp().GetPrompt(a.str(0), a.str(1), arguments)
	}
	panic(argError{"unknown call " + name})
}

// input is the seed's IOInjector of the plugin with its E twins.
func (p *plugin) input() sdk.IOInjectorE {
	return p.s.Input()
}

// ---------------------------------------------------------------- steps

type failure = map[string]interface{}

// errorJSON is how a failed call shows in the report.
func errorJSON(err error) map[string]interface{} {
	var he *sdk.HostError
	if errors.As(err, &he) {
		return map[string]interface{}{"error": sdk.CodeName(he.Code()), "message": he.Message()}
	}
	return map[string]interface{}{"exception": err.Error()}
}

// outcome runs one step: its result as generic JSON, or its error.
func (p *plugin) outcome(name string, a args) (got interface{}, err error) {
	defer func() {
		if r := recover(); r != nil {
			if ae, ok := r.(argError); ok {
				err = fmt.Errorf("bad case: %s", ae.msg)
				return
			}
			buf := make([]byte, 8<<10)
			buf = buf[:runtime.Stack(buf, false)]
			err = fmt.Errorf("panic: %v\n%s", r, buf)
		}
	}()
	v, err := p.call(name, a)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(name, "input.") {
		return nil, nil
	}
	return norm(v)
}

// step runs case number i and returns its failure record, or nil.
func (p *plugin) step(i int, c map[string]interface{}, env map[string]interface{}) failure {
	name, _ := c["call"].(string)
	note, _ := c["note"].(string)
	rawArgs := c["args"]
	if rawArgs == nil {
		rawArgs = []interface{}{}
	}
	record := func(a, expected, got interface{}) failure {
		return failure{"step": i, "note": note, "call": name, "args": a, "expected": expected, "got": got}
	}
	sa, err := subst(rawArgs, env)
	if err != nil {
		return record(rawArgs, c["expect"], map[string]interface{}{"exception": err.Error()})
	}
	list, _ := sa.([]interface{})
	got, callErr := p.outcome(name, args(list))

	if want, ok := c["error"]; ok {
		w, err := subst(want, env)
		if err != nil {
			return record(sa, want, map[string]interface{}{"exception": err.Error()})
		}
		expected := map[string]interface{}{"error": w}
		if callErr == nil {
			return record(sa, expected, got)
		}
		ej := errorJSON(callErr)
		wm, _ := w.(map[string]interface{})
		if ej["error"] != wm["code"] {
			return record(sa, expected, ej)
		}
		msg, _ := ej["message"].(string)
		contains, _ := wm["contains"].([]interface{})
		for _, part := range contains {
			if s, _ := part.(string); !strings.Contains(msg, s) {
				return record(sa, expected, ej)
			}
		}
		return nil
	}
	expected, err := subst(c["expect"], env)
	if err != nil {
		return record(sa, c["expect"], map[string]interface{}{"exception": err.Error()})
	}
	if callErr != nil {
		return record(sa, expected, errorJSON(callErr))
	}
	if why := match(expected, got, "$"); why != "" {
		r := record(sa, expected, got)
		r["why"] = why
		return r
	}
	if save, ok := c["save"].(string); ok {
		env[save] = got
	}
	return nil
}

// run runs one section of the case file and returns the report.
func (p *plugin) run(section string) (interface{}, error) {
	data, err := os.ReadFile(p.file)
	if err != nil {
		return nil, err
	}
	file, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", p.file, err)
	}
	root, _ := file.(map[string]interface{})
	cases, ok := root[section].([]interface{})
	if !ok {
		return nil, fmt.Errorf("%s: no section %q", p.file, section)
	}
	env := map[string]interface{}{"self": p.name, "other": p.other, "lang": lang}
	failed := []interface{}{}
	for i, c := range cases {
		cm, _ := c.(map[string]interface{})
		if f := p.step(i+1, cm, env); f != nil {
			failed = append(failed, f)
		}
	}
	return map[string]interface{}{"lang": lang, "section": section, "total": len(cases),
		"passed": len(cases) - len(failed), "failed": failed}, nil
}

func main() {
	name := os.Getenv("HEARTH_PLUGIN")
	if name == "" {
		name = "host_cases_go"
	}
	file := os.Getenv("HOST_CASES_FILE")
	if file == "" {
		// This source file is tests/plugins/go/cmd/host_cases/main.go of the checkout.
		_, src, _, _ := runtime.Caller(0)
		file = filepath.Join(filepath.Dir(src), "..", "..", "..", "..", "host_cases.json")
	}
	role := os.Getenv("HOST_CASES_ROLE")
	if role == "" {
		role = "runner"
	}
	hearth.Serve(&plugin{name: name, role: role, other: os.Getenv("HOST_CASES_OTHER"), file: file})
}
