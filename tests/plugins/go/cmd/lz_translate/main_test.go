package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/hearth-dev/hearth/sdk-go/hearthtest"
	"github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
)

// translateCase is one case of tests/plugins/lz_translate_cases.json.
type translateCase struct {
	Params  []string `json:"params"`
	Replies []string `json:"replies"`
	Error   string   `json:"error"`
}

func loadCases(t *testing.T) []translateCase {
	t.Helper()
	raw, err := os.ReadFile("../../../lz_translate_cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []translateCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) == 0 {
		t.Fatal("lz_translate_cases.json has no cases")
	}
	return file.Cases
}

var trigger = sdk.Trigger{Type: sdk.TriggerCommand, Pattern: "/translate"}

// The Go SDK reports an event handler's error as "event handler of trigger <trigger>:
// <error>", where the Python and Node SDKs send "<ExceptionName>: <message>" alone.
// The plugin's own part must equal the cases' error; the prefix, when there is one,
// must be exactly this.
const eventErrorPrefix = "event handler of trigger command /translate: "

func TestRegistersTheSeedMetadata(t *testing.T) {
	b := hearthtest.StartWith(t, &TranslatePlugin{}, hearthtest.Options{Name: "translate", Quiet: true})
	reg := b.Registration()
	if reg.GetPlugin().GetName() != "translate" || len(reg.GetTools()) != 0 {
		t.Fatalf("plugin %q, tools %v", reg.GetPlugin().GetName(), reg.GetTools())
	}
	var trig [][2]any
	for _, tr := range reg.GetTriggers() {
		trig = append(trig, [2]any{int32(tr.GetType()), tr.GetPattern()})
	}
	if want := [][2]any{{int32(0), "/translate"}}; !reflect.DeepEqual(trig, want) {
		t.Fatalf("triggers %v, want %v", trig, want)
	}
	inj := reg.GetInject()
	wantArgs := map[string]string{"text": "要翻译的文本", "lang": "目标语言（如 en、ja、zh）"}
	if inj.GetUsage() != "翻译文本到指定语言" || inj.GetFormat() != "/translate {text} {lang}" ||
		!reflect.DeepEqual(inj.GetArgs(), wantArgs) {
		t.Fatalf("inject %v", inj)
	}
	if rejected := b.Answer().GetRegistered().GetRejected(); len(rejected) != 0 {
		t.Fatalf("rejected: %v", rejected)
	}
}

// TestRepliesLikeThePythonAndNodeTwins delivers every case of lz_translate_cases.json as
// the broker does (HandleEvent with the message and its params) and compares the Reply
// texts and the event's error, as sdk-python/tests/test_inject.py and
// sdk-node/test/inject.test.js do for the other two.
func TestRepliesLikeThePythonAndNodeTwins(t *testing.T) {
	b := hearthtest.StartWith(t, &TranslatePlugin{}, hearthtest.Options{Name: "translate", Quiet: true})
	for _, c := range loadCases(t) {
		message := strings.Join(append([]string{"/translate"}, c.Params...), " ")
		got, err := b.Event(trigger, message, c.Params...)
		if err != nil {
			t.Fatalf("%v: %v", c.Params, err)
		}
		replies := got.Replies
		if replies == nil {
			replies = []string{}
		}
		if !reflect.DeepEqual(replies, c.Replies) {
			t.Errorf("%v: replies %q, want %q", c.Params, replies, c.Replies)
		}
		if got.Error != c.Error && (c.Error == "" || got.Error != eventErrorPrefix+c.Error) {
			t.Errorf("%v: error %q, want %q", c.Params, got.Error, c.Error)
		}
	}
}

// Several events at once: each one's reply is its own.
func TestConcurrentEvents(t *testing.T) {
	b := hearthtest.StartWith(t, &TranslatePlugin{}, hearthtest.Options{Name: "translate", Quiet: true})
	cases := loadCases(t)
	var pending []*hearthtest.Pending
	for _, c := range cases {
		p, err := b.StartEvent(trigger, strings.Join(append([]string{"/translate"}, c.Params...), " "), c.Params)
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, p)
	}
	for i, p := range pending {
		got, err := p.EventResult()
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Replies) != len(cases[i].Replies) || (len(got.Replies) == 1 && got.Replies[0] != cases[i].Replies[0]) {
			t.Errorf("%v: replies %q, want %q", cases[i].Params, got.Replies, cases[i].Replies)
		}
	}
}

func TestTranslateRules(t *testing.T) {
	for _, c := range []struct{ text, lang, want string }{
		{"你好 世界", "ja", "こんにちは世界"},            // a space between two words is dropped into ja
		{"hello  world", "zh", "你好  世界"},      // … but not two spaces (two sep segments)
		{"hi, bye", "zh", "你好, 再见"},           // spellings other than the first are read too
		{"THANK YOU", "ja", "ありがとう"},          // English is matched case-insensitively
		{"good morning world", "zh", "早上好世界"}, // phrases, longest first
		{"a1b", "zh", "a1b"},                  // digits are neither Latin nor separators
		{"天気 今日", "en", "weather today"},      // Japanese source
		{"水\u3000水", "zh", "水水"},              // an ideographic space is whitespace
		{"x", " EN ", "x"},                    // lang is trimmed and lower-cased
		{"", "en", ""},                        // nothing to translate
		{"好好", "en", "good good"},             // adjacent words get a space into en
		{"私は猫", "zh", "我は猫"},                  // unknown kana kept as written
	} {
		got, err := translate(c.text, c.lang)
		if err != nil || got != c.want {
			t.Errorf("translate(%q, %q) = %q, %v; want %q", c.text, c.lang, got, err, c.want)
		}
	}
	_, err := translate("你好", "klingon")
	var ule *UnsupportedLanguageError
	if err == nil || err.Error() != "UnsupportedLanguageError: unsupported target language klingon; supported: zh, en, ja" {
		t.Fatalf("error %v", err)
	}
	if !errors.As(err, &ule) || ule.Lang != "klingon" {
		t.Fatalf("error type %T", err)
	}
	if longest != 5 { // こんにちは, さようなら, ありがとう
		t.Fatalf("longest = %d", longest)
	}
}

// TestAgreesWithThePythonTwin translates generated texts (dictionary words in the three
// languages, unknown Latin and CJK words, digits, emoji, spaces and punctuation) into
// every language with this port and with tests/plugins/lz_translate.py, and compares.
// It needs a Python with the SDK: $HEARTH_PYTHON, else the repo's .venv (skipped when
// neither imports hearth_plugin).
func TestAgreesWithThePythonTwin(t *testing.T) {
	python := os.Getenv("HEARTH_PYTHON")
	if python == "" {
		python = "../../../../../.venv/bin/python"
	}
	if err := exec.Command(python, "-c", "import hearth_plugin").Run(); err != nil {
		t.Skipf("no Python with hearth_plugin (%s: %v)", python, err)
	}
	pieces := []string{"你好", "世界", "我", "爱", "猫", "天气", "早上好", "今天", "好", "こんにちは",
		"ありがとう", "私", "です", "は", "hello", "Hello", "world", "thank", "you", "thank you",
		"good", "morning", "GOOD MORNING", "bye", "I", "me", "Bob", "x", "42", "😀", " ", "  ",
		"\u3000", ",", "，", "。", "！", "!", "-", "\t", "é", "Ünïcode", "的"}
	rng := uint32(2463534242)
	next := func(n int) int {
		rng ^= rng << 13
		rng ^= rng >> 17
		rng ^= rng << 5
		return int(rng % uint32(n))
	}
	var texts []string
	for i := 0; i < 400; i++ {
		var b strings.Builder
		for k := next(7); k >= 0; k-- {
			b.WriteString(pieces[next(len(pieces))])
		}
		texts = append(texts, b.String())
	}
	langs := []string{"en", "zh", "ja"}
	input, _ := json.Marshal(map[string]any{"texts": texts, "langs": langs})
	cmd := exec.Command(python, "-c", `
import json, sys
sys.path.insert(0, "../../..")
from lz_translate import translate
job = json.load(sys.stdin)
json.dump([[translate(t, l) for l in job["langs"]] for t in job["texts"]], sys.stdout)
`)
	cmd.Stdin = strings.NewReader(string(input))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var want [][]string
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	for i, text := range texts {
		for j, lang := range langs {
			got, err := translate(text, lang)
			if err != nil || got != want[i][j] {
				t.Errorf("translate(%q, %s) = %q, %v; Python: %q", text, lang, got, err, want[i][j])
			}
		}
	}
}
