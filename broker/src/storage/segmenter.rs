//! Chinese word segmentation for the search indexes and memory recall: jieba's search
//! mode with HMM, word for word what `jieba_rs::Jieba::new().cut_for_search(text,
//! true)` gives, without building jieba's dictionary in memory.
//!
//! # Why not `Jieba::new()`
//! `Jieba::new()` parses its 349,045-word dictionary into a hash trie: about 160 ms
//! and 33 MiB of heap (measured on this machine; BENCHMARKS.md, "Broker at idle and the
//! first memory search"). Here the same dictionary is an [`fst`] map compiled into the
//! binary (`broker/data/segmenter-dict.fst`, 3.2 MB, made by
//! `scripts/gen-segmenter-dict` from jieba-rs's own `dict.txt`). Opening it reads a
//! header; a lookup walks the bytes of the words it meets, in pages the kernel maps
//! from the binary on demand. So the broker holds nothing for segmentation until the
//! first text is cut, and the first cut costs microseconds, not a dictionary load.
//!
//! # The algorithm (jieba's, as jieba-rs 0.11 runs it)
//! 1. The text splits into blocks: maximal runs of CJK ideographs, ASCII letters and
//!    digits and `+#&._%-` ([`in_block`]), and the characters between them, each of
//!    which is a word of its own (`\r\n` is one word).
//! 2. In a block, every dictionary word starting at each character is found (the
//!    "DAG"); a character with none stands alone.
//! 3. The best route through the block maximises the sum of `ln(freq) - ln(total)`
//!    over its words (ties go to the longer word), computed from the end.
//! 4. The route's multi-character words are words. A run of single characters between
//!    them is one character, or its characters one by one if the whole run is a
//!    dictionary word, or else cut by jieba's HMM (taken from jieba-rs itself,
//!    [`Jieba::empty`], which holds no dictionary).
//! 5. Search mode emits, for each word: the parts of a word joined by `.` `_` `-` that
//!    hold a letter (`WES-5.4.5` → `WES`), its 2-character then its 3-character
//!    substrings that are dictionary words (for words longer than 2 and 3 characters),
//!    then the word itself.
//!
//! The unit test `cuts_exactly_like_jieba_rs` checks every step against jieba-rs with
//! its dictionary on generated and real text; `the_dictionary_is_jieba_rs_own` checks
//! the fst against jieba-rs's dictionary (words, count and total frequency).

use std::sync::OnceLock;

use fst::raw::{Fst, Output};
use jieba_rs::Jieba;

/// The dictionary: an fst map from each word to its frequency, and from the empty key
/// to the sum of all frequencies (see `broker/examples/segmenter_dict.rs`).
static DICTIONARY: &[u8] = include_bytes!("../../data/segmenter-dict.fst");

/// The opened dictionary and `ln(total frequency)`.
struct Dictionary {
    fst: Fst<&'static [u8]>,
    log_total: f64,
}

fn dictionary() -> &'static Dictionary {
    static OPEN: OnceLock<Dictionary> = OnceLock::new();
    OPEN.get_or_init(|| {
        let fst = Fst::new(DICTIONARY).expect("broker/data/segmenter-dict.fst is an fst map");
        let total = fst
            .get(b"")
            .expect("broker/data/segmenter-dict.fst holds the total frequency under the empty key")
            .value();
        Dictionary {
            fst,
            log_total: (total as f64).ln(),
        }
    })
}

/// jieba-rs without a dictionary: what it cuts, it cuts by its HMM alone.
fn hmm() -> &'static Jieba {
    static HMM: OnceLock<Jieba> = OnceLock::new();
    HMM.get_or_init(Jieba::empty)
}

/// Whether `c` belongs in a block (jieba's `re_han_default`): a CJK ideograph (the
/// main block and extensions A–F, compatibility ideographs and their supplement), an
/// ASCII letter or digit, or one of `+#&._%-`.
fn in_block(c: char) -> bool {
    match c {
        '\u{4E00}'..='\u{9FFF}' => true,
        c if c.is_ascii() => {
            c.is_ascii_alphanumeric() || matches!(c, '+' | '#' | '&' | '.' | '_' | '%' | '-')
        }
        '\u{3400}'..='\u{4DBF}'
        | '\u{F900}'..='\u{FAFF}'
        | '\u{20000}'..='\u{2A6DF}'
        | '\u{2A700}'..='\u{2EBEF}'
        | '\u{2F800}'..='\u{2FA1F}' => true,
        _ => false,
    }
}

/// Whether `c` joins two alphanumeric parts of one word (search mode offers the parts).
fn is_connector(c: char) -> bool {
    matches!(c, '.' | '_' | '-')
}

/// The words of `text` in jieba's search mode with HMM, in jieba's order: each a slice
/// of `text`, overlapping where search mode offers a word's parts. Every character of
/// `text` is in at least one word. Pure CPU work, linear in the text.
pub fn cut_for_search(text: &str) -> Vec<&str> {
    let mut out = Vec::with_capacity(text.len() / 2);
    let mut block = Block::default();
    let mut rest = text;
    while let Some(first) = rest.chars().next() {
        let inside = in_block(first);
        let end = rest
            .char_indices()
            .find(|&(_, c)| in_block(c) != inside)
            .map_or(rest.len(), |(i, _)| i);
        let (run, tail) = rest.split_at(end);
        if inside {
            block.cut(run, &mut out);
        } else {
            let mut chars = run.char_indices().peekable();
            while let Some((i, c)) = chars.next() {
                let len = if c == '\r' && chars.next_if(|&(_, c)| c == '\n').is_some() {
                    2
                } else {
                    c.len_utf8()
                };
                out.push(&run[i..i + len]);
            }
        }
        rest = tail;
    }
    out
}

/// The working state of one block, reused for the next.
#[derive(Default)]
struct Block {
    /// Byte offset of each character, then the block's length.
    offsets: Vec<usize>,
    /// Dictionary words starting at character `i`: `edges[starts[i]..starts[i + 1]]`,
    /// as (index of the character after the word, `ln(freq)`), shortest first.
    edges: Vec<(usize, f64)>,
    starts: Vec<usize>,
    /// Best route from character `i`: (log-probability, index after its first word).
    route: Vec<(f64, usize)>,
}

impl Block {
    /// Cuts `text`, one block, into `out`.
    fn cut<'a>(&mut self, text: &'a str, out: &mut Vec<&'a str>) {
        self.offsets.clear();
        self.offsets.extend(text.char_indices().map(|(i, _)| i));
        self.offsets.push(text.len());
        self.find_words(text);
        self.best_route();

        let n = self.offsets.len() - 1;
        let mut singles: Option<usize> = None;
        let mut x = 0;
        while x < n {
            let y = self.route[x].1;
            if y - x == 1 {
                singles.get_or_insert(x);
            } else {
                if let Some(start) = singles.take() {
                    self.single_run(text, start, x, out);
                }
                self.emit(text, x, y, out);
            }
            x = y;
        }
        if let Some(start) = singles {
            self.single_run(text, start, n, out);
        }
    }

    /// Fills `edges` and `starts` by walking the dictionary from every character.
    fn find_words(&mut self, text: &str) {
        let dict = &dictionary().fst;
        let n = self.offsets.len() - 1;
        self.edges.clear();
        self.starts.clear();
        for i in 0..n {
            self.starts.push(self.edges.len());
            let mut node = dict.root();
            let mut output = Output::zero();
            'walk: for j in i..n {
                for &b in &text.as_bytes()[self.offsets[j]..self.offsets[j + 1]] {
                    let Some(t) = node.find_input(b) else {
                        break 'walk;
                    };
                    let t = node.transition(t);
                    output = output.cat(t.out);
                    node = dict.node(t.addr);
                }
                if node.is_final() {
                    let freq = output.cat(node.final_output()).value();
                    self.edges.push((j + 1, (freq as f64).ln()));
                }
            }
        }
        self.starts.push(self.edges.len());
    }

    /// Dictionary words starting at character `i`.
    fn words_at(&self, i: usize) -> &[(usize, f64)] {
        &self.edges[self.starts[i]..self.starts[i + 1]]
    }

    /// Whether characters `x..y` are one dictionary word.
    fn is_word(&self, x: usize, y: usize) -> bool {
        self.words_at(x).iter().any(|&(end, _)| end == y)
    }

    /// Fills `route` from the last character back (jieba's `calc`).
    fn best_route(&mut self) {
        let log_total = dictionary().log_total;
        let n = self.offsets.len() - 1;
        self.route.clear();
        self.route.resize(n + 1, (0.0, n));
        for i in (0..n).rev() {
            let mut best: Option<(f64, usize)> = None;
            for &(end, log_freq) in self.words_at(i) {
                let prob = log_freq - log_total + self.route[end].0;
                if best.is_none_or(|(p, e)| prob > p || (prob == p && end > e)) {
                    best = Some((prob, end));
                }
            }
            // A character that starts no word stands alone, as if its frequency were 1.
            self.route[i] = best.unwrap_or((0.0 - log_total + self.route[i + 1].0, i + 1));
        }
    }

    /// Emits the run of single characters `x..y` the route left between words.
    fn single_run<'a>(&self, text: &'a str, x: usize, y: usize, out: &mut Vec<&'a str>) {
        if y - x == 1 {
            self.emit(text, x, y, out);
        } else if self.is_word(x, y) {
            for i in x..y {
                self.emit(text, i, i + 1, out);
            }
        } else {
            let run = &text[self.offsets[x]..self.offsets[y]];
            for token in hmm().cut(run, true) {
                self.emit(text, x + token.start, x + token.end, out);
            }
        }
    }

    /// Emits the word at characters `x..y` in search mode: its connector-joined parts,
    /// its 2- and 3-character dictionary words, then itself.
    fn emit<'a>(&self, text: &'a str, x: usize, y: usize, out: &mut Vec<&'a str>) {
        let word = &text[self.offsets[x]..self.offsets[y]];
        if word.contains(is_connector) {
            out.extend(
                word.split(is_connector).filter(|part| {
                    part.len() >= 2 && part.bytes().any(|b| b.is_ascii_alphabetic())
                }),
            );
        }
        for len in [2, 3] {
            if y - x > len {
                for i in x..=y - len {
                    if self.is_word(i, i + len) {
                        out.push(&text[self.offsets[i]..self.offsets[i + len]]);
                    }
                }
            }
        }
        out.push(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// jieba-rs with its own dictionary, built once for all tests.
    fn jieba() -> &'static Jieba {
        static JIEBA: OnceLock<Jieba> = OnceLock::new();
        JIEBA.get_or_init(Jieba::new)
    }

    fn jieba_words(text: &str) -> Vec<&str> {
        jieba()
            .cut_for_search(text, true)
            .into_iter()
            .map(|t| t.word)
            .collect()
    }

    /// Every word of the fst (but the empty key), in order.
    fn dictionary_words() -> Vec<String> {
        use fst::Streamer;
        let mut words = Vec::new();
        let mut stream = dictionary().fst.stream();
        while let Some((key, _)) = stream.next() {
            if !key.is_empty() {
                words.push(String::from_utf8(key.to_vec()).expect("UTF-8 word"));
            }
        }
        words
    }

    #[test]
    fn the_dictionary_is_jieba_rs_own() {
        // jieba-rs's Debug output is its only public view of its dictionary's size.
        let debug = format!("{:?}", jieba());
        let words = dictionary_words();
        let total = dictionary().fst.get(b"").expect("total").value();
        assert_eq!(
            debug,
            format!("Jieba {{ records_len: {}, total_freq: {total} }}", words.len()),
            "broker/data/segmenter-dict.fst is not jieba-rs's dictionary: run scripts/gen-segmenter-dict"
        );
        let missing: Vec<&String> = words
            .iter()
            .filter(|w| !jieba().has_word(w))
            .take(5)
            .collect();
        assert!(
            missing.is_empty(),
            "words jieba-rs does not have: {missing:?}"
        );
    }

    #[test]
    fn cuts_exactly_like_jieba_rs() {
        let mut cases: Vec<String> = [
            "",
            "我来到北京清华大学",
            "他来到了网易杭研大厦",
            "小明硕士毕业于中国科学院计算所，后在日本京都大学深造",
            "中华人民共和国万岁！南京市长江大桥",
            "今天天气很好，明天气温下降。WES-5.4.5 发布了 v3.6.3 版本",
            "Hearth 的 broker 在 127.0.0.1:8080 上运行 100% 正常 a_b-c.d",
            "line one\r\nline two\n\r第三行\r\n",
            "𠀀𠀁 㐀㐁 豈更 ひらがな カタカナ 한국어 😀 emoji",
            "abc- -abc .5 5. a..b __init__ C++ C# R&D 50%折扣",
            "结婚的和尚未结婚的",
            "工信处女干事每月经过下属科室都要亲口交代24口交换机等技术性器件的安装工作",
            "   \t\u{3000}，。！？……——“引号”",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Chinese prose written by people: the repository's Chinese docs and fixtures.
        for path in ["../docs", "../tests", "../examples"] {
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
            let mut dirs = vec![root];
            while let Some(dir) = dirs.pop() {
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for entry in entries.flatten() {
                    let path = entry.path();
                    if path.is_dir() {
                        dirs.push(path);
                    } else if let Ok(text) = std::fs::read_to_string(&path) {
                        if text.chars().any(|c| ('\u{4E00}'..='\u{9FFF}').contains(&c)) {
                            cases.extend(text.lines().map(str::to_string));
                        }
                    }
                }
            }
        }
        // Generated: dictionary words, single ideographs and the other kinds of
        // character, run together at random.
        let words = dictionary_words();
        let others = [
            "a", "Z", "7", "-", ".", "_", "+", "#", "&", "%", " ", "\r\n", "\n", "，", "。", "é",
            "ß", "😀", "𠀀", "㐀", "ア", "한", "\u{3000}", "x1", "v2.0", "foo_bar",
        ];
        let mut rng = crate::testing::Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..4000 {
            let mut s = String::new();
            for _ in 0..rng.below(24) {
                match rng.below(6) {
                    0..=2 => s.push_str(&words[rng.below(words.len())]),
                    3 => {
                        let w = &words[rng.below(words.len())];
                        s.push(w.chars().next().unwrap());
                    }
                    _ => s.push_str(others[rng.below(others.len())]),
                }
            }
            cases.push(s);
        }
        assert!(cases.len() > 4100, "only {} cases", cases.len());
        for case in &cases {
            assert_eq!(cut_for_search(case), jieba_words(case), "cutting {case:?}");
        }
    }

    #[test]
    fn cuts_jiebas_own_example_as_jieba_documents_it() {
        // The search-mode example of jieba's README.
        assert_eq!(
            cut_for_search("小明硕士毕业于中国科学院计算所，后在日本京都大学深造").join("/"),
            "小明/硕士/毕业/于/中国/科学/学院/科学院/中国科学院/计算/计算所/，/后/在/日本/京都/大学/日本京都大学/深造"
        );
    }
}
