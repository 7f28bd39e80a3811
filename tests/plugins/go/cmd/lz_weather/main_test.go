package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hearth-dev/hearth/sdk-go/hearthtest"
	"github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
)

var trigger = sdk.Trigger{Type: sdk.TriggerCommand, Pattern: "/weather"}

// The Go SDK reports an event handler's error as "event handler of trigger <trigger>:
// <error>", where the Python and Node SDKs send "<ExceptionName>: <message>" alone.
const eventErrorPrefix = "event handler of trigger command /weather: "

func start(t *testing.T) *hearthtest.Broker {
	return hearthtest.StartWith(t, &WeatherPlugin{}, hearthtest.Options{Name: "weather", Quiet: true})
}

func TestRegistersTheSeedMetadata(t *testing.T) {
	b := start(t)
	reg := b.Registration()
	if reg.GetPlugin().GetName() != "weather" || len(reg.GetTools()) != 1 {
		t.Fatalf("plugin %q, tools %v", reg.GetPlugin().GetName(), reg.GetTools())
	}
	tool := reg.GetTools()[0]
	if tool.GetName() != "weather" || tool.GetParametersJson() != "" {
		t.Fatalf("tool %v", tool)
	}
	ai := tool.GetAiTool()
	var params [][4]any
	for _, p := range ai.GetParameters() {
		params = append(params, [4]any{p.GetName(), p.GetType(), p.GetRequired(), p.GetDefaultJson()})
	}
	want := [][4]any{{"city", "string", true, ""}, {"days", "number", false, "1"}}
	if !reflect.DeepEqual(params, want) {
		t.Fatalf("parameters %v, want %v", params, want)
	}
	if ai.GetUsage() != "查询指定城市的天气信息" || ai.GetWhenToUse() != "当用户询问天气、气温、是否下雨等问题时" {
		t.Fatalf("ai.tool %v", ai)
	}
	inj := reg.GetInject()
	if inj.GetUsage() != "查询天气信息" || inj.GetFormat() != "/weather {city}" ||
		!reflect.DeepEqual(inj.GetArgs(), map[string]string{"city": "城市名称"}) {
		t.Fatalf("inject %v", inj)
	}
	if tr := reg.GetTriggers(); len(tr) != 1 || tr[0].GetType() != 0 || tr[0].GetPattern() != "/weather" {
		t.Fatalf("triggers %v", tr)
	}
	if rejected := b.Answer().GetRegistered().GetRejected(); len(rejected) != 0 {
		t.Fatalf("rejected: %v", rejected)
	}
}

// TestGolden pins one reply and one tool answer (what the Node example and the Python
// twin answer for 2026-07-01, the date tests/integration/inject.rs uses), so the port is
// checked even where Node is missing.
func TestGolden(t *testing.T) {
	t.Setenv("WEATHER_TODAY", "2026-07-01")
	b := start(t)
	got, err := b.Event(trigger, "/weather 北京", "北京")
	if err != nil {
		t.Fatal(err)
	}
	reply := "北京（Beijing）天气：\n2026-07-01 多云 21~33°C 湿度43% 南风2级 降水概率17%\n（离线示例数据）"
	if got.Error != "" || len(got.Replies) != 1 || got.Replies[0] != reply {
		t.Fatalf("got %q, %q", got.Replies, got.Error)
	}
	r, err := b.Call("weather", map[string]any{"city": "Paris", "days": 2})
	if err != nil {
		t.Fatal(err)
	}
	content := `{"city":"巴黎","city_en":"Paris","country":"FR","unit":"°C","source":"offline sample data (deterministic per city and date; not a live forecast)","forecast":[` +
		`{"date":"2026-07-01","condition":"阴","condition_en":"Overcast","high":23,"low":17,"humidity":69,"wind":"西风3级","precipitation_chance":12},` +
		`{"date":"2026-07-02","condition":"阴","condition_en":"Overcast","high":23,"low":16,"humidity":70,"wind":"东北风4级","precipitation_chance":22}]}`
	if !r.Success || r.Content != content {
		t.Fatalf("got %+v\nwant %s", r, content)
	}
}

// repo is the repository's root (this package is tests/plugins/go/cmd/lz_weather).
func repo(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../../../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// node runs script with node and the npm workspace (require('hearth-plugin')), job on
// stdin, and decodes its stdout into out; the test is skipped without them.
func node(t *testing.T, script string, job, out any, env ...string) {
	t.Helper()
	bin, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH")
	}
	if _, err := os.Stat(filepath.Join(repo(t), "node_modules", "hearth-plugin")); err != nil {
		t.Skip("the npm workspace is not installed (npm ci)")
	}
	input, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-e", script, filepath.Join(repo(t), "examples/plugins/weather/index.js"))
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(string(input))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("node's output: %v", err)
	}
}

// weatherCalls are sdk-python/tests/test_inject.py's WEATHER_CALLS: [city, days]; a nil
// days is a call without it.
var weatherCalls = [][2]any{{"北京", 1}, {"上海市", 3}, {"Harbin", 7}, {"悉尼", 2}, {"london", nil},
	{"火星", 1}, {"", 1}, {"东京", 8}, {"纽约", 2.5}, {"成都", "2"}, {"广州", true},
	{"  杭州市 ", 0}}

// TestAnswersLikeTheNodeExample makes the tool call and the /weather event of every
// weatherCalls entry on three dates (one rolled over, 2024-02-30 = 2024-03-01) and
// compares with what examples/plugins/weather/index.js answers, as
// sdk-python/tests/test_inject.py does for the Python twin.
func TestAnswersLikeTheNodeExample(t *testing.T) {
	const script = `
const W = require(process.argv[1]);
const w = new W();
let input = '';
process.stdin.on('data', (d) => { input += d; });
process.stdin.on('end', async () => {
  const out = [];
  for (const [city, days] of JSON.parse(input)) {
    let data, text;
    try { data = JSON.stringify(await w.fetchWeather(city, days)); } catch (e) { data = e.name + ': ' + e.message; }
    try { text = w.formatWeather(await w.fetchWeather(city)); } catch (e) { text = e.name + ': ' + e.message; }
    out.push([data, text]);
  }
  process.stdout.write(JSON.stringify(out));
});`
	for _, today := range []string{"2024-01-15", "2025-07-20", "2024-02-30"} {
		t.Run(today, func(t *testing.T) {
			var expected [][2]string
			node(t, script, weatherCalls, &expected, "WEATHER_TODAY="+today)
			t.Setenv("WEATHER_TODAY", today)
			b := start(t)
			for i, call := range weatherCalls {
				city, days := call[0], call[1]
				args := map[string]any{"city": city}
				if days != nil {
					args["days"] = days
				}
				data, text := expected[i][0], expected[i][1]
				r, err := b.Call("weather", args)
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(data, "{") {
					if !r.Success || r.Content != data {
						t.Errorf("%v: %+v\nNode: %s", call, r, data)
					}
				} else if r.Success || r.Error != data {
					t.Errorf("%v: %+v\nNode: %s", call, r, data)
				}
				var params []string
				if s := city.(string); s != "" {
					params = []string{s}
				}
				ev, err := b.Event(trigger, strings.TrimSpace("/weather "+city.(string)), params...)
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasSuffix(text, "（离线示例数据）") {
					if ev.Error != "" || len(ev.Replies) != 1 || ev.Replies[0] != text {
						t.Errorf("%v: %q, %q\nNode: %s", call, ev.Replies, ev.Error, text)
					}
				} else if len(ev.Replies) != 0 || (ev.Error != text && ev.Error != eventErrorPrefix+text) {
					t.Errorf("%v: %q, %q\nNode: %s", call, ev.Replies, ev.Error, text)
				}
			}
		})
	}
}

// TestForecastSweep compares 7-day forecasts of every city from every 5th day of
// 2023-2026 (every day of those years, from several start days) with the Node example's.
func TestForecastSweep(t *testing.T) {
	const script = `
const W = require(process.argv[1]);
const w = new W();
let input = '';
process.stdin.on('data', (d) => { input += d; });
process.stdin.on('end', async () => {
  const job = JSON.parse(input);
  const out = [];
  for (const date of job.dates) {
    process.env.WEATHER_TODAY = date;
    for (const city of job.cities) out.push(JSON.stringify(await w.fetchWeather(city, 7)));
  }
  process.stdout.write(JSON.stringify(out));
});`
	var dates []string
	first := daysFromCivil(2023, 1, 1)
	for day := first; day < daysFromCivil(2027, 1, 1); day += 5 {
		y, m, d := civilFromDays(day)
		dates = append(dates, fmt.Sprintf("%04d-%02d-%02d", y, m, d))
	}
	var names []string
	for _, c := range cities {
		names = append(names, c.en)
	}
	var want []string
	node(t, script, map[string]any{"dates": dates, "cities": names}, &want)
	if len(want) != len(dates)*len(names) {
		t.Fatalf("node answered %d forecasts, want %d", len(want), len(dates)*len(names))
	}
	k := 0
	for i, date := range dates {
		for _, name := range names {
			f, err := forecast(name, float64(7), first+5*i)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := jsonText(f)
			if got != want[k] {
				t.Fatalf("%s from %s:\n Go:   %s\n Node: %s", name, date, got, want[k])
			}
			k++
		}
	}
}

func TestDates(t *testing.T) {
	for _, c := range []struct{ y, m, d, days int }{
		{1970, 1, 1, 0}, {2000, 3, 1, 11017}, {1969, 12, 31, -1}, {2024, 2, 29, 19782}, {0, 1, 1, -719528},
	} {
		if got := daysFromCivil(c.y, c.m, c.d); got != c.days {
			t.Errorf("daysFromCivil(%d, %d, %d) = %d, want %d", c.y, c.m, c.d, got, c.days)
		}
		if y, m, d := civilFromDays(c.days); y != c.y || m != c.m || d != c.d {
			t.Errorf("civilFromDays(%d) = %d-%d-%d", c.days, y, m, d)
		}
	}
	if daysFromCivil(2024, 2, 30) != daysFromCivil(2024, 3, 1) {
		t.Error("2024-02-30 does not roll over")
	}
	for _, bad := range []string{"2024-13-01", "2024-1-01", "yesterday", "2024-00-10", "2024-01-32"} {
		t.Setenv("WEATHER_TODAY", bad)
		if _, err := today(); err == nil || err.Error() != "RangeError: WEATHER_TODAY must be YYYY-MM-DD, got "+bad {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
