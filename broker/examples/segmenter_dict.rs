//! Builds `broker/data/segmenter-dict.fst`, the segmenter's dictionary
//! (`broker/src/storage/segmenter.rs`), from a jieba `dict.txt` (`word freq [tag]` per
//! line). Run through `scripts/gen-segmenter-dict`, which finds the dictionary of the
//! jieba-rs version in Cargo.lock.
//!
//! The output is an `fst::Map` from each word (UTF-8) to its frequency, plus the empty
//! key mapped to the sum of all frequencies. Deterministic: the same input gives the
//! same bytes.
//!
//! Usage: `cargo run -p hearth-broker --example segmenter_dict -- DICT_TXT OUT_FST`

use std::collections::BTreeMap;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dict, out] = args.as_slice() else {
        eprintln!("usage: segmenter_dict DICT_TXT OUT_FST");
        return ExitCode::from(2);
    };
    match build(dict, out) {
        Ok((words, total)) => {
            println!("{out}: {words} words, total frequency {total}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Reads `dict`, writes the map to `out`; returns the word count and the total.
fn build(dict: &str, out: &str) -> Result<(usize, u64), String> {
    let text = std::fs::read_to_string(dict).map_err(|e| format!("reading {dict}: {e}"))?;
    // jieba sums every line's frequency into the total, and a word given twice keeps
    // its last frequency.
    let mut words = BTreeMap::new();
    let mut total = 0u64;
    for (n, line) in text.lines().enumerate() {
        let mut fields = line.split_ascii_whitespace();
        let Some(word) = fields.next() else { continue };
        let freq = match fields.next() {
            Some(f) => f
                .parse::<u64>()
                .map_err(|e| format!("{dict}:{}: frequency `{f}`: {e}", n + 1))?,
            None => 0,
        };
        total += freq;
        words.insert(word, freq);
    }
    let count = words.len();
    let mut map = fst::MapBuilder::memory();
    map.insert("", total).map_err(|e| e.to_string())?;
    for (word, freq) in words {
        map.insert(word, freq).map_err(|e| e.to_string())?;
    }
    let bytes = map.into_inner().map_err(|e| e.to_string())?;
    std::fs::write(out, bytes).map_err(|e| format!("writing {out}: {e}"))?;
    Ok((count, total))
}
