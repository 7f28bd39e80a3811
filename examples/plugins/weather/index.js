// The LinkZone hybrid WeatherPlugin (seed: linkzone-ai-tool-plugins.md, 混合模式), ported
// to Hearth by changing only the Plugin import. The helpers the doc leaves out —
// fetchWeather and formatWeather — are written for real, on deterministic offline data:
// the same city and date always give the same forecast, and no network is needed.
const { Plugin } = require('hearth-plugin');

class WeatherPlugin extends Plugin {
    // 注入调用：用户直接使用 /weather 命令
    async handleEvent(sender) {
        const city = await sender.param(0);
        const data = await this.fetchWeather(city);
        await sender.reply(this.formatWeather(data));
    }

    // 直接调用：AI 调用获取结构化数据
    async executeTool(sender, args) {
        const { city, days } = args;
        const data = await this.fetchWeather(city, days);
        return {
            success: true,
            content: JSON.stringify(data)
        };
    }

    /**
     * Forecast for `days` days (1..7, default 1) starting today (UTC date, or
     * WEATHER_TODAY=YYYY-MM-DD): a seasonal curve per city plus noise seeded by
     * (city, date). Throws UnknownCityError for a city not in the table.
     * @param {string} city Chinese or English name, e.g. 北京, 上海市, London
     * @param {number} [days]
     */
    async fetchWeather(city, days = 1) {
        return forecast(city, days, today());
    }

    /**
     * One line per day, in Chinese, as the /weather command replies.
     * @param {ReturnType<typeof forecast>} data
     */
    formatWeather(data) {
        const lines = data.forecast.map((d) =>
            `${d.date} ${d.condition} ${d.low}~${d.high}${data.unit} 湿度${d.humidity}% ${d.wind} 降水概率${d.precipitation_chance}%`);
        return `${data.city}（${data.city_en}）天气：\n${lines.join('\n')}\n（离线示例数据）`;
    }
}

WeatherPlugin.metadata = {
    name: 'weather',
    triggers: [{ type: 0, pattern: '/weather' }],
    ai: {
        inject: {
            usage: '查询天气信息',
            format: '/weather {city}',
            args: { city: '城市名称' }
        },
        tool: {
            parameters: [
                { name: 'city', type: 'string', description: '城市名称', required: true },
                { name: 'days', type: 'number', description: '预报天数', required: false, default: 1 }
            ],
            usage: '查询指定城市的天气信息',
            when_to_use: '当用户询问天气、气温、是否下雨等问题时'
        }
    }
};

module.exports = WeatherPlugin;

// ------------------------------------------------------------------ offline data

/** The city is not in the offline table. */
class UnknownCityError extends Error {
    constructor(city) {
        super(`unknown city "${city}"; known cities: ${CITIES.map((c) => `${c.name} (${c.en})`).join(', ')}`);
        this.name = 'UnknownCityError';
    }
}

// Climate normals: mean daily high in January and July (°C; southern cities simply have
// a warmer January), diurnal range, humidity, and how wet the city is (0..1).
const CITIES = [
    { name: '北京', en: 'Beijing', country: 'CN', jan: 2, jul: 31, range: 10, humidity: 45, wet: 0.25 },
    { name: '上海', en: 'Shanghai', country: 'CN', jan: 8, jul: 32, range: 7, humidity: 72, wet: 0.45 },
    { name: '广州', en: 'Guangzhou', country: 'CN', jan: 18, jul: 33, range: 7, humidity: 78, wet: 0.55 },
    { name: '深圳', en: 'Shenzhen', country: 'CN', jan: 19, jul: 32, range: 6, humidity: 77, wet: 0.5 },
    { name: '杭州', en: 'Hangzhou', country: 'CN', jan: 8, jul: 34, range: 8, humidity: 74, wet: 0.5 },
    { name: '成都', en: 'Chengdu', country: 'CN', jan: 10, jul: 30, range: 6, humidity: 80, wet: 0.5 },
    { name: '哈尔滨', en: 'Harbin', country: 'CN', jan: -13, jul: 28, range: 11, humidity: 60, wet: 0.25 },
    { name: '伦敦', en: 'London', country: 'GB', jan: 8, jul: 24, range: 7, humidity: 78, wet: 0.55 },
    { name: '纽约', en: 'New York', country: 'US', jan: 4, jul: 29, range: 8, humidity: 62, wet: 0.35 },
    { name: '东京', en: 'Tokyo', country: 'JP', jan: 10, jul: 31, range: 7, humidity: 65, wet: 0.4 },
    { name: '巴黎', en: 'Paris', country: 'FR', jan: 7, jul: 26, range: 8, humidity: 72, wet: 0.45 },
    { name: '悉尼', en: 'Sydney', country: 'AU', jan: 26, jul: 17, range: 8, humidity: 65, wet: 0.35 },
];

const CONDITIONS = {
    clear: ['晴', 'Sunny'],
    cloudy: ['多云', 'Partly cloudy'],
    overcast: ['阴', 'Overcast'],
    lightRain: ['小雨', 'Light rain'],
    rain: ['中雨', 'Moderate rain'],
    storm: ['雷阵雨', 'Thunderstorm'],
    snow: ['小雪', 'Light snow'],
};
const WINDS = ['北风', '东北风', '东风', '东南风', '南风', '西南风', '西风', '西北风'];

/** @param {string} city */
function findCity(city) {
    if (typeof city !== 'string' || !city.trim()) throw new TypeError('city is required, e.g. 北京 or London');
    const key = city.trim().replace(/市$/, '').toLowerCase();
    const c = CITIES.find((x) => x.name === key || x.en.toLowerCase() === key);
    if (!c) throw new UnknownCityError(city.trim());
    return c;
}

/** FNV-1a over UTF-8: a stable 32-bit hash. */
function hash(text) {
    let h = 0x811c9dc5;
    for (const b of Buffer.from(text, 'utf8')) h = Math.imul(h ^ b, 0x01000193) >>> 0;
    return h;
}

/** Deterministic numbers in [0, 1) for one city and date. */
function rng(seed) {
    let s = seed || 1;
    return () => {
        s ^= s << 13; s >>>= 0;
        s ^= s >>> 17;
        s ^= s << 5; s >>>= 0;
        return s / 0x100000000;
    };
}

function today() {
    const env = process.env.WEATHER_TODAY;
    if (env) {
        if (!/^\d{4}-\d{2}-\d{2}$/.test(env) || Number.isNaN(Date.parse(`${env}T00:00:00Z`))) throw new RangeError(`WEATHER_TODAY must be YYYY-MM-DD, got ${env}`);
        return new Date(`${env}T00:00:00Z`);
    }
    const now = new Date();
    return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()));
}

/**
 * @param {string} city
 * @param {number} days
 * @param {Date} start UTC midnight
 */
function forecast(city, days, start) {
    const c = findCity(city);
    const n = days == null ? 1 : Number(days);
    if (!Number.isInteger(n) || n < 1 || n > 7) throw new RangeError(`days must be an integer from 1 to 7, got ${JSON.stringify(days)}`);
    const out = [];
    for (let i = 0; i < n; i++) {
        const d = new Date(start.getTime() + i * 86400000);
        const date = d.toISOString().slice(0, 10);
        const rand = rng(hash(`${c.en}|${date}`));
        const doy = (d.getTime() - Date.UTC(d.getUTCFullYear(), 0, 1)) / 86400000;
        // 0 in mid-January, 1 in mid-July (northern hemisphere).
        const season = (1 - Math.cos((2 * Math.PI * (doy - 15)) / 365)) / 2;
        const high = Math.round(c.jan + (c.jul - c.jan) * season + (rand() * 6 - 3));
        const low = high - Math.round(c.range * (0.7 + rand() * 0.6));
        const wetness = rand();
        let kind;
        if (wetness < c.wet * 0.5) kind = high <= 2 ? 'snow' : season > 0.6 && rand() < 0.5 ? 'storm' : 'rain';
        else if (wetness < c.wet) kind = high <= 2 ? 'snow' : 'lightRain';
        else kind = ['clear', 'clear', 'cloudy', 'overcast'][Math.floor(rand() * 4)];
        const wet = kind !== 'clear' && kind !== 'cloudy' && kind !== 'overcast';
        out.push({
            date,
            condition: CONDITIONS[kind][0],
            condition_en: CONDITIONS[kind][1],
            high,
            low,
            humidity: Math.min(98, Math.round(c.humidity + (wet ? 15 : 0) + (rand() * 10 - 5))),
            wind: `${WINDS[Math.floor(rand() * WINDS.length)]}${1 + Math.floor(rand() * 4)}级`,
            precipitation_chance: wet ? 60 + Math.floor(rand() * 40) : Math.floor(rand() * 30),
        });
    }
    return {
        city: c.name,
        city_en: c.en,
        country: c.country,
        unit: '°C',
        source: 'offline sample data (deterministic per city and date; not a live forecast)',
        forecast: out,
    };
}
