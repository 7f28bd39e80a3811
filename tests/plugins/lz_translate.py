"""LinkZone TranslatePlugin (seed linkzone-ai-tool-plugins.md, 注入调用模式 示例), ported
to Hearth by changing only the import; its inject spec comes from this header comment
(注释语法), so the SDK's header parsing is exercised end to end. The Node twin
tests/plugins/lz_translate.js declares the same spec in metadata; both reply alike.

Plugin `translate`, trigger type 0 `/translate`, no tools. `/translate {text} {lang}`
replies "翻译结果: <text>" from a small offline zh/en/ja dictionary (longest match,
unknown words kept as they are, deterministic); lang defaults to en and may also be a
name (英语, japanese, 日本語 …). No text → a usage reply; an unsupported lang raises
(→ EventDone.error "UnsupportedLanguageError: unsupported target language fr; …").

@ai-triggerable true
@ai-trigger-usage 翻译文本到指定语言
@ai-trigger-format /translate {text} {lang}
@ai-trigger-args {"text":"要翻译的文本","lang":"目标语言（如 en、ja、zh）"}
"""
from hearth_plugin import Plugin

metadata = {
    "name": "translate",
    "triggers": [{"type": 0, "pattern": "/translate"}],
}


class TranslatePlugin(Plugin):
    def handle_event(self, sender):
        text = sender.param(0)
        target_lang = sender.param(1) or "en"
        if not text:
            sender.reply("用法: /translate {text} {lang}")
            return
        result = translate(text, target_lang)
        sender.reply(f"翻译结果: {result}")


# ------------------------------------------------------------------ offline dictionary

class UnsupportedLanguageError(ValueError):
    """The target language is not zh, en or ja."""


# One row per meaning: (zh, en, ja). English spellings of one meaning are separated by
# "|"; the first is the one produced. English entries may be phrases of up to 3 words.
WORDS = [
    ("你好", "hello|hi", "こんにちは"),
    ("世界", "world", "世界"),
    ("谢谢", "thank you|thanks", "ありがとう"),
    ("早上好", "good morning", "おはよう"),
    ("再见", "goodbye|bye", "さようなら"),
    ("我", "I|me", "私"),
    ("你", "you", "あなた"),
    ("爱", "love", "愛"),
    ("猫", "cat", "猫"),
    ("狗", "dog", "犬"),
    ("天气", "weather", "天気"),
    ("今天", "today", "今日"),
    ("水", "water", "水"),
    ("朋友", "friend", "友達"),
    ("苹果", "apple", "りんご"),
    ("好", "good", "良い"),
]
COLUMN = {"zh": 0, "en": 1, "ja": 2}
LANGS = {
    "zh": "zh", "zh-cn": "zh", "cn": "zh", "chinese": "zh", "中文": "zh", "汉语": "zh",
    "en": "en", "en-us": "en", "english": "en", "英语": "en", "英文": "en",
    "ja": "ja", "jp": "ja", "japanese": "ja", "日语": "ja", "日文": "ja", "日本語": "ja",
}
MAX_WORDS = 3
CJK_PUNCT = "，。！？、：；（）「」『』“”‘’《》…—～"


def _lexicon():
    """Surface form → (meaning, its language); English forms lower-case."""
    lex = {}
    for meaning, (zh, en, ja) in enumerate(WORDS):
        lex.setdefault(zh, (meaning, "zh"))
        lex.setdefault(ja, (meaning, "ja"))
        for form in en.split("|"):
            lex.setdefault(form.lower(), (meaning, "en"))
    return lex


LEXICON = _lexicon()
LONGEST = max(len(k) for k, (_, lang) in LEXICON.items() if lang != "en")


def _latin(ch):
    return "a" <= ch <= "z" or "A" <= ch <= "Z"


def _sep(ch):
    return ch.isspace() or (ch.isascii() and not ch.isalnum()) or ch in CJK_PUNCT


def segments(text):
    """Text → [(kind, meaning, source text, source language)]: kind "word" (in the
    dictionary), "raw" (unknown, kept as is) or "sep" (one space or punctuation char).
    Longest match first: English phrases of whole words, Chinese/Japanese by characters."""
    out = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if _latin(ch):
            ends = []  # ends of 1, 2, 3 words separated by single spaces
            j = i
            while True:
                while j < n and _latin(text[j]):
                    j += 1
                ends.append(j)
                if len(ends) == MAX_WORDS or j + 1 >= n or text[j] != " " or not _latin(text[j + 1]):
                    break
                j += 1
            for end in reversed(ends):
                hit = LEXICON.get(text[i:end].lower())
                if hit and hit[1] == "en":
                    out.append(("word", hit[0], text[i:end], "en"))
                    i = end
                    break
            else:
                out.append(("raw", None, text[i:ends[0]], ""))
                i = ends[0]
        elif _sep(ch):
            out.append(("sep", None, ch, ""))
            i += 1
        else:
            for m in range(min(LONGEST, n - i), 0, -1):
                hit = LEXICON.get(text[i:i + m])
                if hit and hit[1] != "en":
                    out.append(("word", hit[0], text[i:i + m], hit[1]))
                    i += m
                    break
            else:
                last = out[-1] if out else None
                if last and last[0] == "raw" and not _latin(last[2][-1]):
                    out[-1] = ("raw", None, last[2] + ch, "")
                else:
                    out.append(("raw", None, ch, ""))
                i += 1
    return out


def target_language(lang):
    """zh, en or ja for a code or name (case-insensitive); UnsupportedLanguageError else."""
    code = LANGS.get(str(lang).strip().lower())
    if code is None:
        raise UnsupportedLanguageError(f"unsupported target language {lang}; supported: zh, en, ja")
    return code


def translate(text, lang):
    """Word-by-word dictionary translation of `text` into `lang`. Words already in the
    target language and unknown words stay as written. Into English, adjacent words get a
    space between them; into Chinese or Japanese, a space between two words is dropped."""
    target = target_language(lang)
    segs = segments(text)
    parts = []
    for k, (kind, meaning, src, src_lang) in enumerate(segs):
        if kind == "word":
            word = src if src_lang == target else WORDS[meaning][COLUMN[target]].split("|")[0]
            prev = segs[k - 1][0] if k else "sep"
            if target == "en" and prev != "sep":
                parts.append(" ")
            parts.append(word)
        elif kind == "raw":
            prev = segs[k - 1][0] if k else "sep"
            if target == "en" and prev == "word":
                parts.append(" ")
            parts.append(src)
        else:
            between_words = (0 < k < len(segs) - 1 and segs[k - 1][0] == "word"
                             and segs[k + 1][0] == "word")
            if not (target != "en" and src.isspace() and between_words):
                parts.append(src)
    return "".join(parts)
