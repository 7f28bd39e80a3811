"""LinkZone hybrid WeatherPlugin (seed linkzone-ai-tool-plugins.md, 混合模式, Python), the
twin of the Node example examples/plugins/weather/index.js: ported by changing only the
import, with fetch_weather/format_weather written for real on the same deterministic
offline data, so both give the same output for the same city, days and date.

Plugin `weather`: tool `weather` (ai.tool city, days) whose content is the forecast as
compact JSON (byte for byte what the Node one sends), inject `/weather {city}` and trigger
type 0 `/weather`, whose reply is the forecast as Chinese text. Today is the UTC date, or
WEATHER_TODAY=YYYY-MM-DD (read at each call). Errors — unknown city, missing city, days
not 1..7, a bad WEATHER_TODAY — raise, with the Node plugin's error names and messages
(UnknownCityError, TypeError, RangeError).
"""
import json
import math
import os
import re
import time

from hearth_plugin import Plugin

metadata = {
    "name": "weather",
    "triggers": [{"type": 0, "pattern": "/weather"}],
    "ai": {
        "inject": {
            "usage": "查询天气信息",
            "format": "/weather {city}",
            "args": {"city": "城市名称"}
        },
        "tool": {
            "parameters": [
                {"name": "city", "type": "string", "description": "城市名称", "required": True},
                {"name": "days", "type": "number", "description": "预报天数", "required": False, "default": 1}
            ],
            "usage": "查询指定城市的天气信息",
            "when_to_use": "当用户询问天气、气温、是否下雨等问题时"
        }
    }
}


class WeatherPlugin(Plugin):
    # 注入调用：用户直接使用 /weather 命令
    def handle_event(self, sender):
        city = sender.param(0)
        data = self.fetch_weather(city)
        sender.reply(self.format_weather(data))

    # 直接调用：AI 调用获取结构化数据
    def execute_tool(self, sender, args):
        city = args.get("city")
        days = args.get("days", 1)
        data = self.fetch_weather(city, days)
        return {
            "success": True,
            # JSON.stringify's layout, so the content equals the Node plugin's.
            "content": json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        }

    def fetch_weather(self, city, days=1):
        """Forecast for `days` days (1..7, default 1) starting today (UTC date, or
        WEATHER_TODAY=YYYY-MM-DD): a seasonal curve per city plus noise seeded by
        (city, date). Raises UnknownCityError for a city not in the table."""
        return forecast(city, days, today())

    def format_weather(self, data):
        """One line per day, in Chinese, as the /weather command replies."""
        lines = [f"{d['date']} {d['condition']} {d['low']}~{d['high']}{data['unit']} "
                 f"湿度{d['humidity']}% {d['wind']} 降水概率{d['precipitation_chance']}%"
                 for d in data["forecast"]]
        return f"{data['city']}（{data['city_en']}）天气：\n" + "\n".join(lines) + "\n（离线示例数据）"


# ------------------------------------------------------------------ offline data
# Everything below mirrors index.js step by step (same random draws in the same order,
# JavaScript's rounding and 32-bit integer arithmetic), so the numbers agree exactly
# (compared for every city over three years of dates while writing this;
# sdk-python/tests/test_inject.py compares a sample). Years 0000-0099 are the one
# exception: JavaScript's Date.UTC reads them as 1900-1999 for the day of the year.

class UnknownCityError(Exception):
    """The city is not in the offline table."""

    def __init__(self, city):
        known = ", ".join(f"{c['name']} ({c['en']})" for c in CITIES)
        super().__init__(f'unknown city "{city}"; known cities: {known}')


class RangeError(ValueError):
    """A value out of range (JavaScript's RangeError, same name in error texts)."""


# Climate normals: mean daily high in January and July (°C; southern cities simply have
# a warmer January), diurnal range, humidity, and how wet the city is (0..1).
CITIES = [
    {"name": "北京", "en": "Beijing", "country": "CN", "jan": 2, "jul": 31, "range": 10, "humidity": 45, "wet": 0.25},
    {"name": "上海", "en": "Shanghai", "country": "CN", "jan": 8, "jul": 32, "range": 7, "humidity": 72, "wet": 0.45},
    {"name": "广州", "en": "Guangzhou", "country": "CN", "jan": 18, "jul": 33, "range": 7, "humidity": 78, "wet": 0.55},
    {"name": "深圳", "en": "Shenzhen", "country": "CN", "jan": 19, "jul": 32, "range": 6, "humidity": 77, "wet": 0.5},
    {"name": "杭州", "en": "Hangzhou", "country": "CN", "jan": 8, "jul": 34, "range": 8, "humidity": 74, "wet": 0.5},
    {"name": "成都", "en": "Chengdu", "country": "CN", "jan": 10, "jul": 30, "range": 6, "humidity": 80, "wet": 0.5},
    {"name": "哈尔滨", "en": "Harbin", "country": "CN", "jan": -13, "jul": 28, "range": 11, "humidity": 60, "wet": 0.25},
    {"name": "伦敦", "en": "London", "country": "GB", "jan": 8, "jul": 24, "range": 7, "humidity": 78, "wet": 0.55},
    {"name": "纽约", "en": "New York", "country": "US", "jan": 4, "jul": 29, "range": 8, "humidity": 62, "wet": 0.35},
    {"name": "东京", "en": "Tokyo", "country": "JP", "jan": 10, "jul": 31, "range": 7, "humidity": 65, "wet": 0.4},
    {"name": "巴黎", "en": "Paris", "country": "FR", "jan": 7, "jul": 26, "range": 8, "humidity": 72, "wet": 0.45},
    {"name": "悉尼", "en": "Sydney", "country": "AU", "jan": 26, "jul": 17, "range": 8, "humidity": 65, "wet": 0.35},
]

CONDITIONS = {
    "clear": ("晴", "Sunny"),
    "cloudy": ("多云", "Partly cloudy"),
    "overcast": ("阴", "Overcast"),
    "lightRain": ("小雨", "Light rain"),
    "rain": ("中雨", "Moderate rain"),
    "storm": ("雷阵雨", "Thunderstorm"),
    "snow": ("小雪", "Light snow"),
}
WINDS = ["北风", "东北风", "东风", "东南风", "南风", "西南风", "西风", "西北风"]
MASK = 0xFFFFFFFF


def find_city(city):
    if not isinstance(city, str) or not city.strip():
        raise TypeError("city is required, e.g. 北京 or London")
    key = city.strip()
    if key.endswith("市"):
        key = key[:-1]
    key = key.lower()
    for c in CITIES:
        if c["name"] == key or c["en"].lower() == key:
            return c
    raise UnknownCityError(city.strip())


def fnv1a(text):
    """FNV-1a over UTF-8: a stable 32-bit hash."""
    h = 0x811C9DC5
    for b in text.encode("utf-8"):
        h = ((h ^ b) * 0x01000193) & MASK
    return h


def rng(seed):
    """Deterministic numbers in [0, 1) (xorshift32, as index.js)."""
    s = seed or 1

    def draw():
        nonlocal s
        s = (s ^ (s << 13)) & MASK
        s ^= s >> 17
        s = (s ^ (s << 5)) & MASK
        return s / 0x100000000

    return draw


def js_round(x):
    """JavaScript Math.round: halves go up (Python's round() goes to even)."""
    r = math.floor(x)
    return r + 1 if x - r >= 0.5 else r


def days_from_civil(y, m, d):
    """Days since 1970-01-01 of a proleptic Gregorian date; days past the month's end
    roll over into the next month (as JavaScript's Date.parse does for 2024-02-30)."""
    y -= m <= 2
    era = y // 400  # floor division: no adjustment for negative years
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def civil_from_days(z):
    """(year, month, day) of a day number (inverse of days_from_civil)."""
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return yoe + era * 400 + (m <= 2), m, d


def today():
    """Today as a day number: WEATHER_TODAY when set, else the UTC date."""
    env = os.environ.get("WEATHER_TODAY")
    if env:
        m = re.fullmatch(r"([0-9]{4})-([0-9]{2})-([0-9]{2})", env)
        # Date.parse accepts months 01..12 and days 01..31 (rolling over), nothing else.
        if not m or not 1 <= int(m.group(2)) <= 12 or not 1 <= int(m.group(3)) <= 31:
            raise RangeError(f"WEATHER_TODAY must be YYYY-MM-DD, got {env}")
        return days_from_civil(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    now = time.gmtime()
    return days_from_civil(now.tm_year, now.tm_mon, now.tm_mday)


def js_number(v):
    """JavaScript Number(v) for the values JSON arguments can hold."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, str):
        t = v.strip()
        if not t:
            return 0
        try:
            return float(t) if not re.fullmatch(r"[+-]?[0-9]+", t) else int(t)
        except ValueError:
            return math.nan
    return 0 if v is None else math.nan


def js_json(v):
    """JSON.stringify of a JSON argument value (integral floats without ".0")."""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def forecast(city, days, start):
    c = find_city(city)
    n = 1 if days is None else js_number(days)
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if not isinstance(n, int) or n < 1 or n > 7:
        raise RangeError(f"days must be an integer from 1 to 7, got {js_json(days)}")
    out = []
    for i in range(n):
        day = start + i
        y, mo, d = civil_from_days(day)
        date = f"{y:04d}-{mo:02d}-{d:02d}"
        rand = rng(fnv1a(f"{c['en']}|{date}"))
        doy = day - days_from_civil(y, 1, 1)
        # 0 in mid-January, 1 in mid-July (northern hemisphere).
        season = (1 - math.cos((2 * math.pi * (doy - 15)) / 365)) / 2
        high = js_round(c["jan"] + (c["jul"] - c["jan"]) * season + (rand() * 6 - 3))
        low = high - js_round(c["range"] * (0.7 + rand() * 0.6))
        wetness = rand()
        if wetness < c["wet"] * 0.5:
            kind = "snow" if high <= 2 else "storm" if season > 0.6 and rand() < 0.5 else "rain"
        elif wetness < c["wet"]:
            kind = "snow" if high <= 2 else "lightRain"
        else:
            kind = ["clear", "clear", "cloudy", "overcast"][math.floor(rand() * 4)]
        wet = kind not in ("clear", "cloudy", "overcast")
        out.append({
            "date": date,
            "condition": CONDITIONS[kind][0],
            "condition_en": CONDITIONS[kind][1],
            "high": high,
            "low": low,
            "humidity": min(98, js_round(c["humidity"] + (15 if wet else 0) + (rand() * 10 - 5))),
            "wind": f"{WINDS[math.floor(rand() * len(WINDS))]}{1 + math.floor(rand() * 4)}级",
            "precipitation_chance": 60 + math.floor(rand() * 40) if wet else math.floor(rand() * 30),
        })
    return {
        "city": c["name"],
        "city_en": c["en"],
        "country": c["country"],
        "unit": "°C",
        "source": "offline sample data (deterministic per city and date; not a live forecast)",
        "forecast": out,
    }
