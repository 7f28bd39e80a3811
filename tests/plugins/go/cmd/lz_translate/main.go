// Command lz_translate is the LinkZone TranslatePlugin (seed
// linkzone-ai-tool-plugins.md, 注入调用模式 示例 — "示例" under "注入调用模式（inject）"),
// the Go twin of tests/plugins/lz_translate.py and tests/plugins/lz_translate.js: the
// same plugin, trigger, inject spec, offline dictionary, rules, replies and errors
// (tests/plugins/lz_translate_cases.json holds what all three answer; main_test.go runs
// it).
//
// Plugin `translate`, trigger type 0 `/translate`, no tools. `/translate {text} {lang}`
// replies "翻译结果: <text>" from a small offline zh/en/ja dictionary (longest match,
// unknown words kept as they are, deterministic); lang defaults to en and may also be a
// name (英语, japanese, 日本語 …). No text → a usage reply; an unsupported lang is the
// handler's error "UnsupportedLanguageError: unsupported target language fr; …".
//
// Go has no LinkZone class style (`metadata` + `handleEvent`) and, being compiled, no
// `@ai-trigger-*` header comments to read at run time, so the seed's metadata is the
// Go value [metadata] and Start registers it with the SDK's LinkZone additions:
// sdk.RegisterTrigger for `triggers` (handler = handleEvent) and sdk.SetInject for
// `ai.inject`.
package main

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/hearth-dev/hearth/sdk-go/hearth"
	"github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
)

// metadata is the seed's TranslatePlugin.metadata: name, triggers and ai.inject (the
// lang description lists zh, as the Python and Node twins do).
var metadata = struct {
	Name     string
	Triggers []sdk.Trigger
	Inject   sdk.AIInject
}{
	Name:     "translate",
	Triggers: []sdk.Trigger{{Type: sdk.TriggerCommand, Pattern: "/translate"}},
	Inject: sdk.AIInject{
		Usage:  "翻译文本到指定语言",
		Format: "/translate {text} {lang}",
		Args: map[string]string{
			"text": "要翻译的文本",
			"lang": "目标语言（如 en、ja、zh）",
		},
	},
}

// TranslatePlugin is the seed's TranslatePlugin.
type TranslatePlugin struct{}

// Name is metadata.name.
func (p *TranslatePlugin) Name() string { return metadata.Name }

// Start declares metadata: the inject spec and each trigger with handleEvent.
func (p *TranslatePlugin) Start(s *sdk.PluginSDK) error {
	s.SetInject(metadata.Inject)
	for _, t := range metadata.Triggers {
		if err := s.RegisterTrigger(t, p.handleEvent); err != nil {
			return err
		}
	}
	return nil
}

// Stop has nothing to release.
func (p *TranslatePlugin) Stop() error { return nil }

// handleEvent is the seed's handleEvent(sender). Sender.Param is "" for a missing
// param, so `sender.param(1) || 'en'` keeps its meaning.
func (p *TranslatePlugin) handleEvent(sender *sdk.Sender) error {
	text := sender.Param(0)
	targetLang := sender.Param(1)
	if targetLang == "" {
		targetLang = "en"
	}
	if text == "" {
		return sender.Reply("用法: /translate {text} {lang}")
	}
	result, err := translate(text, targetLang)
	if err != nil {
		return err
	}
	return sender.Reply("翻译结果: " + result)
}

func main() {
	hearth.Serve(&TranslatePlugin{})
}

// ------------------------------------------------------------------ offline dictionary

// UnsupportedLanguageError: the target language is not zh, en or ja. Its text starts
// with the type's name, as the Python and Node SDKs write an exception
// ("UnsupportedLanguageError: …"), so the event error reads the same in all three.
type UnsupportedLanguageError struct{ Lang string }

func (e *UnsupportedLanguageError) Error() string {
	return fmt.Sprintf("UnsupportedLanguageError: unsupported target language %s; supported: zh, en, ja", e.Lang)
}

// words has one row per meaning: {zh, en, ja}. English spellings of one meaning are
// separated by "|"; the first is the one produced. English entries may be phrases of up
// to 3 words.
var words = [][3]string{
	{"你好", "hello|hi", "こんにちは"},
	{"世界", "world", "世界"},
	{"谢谢", "thank you|thanks", "ありがとう"},
	{"早上好", "good morning", "おはよう"},
	{"再见", "goodbye|bye", "さようなら"},
	{"我", "I|me", "私"},
	{"你", "you", "あなた"},
	{"爱", "love", "愛"},
	{"猫", "cat", "猫"},
	{"狗", "dog", "犬"},
	{"天气", "weather", "天気"},
	{"今天", "today", "今日"},
	{"水", "water", "水"},
	{"朋友", "friend", "友達"},
	{"苹果", "apple", "りんご"},
	{"好", "good", "良い"},
}

var column = map[string]int{"zh": 0, "en": 1, "ja": 2}

var langs = map[string]string{
	"zh": "zh", "zh-cn": "zh", "cn": "zh", "chinese": "zh", "中文": "zh", "汉语": "zh",
	"en": "en", "en-us": "en", "english": "en", "英语": "en", "英文": "en",
	"ja": "ja", "jp": "ja", "japanese": "ja", "日语": "ja", "日文": "ja", "日本語": "ja",
}

const maxWords = 3

const cjkPunct = "，。！？、：；（）「」『』“”‘’《》…—～"

// entry is what a surface form means: the row of words and the form's language.
type entry struct {
	meaning int
	lang    string
}

// lexicon maps a surface form to its entry (first row wins); English forms lower-case.
// longest is the longest Chinese/Japanese form, in characters.
var lexicon, longest = func() (map[string]entry, int) {
	lex := map[string]entry{}
	add := func(form string, e entry) {
		if _, ok := lex[form]; !ok {
			lex[form] = e
		}
	}
	for meaning, w := range words {
		add(w[0], entry{meaning, "zh"})
		add(w[2], entry{meaning, "ja"})
		for _, form := range strings.Split(w[1], "|") {
			add(strings.ToLower(form), entry{meaning, "en"})
		}
	}
	n := 0
	for form, e := range lex {
		if l := len([]rune(form)); e.lang != "en" && l > n {
			n = l
		}
	}
	return lex, n
}()

func latin(r rune) bool { return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' }

// isSep: whitespace, ASCII other than letters and digits, or CJK punctuation.
func isSep(r rune) bool {
	if unicode.IsSpace(r) {
		return true
	}
	if r < 0x80 {
		return !(latin(r) || '0' <= r && r <= '9')
	}
	return strings.ContainsRune(cjkPunct, r)
}

// segment is a piece of the text: kind "word" (in the dictionary; meaning and lang
// set), "raw" (unknown, kept as is) or "sep" (one space or punctuation character).
type segment struct {
	kind    string
	meaning int
	src     []rune
	lang    string
}

// segments splits text, longest match first: English phrases of whole words,
// Chinese/Japanese by characters. Unknown non-Latin characters in a row form one raw
// segment; an unknown Latin word is a raw segment of its own.
func segments(text []rune) []segment {
	var out []segment
	n := len(text)
	for i := 0; i < n; {
		ch := text[i]
		switch {
		case latin(ch):
			var ends []int // ends of 1, 2, 3 words separated by single spaces
			j := i
			for {
				for j < n && latin(text[j]) {
					j++
				}
				ends = append(ends, j)
				if len(ends) == maxWords || j+1 >= n || text[j] != ' ' || !latin(text[j+1]) {
					break
				}
				j++
			}
			matched := false
			for k := len(ends) - 1; k >= 0; k-- {
				end := ends[k]
				if e, ok := lexicon[strings.ToLower(string(text[i:end]))]; ok && e.lang == "en" {
					out = append(out, segment{"word", e.meaning, text[i:end], "en"})
					i, matched = end, true
					break
				}
			}
			if !matched {
				out = append(out, segment{kind: "raw", src: text[i:ends[0]]})
				i = ends[0]
			}
		case isSep(ch):
			out = append(out, segment{kind: "sep", src: text[i : i+1]})
			i++
		default:
			matched := false
			for m := min(longest, n-i); m > 0; m-- {
				if e, ok := lexicon[string(text[i:i+m])]; ok && e.lang != "en" {
					out = append(out, segment{"word", e.meaning, text[i : i+m], e.lang})
					i, matched = i+m, true
					break
				}
			}
			if !matched {
				if k := len(out) - 1; k >= 0 && out[k].kind == "raw" && !latin(out[k].src[len(out[k].src)-1]) {
					out[k].src = append(out[k].src[:len(out[k].src):len(out[k].src)], ch)
				} else {
					out = append(out, segment{kind: "raw", src: text[i : i+1]})
				}
				i++
			}
		}
	}
	return out
}

// targetLanguage is zh, en or ja for a code or name (case-insensitive, trimmed);
// *UnsupportedLanguageError else.
func targetLanguage(lang string) (string, error) {
	code, ok := langs[strings.ToLower(strings.TrimSpace(lang))]
	if !ok {
		return "", &UnsupportedLanguageError{Lang: lang}
	}
	return code, nil
}

// translate is a word-by-word dictionary translation of text into lang. Words already
// in the target language and unknown words stay as written. Into English, adjacent
// words get a space between them; into Chinese or Japanese, a space between two words
// is dropped.
func translate(text, lang string) (string, error) {
	target, err := targetLanguage(lang)
	if err != nil {
		return "", err
	}
	segs := segments([]rune(text))
	var b strings.Builder
	for k, s := range segs {
		prev := "sep"
		if k > 0 {
			prev = segs[k-1].kind
		}
		switch s.kind {
		case "word":
			word := string(s.src)
			if s.lang != target {
				word = strings.SplitN(words[s.meaning][column[target]], "|", 2)[0]
			}
			if target == "en" && prev != "sep" {
				b.WriteByte(' ')
			}
			b.WriteString(word)
		case "raw":
			if target == "en" && prev == "word" {
				b.WriteByte(' ')
			}
			b.WriteString(string(s.src))
		default:
			betweenWords := k > 0 && k < len(segs)-1 && segs[k-1].kind == "word" && segs[k+1].kind == "word"
			if !(target != "en" && unicode.IsSpace(s.src[0]) && betweenWords) {
				b.WriteString(string(s.src))
			}
		}
	}
	return b.String(), nil
}
