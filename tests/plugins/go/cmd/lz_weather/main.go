// Command lz_weather is the LinkZone hybrid WeatherPlugin (seed
// linkzone-ai-tool-plugins.md, 混合模式 — ai.tool and ai.inject in one plugin), the Go
// twin of tests/plugins/lz_weather.py and of the Node example
// examples/plugins/weather/index.js: fetchWeather/formatWeather on the same
// deterministic offline data, so all three give the same output for the same city,
// days and date (main_test.go compares with the Node example).
//
// Plugin `weather`: tool `weather` (ai.tool city, days) whose content is the forecast
// as compact JSON (byte for byte what the Node one sends: JSON.stringify's key order
// and layout), inject `/weather {city}` and trigger type 0 `/weather`, whose reply is
// the forecast as Chinese text. Today is the UTC date, or WEATHER_TODAY=YYYY-MM-DD (read
// at each call). Errors — unknown city, missing city, days not 1..7, a bad
// WEATHER_TODAY — are the handler's error, with the Node plugin's error names and
// messages (UnknownCityError, TypeError, RangeError) at the start of the text, as the
// Python and Node SDKs write exceptions.
//
// Go has no LinkZone class style, so the seed's metadata is the Go value [metadata] and
// Start registers it with the SDK's LinkZone additions: sdk.SetInject (ai.inject),
// sdk.RegisterTrigger (triggers → handleEvent) and sdk.RegisterAITool (ai.tool →
// executeTool; the tool is named after the plugin, as LinkZone's direct-mode tool is).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hearth-dev/hearth/sdk-go/hearth"
	"github.com/hearth-dev/hearth/sdk-go/homeagent/sdk"
)

// metadata is the seed's WeatherPlugin.metadata (混合模式).
var metadata = struct {
	Name     string
	Triggers []sdk.Trigger
	Inject   sdk.AIInject
	Tool     sdk.AITool
}{
	Name:     "weather",
	Triggers: []sdk.Trigger{{Type: sdk.TriggerCommand, Pattern: "/weather"}},
	Inject: sdk.AIInject{
		Usage:  "查询天气信息",
		Format: "/weather {city}",
		Args:   map[string]string{"city": "城市名称"},
	},
	Tool: sdk.AITool{
		Parameters: []sdk.AIToolParameter{
			{Name: "city", Type: "string", Description: "城市名称", Required: true},
			{Name: "days", Type: "number", Description: "预报天数", Required: false, Default: 1},
		},
		Usage:     "查询指定城市的天气信息",
		WhenToUse: "当用户询问天气、气温、是否下雨等问题时",
	},
}

// WeatherPlugin is the seed's WeatherPlugin.
type WeatherPlugin struct{}

// Name is metadata.name.
func (p *WeatherPlugin) Name() string { return metadata.Name }

// Start declares metadata: inject spec, triggers with handleEvent, the ai.tool with
// executeTool.
func (p *WeatherPlugin) Start(s *sdk.PluginSDK) error {
	s.SetInject(metadata.Inject)
	for _, t := range metadata.Triggers {
		if err := s.RegisterTrigger(t, p.handleEvent); err != nil {
			return err
		}
	}
	return s.RegisterAITool(metadata.Name, metadata.Tool, p.executeTool)
}

// Stop has nothing to release.
func (p *WeatherPlugin) Stop() error { return nil }

// handleEvent — 注入调用：用户直接使用 /weather 命令.
func (p *WeatherPlugin) handleEvent(sender *sdk.Sender) error {
	city := sender.Param(0)
	data, err := p.fetchWeather(city, nil)
	if err != nil {
		return err
	}
	return sender.Reply(p.formatWeather(data))
}

// executeTool — 直接调用：AI 调用获取结构化数据. args["days"] absent or null is 1 day.
func (p *WeatherPlugin) executeTool(args map[string]interface{}) (interface{}, error) {
	city := args["city"]
	data, err := p.fetchWeather(city, args["days"])
	if err != nil {
		return nil, err
	}
	content, err := jsonText(data)
	if err != nil {
		return nil, err
	}
	return map[string]interface{}{"success": true, "content": content}, nil
}

// fetchWeather is the forecast for days days (1..7, nil = 1) starting today (UTC date,
// or WEATHER_TODAY=YYYY-MM-DD): a seasonal curve per city plus noise seeded by (city,
// date). An *UnknownCityError for a city not in the table.
func (p *WeatherPlugin) fetchWeather(city, days interface{}) (*Forecast, error) {
	start, err := today()
	if err != nil {
		return nil, err
	}
	return forecast(city, days, start)
}

// formatWeather is one line per day, in Chinese, as the /weather command replies.
func (p *WeatherPlugin) formatWeather(data *Forecast) string {
	lines := make([]string, len(data.Forecast))
	for i, d := range data.Forecast {
		lines[i] = fmt.Sprintf("%s %s %d~%d%s 湿度%d%% %s 降水概率%d%%",
			d.Date, d.Condition, d.Low, d.High, data.Unit, d.Humidity, d.Wind, d.PrecipitationChance)
	}
	return fmt.Sprintf("%s（%s）天气：\n%s\n（离线示例数据）", data.City, data.CityEn, strings.Join(lines, "\n"))
}

func main() {
	hearth.Serve(&WeatherPlugin{})
}

// ------------------------------------------------------------------ offline data
// Everything below mirrors index.js (through lz_weather.py) step by step: the same
// random draws in the same order, JavaScript's rounding and 32-bit integer arithmetic,
// products rounded before they are added (float64(…) conversions keep the compiler from
// fusing them into FMA instructions), so the numbers agree exactly. Years 0000-0099 are
// the one exception, as in the Python twin: JavaScript's Date.UTC reads them as
// 1900-1999 for the day of the year.

// Forecast is fetchWeather's value; fields in index.js's order, for the same JSON.
type Forecast struct {
	City     string `json:"city"`
	CityEn   string `json:"city_en"`
	Country  string `json:"country"`
	Unit     string `json:"unit"`
	Source   string `json:"source"`
	Forecast []Day  `json:"forecast"`
}

// Day is one day of a Forecast.
type Day struct {
	Date                string `json:"date"`
	Condition           string `json:"condition"`
	ConditionEn         string `json:"condition_en"`
	High                int    `json:"high"`
	Low                 int    `json:"low"`
	Humidity            int    `json:"humidity"`
	Wind                string `json:"wind"`
	PrecipitationChance int    `json:"precipitation_chance"`
}

// UnknownCityError: the city is not in the offline table.
type UnknownCityError struct{ City string }

func (e *UnknownCityError) Error() string {
	known := make([]string, len(cities))
	for i, c := range cities {
		known[i] = fmt.Sprintf("%s (%s)", c.name, c.en)
	}
	return fmt.Sprintf("UnknownCityError: unknown city \"%s\"; known cities: %s", e.City, strings.Join(known, ", "))
}

// namedError is an error whose text starts with a JavaScript error name (TypeError,
// RangeError), as the twins' errors read.
type namedError struct{ name, msg string }

func (e *namedError) Error() string { return e.name + ": " + e.msg }

func typeError(msg string) error { return &namedError{"TypeError", msg} }
func rangeError(format string, a ...any) error {
	return &namedError{"RangeError", fmt.Sprintf(format, a...)}
}

// city holds climate normals: mean daily high in January and July (°C; southern cities
// simply have a warmer January), diurnal range, humidity, and how wet the city is (0..1).
type city struct {
	name, en, country    string
	jan, jul, rng, humid int
	wet                  float64
}

var cities = []city{
	{"北京", "Beijing", "CN", 2, 31, 10, 45, 0.25},
	{"上海", "Shanghai", "CN", 8, 32, 7, 72, 0.45},
	{"广州", "Guangzhou", "CN", 18, 33, 7, 78, 0.55},
	{"深圳", "Shenzhen", "CN", 19, 32, 6, 77, 0.5},
	{"杭州", "Hangzhou", "CN", 8, 34, 8, 74, 0.5},
	{"成都", "Chengdu", "CN", 10, 30, 6, 80, 0.5},
	{"哈尔滨", "Harbin", "CN", -13, 28, 11, 60, 0.25},
	{"伦敦", "London", "GB", 8, 24, 7, 78, 0.55},
	{"纽约", "New York", "US", 4, 29, 8, 62, 0.35},
	{"东京", "Tokyo", "JP", 10, 31, 7, 65, 0.4},
	{"巴黎", "Paris", "FR", 7, 26, 8, 72, 0.45},
	{"悉尼", "Sydney", "AU", 26, 17, 8, 65, 0.35},
}

var conditions = map[string][2]string{
	"clear":     {"晴", "Sunny"},
	"cloudy":    {"多云", "Partly cloudy"},
	"overcast":  {"阴", "Overcast"},
	"lightRain": {"小雨", "Light rain"},
	"rain":      {"中雨", "Moderate rain"},
	"storm":     {"雷阵雨", "Thunderstorm"},
	"snow":      {"小雪", "Light snow"},
}

var winds = []string{"北风", "东北风", "东风", "东南风", "南风", "西南风", "西风", "西北风"}

// findCity: Chinese or English name, trimmed, a trailing 市 dropped, case-insensitive.
func findCity(v interface{}) (*city, error) {
	name, ok := v.(string)
	if !ok || strings.TrimSpace(name) == "" {
		return nil, typeError("city is required, e.g. 北京 or London")
	}
	name = strings.TrimSpace(name)
	key := strings.ToLower(strings.TrimSuffix(name, "市"))
	for i := range cities {
		if cities[i].name == key || strings.ToLower(cities[i].en) == key {
			return &cities[i], nil
		}
	}
	return nil, &UnknownCityError{City: name}
}

// fnv1a is FNV-1a over UTF-8: a stable 32-bit hash.
func fnv1a(text string) uint32 {
	h := uint32(0x811C9DC5)
	for i := 0; i < len(text); i++ {
		h = (h ^ uint32(text[i])) * 0x01000193
	}
	return h
}

// newRand is a deterministic source of numbers in [0, 1) (xorshift32, as index.js).
func newRand(seed uint32) func() float64 {
	s := seed
	if s == 0 {
		s = 1
	}
	return func() float64 {
		s ^= s << 13
		s ^= s >> 17
		s ^= s << 5
		return float64(s) / 0x100000000
	}
}

// jsRound is JavaScript's Math.round: halves go up.
func jsRound(x float64) int {
	r := math.Floor(x)
	if x-r >= 0.5 {
		r++
	}
	return int(r)
}

// floorDiv is a / b rounded toward minus infinity (b > 0).
func floorDiv(a, b int) int {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// daysFromCivil is the days since 1970-01-01 of a proleptic Gregorian date; days past
// the month's end roll over into the next month (as JavaScript's Date.parse does for
// 2024-02-30).
func daysFromCivil(y, m, d int) int {
	y -= b2i(m <= 2)
	era := floorDiv(y, 400)
	yoe := y - era*400
	mp := m + 9
	if m > 2 {
		mp = m - 3
	}
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civilFromDays is the (year, month, day) of a day number (inverse of daysFromCivil).
func civilFromDays(z int) (int, int, int) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if mp >= 10 {
		m = mp - 9
	}
	return yoe + era*400 + b2i(m <= 2), m, d
}

var dateRe = regexp.MustCompile(`^([0-9]{4})-([0-9]{2})-([0-9]{2})$`)

// today is today as a day number: WEATHER_TODAY when set, else the UTC date.
func today() (int, error) {
	if env := os.Getenv("WEATHER_TODAY"); env != "" {
		m := dateRe.FindStringSubmatch(env)
		if m == nil {
			return 0, rangeError("WEATHER_TODAY must be YYYY-MM-DD, got %s", env)
		}
		y, _ := strconv.Atoi(m[1])
		mo, _ := strconv.Atoi(m[2])
		d, _ := strconv.Atoi(m[3])
		// Date.parse accepts months 01..12 and days 01..31 (rolling over), nothing else.
		if mo < 1 || mo > 12 || d < 1 || d > 31 {
			return 0, rangeError("WEATHER_TODAY must be YYYY-MM-DD, got %s", env)
		}
		return daysFromCivil(y, mo, d), nil
	}
	now := time.Now().UTC()
	return daysFromCivil(now.Year(), int(now.Month()), now.Day()), nil
}

var intRe = regexp.MustCompile(`^[+-]?[0-9]+$`)

// jsNumber is JavaScript's Number(v) for the values JSON arguments hold (as the Python
// twin's js_number: arrays and objects are NaN).
func jsNumber(v interface{}) float64 {
	switch x := v.(type) {
	case bool:
		return float64(b2i(x))
	case float64:
		return x
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return math.NaN()
		}
		return f
	case string:
		t := strings.TrimSpace(x)
		if t == "" {
			return 0
		}
		if intRe.MatchString(t) {
			f, _ := strconv.ParseFloat(t, 64)
			return f
		}
		// Go reads hex floats and Python digit separators; Number() reads neither.
		if strings.ContainsAny(t, "xX_pP") {
			return math.NaN()
		}
		f, err := strconv.ParseFloat(t, 64)
		if err != nil && !isRangeErr(err) {
			return math.NaN()
		}
		return f
	case nil:
		return 0
	}
	return math.NaN()
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// jsonText is JSON.stringify(v): compact, `<>&` and non-ASCII as they are.
func jsonText(v interface{}) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// forecast is the Forecast of days days (nil = 1) of a city starting at day number
// start.
func forecast(cityArg, days interface{}, start int) (*Forecast, error) {
	c, err := findCity(cityArg)
	if err != nil {
		return nil, err
	}
	n := 1.0
	if days != nil {
		n = jsNumber(days)
	}
	if math.IsNaN(n) || n != math.Trunc(n) || n < 1 || n > 7 {
		shown, err := jsonText(days)
		if err != nil {
			shown = fmt.Sprint(days)
		}
		return nil, rangeError("days must be an integer from 1 to 7, got %s", shown)
	}
	out := make([]Day, 0, int(n))
	for i := 0; i < int(n); i++ {
		day := start + i
		y, mo, d := civilFromDays(day)
		date := fmt.Sprintf("%04d-%02d-%02d", y, mo, d)
		rand := newRand(fnv1a(c.en + "|" + date))
		doy := day - daysFromCivil(y, 1, 1)
		// 0 in mid-January, 1 in mid-July (northern hemisphere).
		season := (1 - math.Cos(float64(2*math.Pi*float64(doy-15))/365)) / 2
		high := jsRound(float64(c.jan) + float64(float64(c.jul-c.jan)*season) + (float64(rand()*6) - 3))
		low := high - jsRound(float64(c.rng)*(0.7+float64(rand()*0.6)))
		wetness := rand()
		var kind string
		switch {
		case wetness < float64(c.wet*0.5):
			switch {
			case high <= 2:
				kind = "snow"
			case season > 0.6 && rand() < 0.5:
				kind = "storm"
			default:
				kind = "rain"
			}
		case wetness < c.wet:
			if high <= 2 {
				kind = "snow"
			} else {
				kind = "lightRain"
			}
		default:
			kind = []string{"clear", "clear", "cloudy", "overcast"}[int(math.Floor(rand()*4))]
		}
		wet := kind != "clear" && kind != "cloudy" && kind != "overcast"
		humidity := float64(c.humid)
		if wet {
			humidity += 15
		}
		humid := min(98, jsRound(humidity+(float64(rand()*10)-5)))
		wind := winds[int(math.Floor(rand()*float64(len(winds))))]
		force := 1 + int(math.Floor(rand()*4))
		var precip int
		if wet {
			precip = 60 + int(math.Floor(rand()*40))
		} else {
			precip = int(math.Floor(rand() * 30))
		}
		out = append(out, Day{
			Date:                date,
			Condition:           conditions[kind][0],
			ConditionEn:         conditions[kind][1],
			High:                high,
			Low:                 low,
			Humidity:            humid,
			Wind:                fmt.Sprintf("%s%d级", wind, force),
			PrecipitationChance: precip,
		})
	}
	return &Forecast{
		City:     c.name,
		CityEn:   c.en,
		Country:  c.country,
		Unit:     "°C",
		Source:   "offline sample data (deterministic per city and date; not a live forecast)",
		Forecast: out,
	}, nil
}
