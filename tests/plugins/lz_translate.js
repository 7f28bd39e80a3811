// LinkZone TranslatePlugin (seed linkzone-ai-tool-plugins.md, 注入调用模式 示例), ported
// to Hearth by changing only the Plugin import; the inject spec is in metadata, as in the
// seed. The Python twin tests/plugins/lz_translate.py declares the same spec in header
// comments instead; both reply alike (same dictionary, same rules).
//
// Plugin `translate`, trigger type 0 `/translate`, no tools. `/translate {text} {lang}`
// replies "翻译结果: <text>" from a small offline zh/en/ja dictionary (longest match,
// unknown words kept as they are, deterministic); lang defaults to en and may also be a
// name (英语, japanese, 日本語 …). No text → a usage reply; an unsupported lang throws
// (→ EventDone.error "UnsupportedLanguageError: unsupported target language fr; …").
const { Plugin } = require('hearth-plugin');

class TranslatePlugin extends Plugin {
    async handleEvent(sender) {
        const text = await sender.param(0);
        const targetLang = await sender.param(1) || 'en';
        if (!text) {
            await sender.reply('用法: /translate {text} {lang}');
            return;
        }
        const result = translate(text, targetLang);
        await sender.reply(`翻译结果: ${result}`);
    }
}

TranslatePlugin.metadata = {
    name: 'translate',
    triggers: [{ type: 0, pattern: '/translate' }],
    ai: {
        inject: {
            usage: '翻译文本到指定语言',
            format: '/translate {text} {lang}',
            args: {
                text: '要翻译的文本',
                lang: '目标语言（如 en、ja、zh）'
            }
        }
    }
};

module.exports = TranslatePlugin;

// ------------------------------------------------------------------ offline dictionary

/** The target language is not zh, en or ja. */
class UnsupportedLanguageError extends Error {
    constructor(message) {
        super(message);
        this.name = 'UnsupportedLanguageError';
    }
}

// One row per meaning: [zh, en, ja]. English spellings of one meaning are separated by
// "|"; the first is the one produced. English entries may be phrases of up to 3 words.
const WORDS = [
    ['你好', 'hello|hi', 'こんにちは'],
    ['世界', 'world', '世界'],
    ['谢谢', 'thank you|thanks', 'ありがとう'],
    ['早上好', 'good morning', 'おはよう'],
    ['再见', 'goodbye|bye', 'さようなら'],
    ['我', 'I|me', '私'],
    ['你', 'you', 'あなた'],
    ['爱', 'love', '愛'],
    ['猫', 'cat', '猫'],
    ['狗', 'dog', '犬'],
    ['天气', 'weather', '天気'],
    ['今天', 'today', '今日'],
    ['水', 'water', '水'],
    ['朋友', 'friend', '友達'],
    ['苹果', 'apple', 'りんご'],
    ['好', 'good', '良い'],
];
const COLUMN = { zh: 0, en: 1, ja: 2 };
const LANGS = {
    zh: 'zh', 'zh-cn': 'zh', cn: 'zh', chinese: 'zh', 中文: 'zh', 汉语: 'zh',
    en: 'en', 'en-us': 'en', english: 'en', 英语: 'en', 英文: 'en',
    ja: 'ja', jp: 'ja', japanese: 'ja', 日语: 'ja', 日文: 'ja', 日本語: 'ja',
};
const MAX_WORDS = 3;
const CJK_PUNCT = '，。！？、：；（）「」『』“”‘’《》…—～';

/** Surface form → [meaning, its language]; English forms lower-case. */
const LEXICON = new Map();
WORDS.forEach(([zh, en, ja], meaning) => {
    if (!LEXICON.has(zh)) LEXICON.set(zh, [meaning, 'zh']);
    if (!LEXICON.has(ja)) LEXICON.set(ja, [meaning, 'ja']);
    for (const form of en.split('|')) if (!LEXICON.has(form.toLowerCase())) LEXICON.set(form.toLowerCase(), [meaning, 'en']);
});
// Longest Chinese/Japanese entry, in UTF-16 code units (all entries are in the BMP).
const LONGEST = Math.max(...[...LEXICON].filter(([, [, lang]]) => lang !== 'en').map(([k]) => k.length));

const latin = (ch) => /^[A-Za-z]$/.test(ch);
const isSep = (ch) => /^\s$/.test(ch) || /^[\x00-\x7f]$/.test(ch) && !/^[A-Za-z0-9]$/.test(ch) || CJK_PUNCT.includes(ch);

/**
 * Text → [{kind, meaning, src, lang}]: kind "word" (in the dictionary), "raw" (unknown,
 * kept as is) or "sep" (one space or punctuation char). Longest match first: English
 * phrases of whole words, Chinese/Japanese by characters.
 * @param {string} text
 */
function segments(text) {
    const out = [];
    let i = 0;
    const n = text.length;
    while (i < n) {
        const ch = text[i];
        if (latin(ch)) {
            const ends = []; // ends of 1, 2, 3 words separated by single spaces
            let j = i;
            for (;;) {
                while (j < n && latin(text[j])) j++;
                ends.push(j);
                if (ends.length === MAX_WORDS || j + 1 >= n || text[j] !== ' ' || !latin(text[j + 1])) break;
                j++;
            }
            let matched = false;
            for (const end of ends.slice().reverse()) {
                const hit = LEXICON.get(text.slice(i, end).toLowerCase());
                if (hit && hit[1] === 'en') {
                    out.push({ kind: 'word', meaning: hit[0], src: text.slice(i, end), lang: 'en' });
                    i = end;
                    matched = true;
                    break;
                }
            }
            if (!matched) {
                out.push({ kind: 'raw', src: text.slice(i, ends[0]) });
                i = ends[0];
            }
        } else if (isSep(ch)) {
            out.push({ kind: 'sep', src: ch });
            i++;
        } else {
            let matched = false;
            for (let m = Math.min(LONGEST, n - i); m > 0; m--) {
                const hit = LEXICON.get(text.slice(i, i + m));
                if (hit && hit[1] !== 'en') {
                    out.push({ kind: 'word', meaning: hit[0], src: text.slice(i, i + m), lang: hit[1] });
                    i += m;
                    matched = true;
                    break;
                }
            }
            if (!matched) {
                const last = out[out.length - 1];
                if (last && last.kind === 'raw' && !latin(last.src[last.src.length - 1])) last.src += ch;
                else out.push({ kind: 'raw', src: ch });
                i++;
            }
        }
    }
    return out;
}

/**
 * zh, en or ja for a code or name (case-insensitive); UnsupportedLanguageError else.
 * @param {string} lang
 */
function targetLanguage(lang) {
    const code = Object.prototype.hasOwnProperty.call(LANGS, String(lang).trim().toLowerCase()) ? LANGS[String(lang).trim().toLowerCase()] : undefined;
    if (!code) throw new UnsupportedLanguageError(`unsupported target language ${lang}; supported: zh, en, ja`);
    return code;
}

/**
 * Word-by-word dictionary translation of `text` into `lang`. Words already in the target
 * language and unknown words stay as written. Into English, adjacent words get a space
 * between them; into Chinese or Japanese, a space between two words is dropped.
 * @param {string} text
 * @param {string} lang
 */
function translate(text, lang) {
    const target = targetLanguage(lang);
    const segs = segments(text);
    const parts = [];
    segs.forEach((s, k) => {
        const prev = k ? segs[k - 1].kind : 'sep';
        if (s.kind === 'word') {
            const word = s.lang === target ? s.src : WORDS[s.meaning][COLUMN[target]].split('|')[0];
            if (target === 'en' && prev !== 'sep') parts.push(' ');
            parts.push(word);
        } else if (s.kind === 'raw') {
            if (target === 'en' && prev === 'word') parts.push(' ');
            parts.push(s.src);
        } else {
            const betweenWords = k > 0 && k < segs.length - 1 && segs[k - 1].kind === 'word' && segs[k + 1].kind === 'word';
            if (!(target !== 'en' && /^\s$/.test(s.src) && betweenWords)) parts.push(s.src);
        }
    });
    return parts.join('');
}

TranslatePlugin.translate = translate;
