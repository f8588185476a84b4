//! Baselines: the work of Weir's example operators done in plain Rust, with
//! no Wasm, no channels and no state backend.

use std::collections::HashMap;
use std::io::BufRead;

use weir_host::record::Batch;

/// What the `identity` operator returns for `input`: a new batch with the
/// same columns and data. Crossing the Wasm boundary cannot do less than this
/// (the output must end up in host memory), so it is the native floor.
pub fn copy_batch(input: &Batch) -> Batch {
    Batch {
        timestamps: input.timestamps.clone(),
        key_lens: input.key_lens.clone(),
        value_lens: input.value_lens.clone(),
        data: input.data.clone(),
    }
}

/// Calls `f` with every word of `line` by the `tokenize` operator's rules:
/// lossy UTF-8, split on every char that is not alphanumeric, empty pieces
/// dropped, lowercased (ASCII in place, anything else by
/// `str::to_lowercase`). `scratch` is reused between calls.
pub fn for_each_word(line: &[u8], scratch: &mut String, mut f: impl FnMut(&str)) {
    let line = String::from_utf8_lossy(line);
    for word in line.split(|c: char| !c.is_alphanumeric()) {
        if word.is_empty() {
            continue;
        }
        if word.is_ascii() {
            scratch.clear();
            scratch.push_str(word);
            scratch.make_ascii_lowercase();
        } else {
            *scratch = word.to_lowercase();
        }
        f(scratch);
    }
}

/// What a word count over some lines found.
#[derive(Debug, Default)]
pub struct WordCount {
    /// Lines read.
    pub lines: u64,
    /// Words counted.
    pub words: u64,
    /// Count per distinct word.
    pub counts: HashMap<String, u64>,
}

/// Counts the words of every line of `input` (lines end at `\n`, a
/// trailing `\r` is dropped, as the file source does) in a `HashMap`.
pub fn word_count(mut input: impl BufRead) -> std::io::Result<WordCount> {
    let mut out = WordCount::default();
    let mut line = Vec::new();
    let mut scratch = String::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            return Ok(out);
        }
        out.lines += 1;
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        for_each_word(text, &mut scratch, |w| {
            out.words += 1;
            match out.counts.get_mut(w) {
                Some(n) => *n += 1,
                None => {
                    out.counts.insert(w.to_owned(), 1);
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizes_like_the_operator() {
        let mut words = Vec::new();
        let mut scratch = String::new();
        for_each_word(
            "Hello, world!  ÓDYSSEUS--ΟΔΥΣΣΕΥΣ 42".as_bytes(),
            &mut scratch,
            |w| words.push(w.to_owned()),
        );
        assert_eq!(words, ["hello", "world", "ódysseus", "οδυσσευς", "42"]);
    }

    #[test]
    fn counts_words_per_line() {
        let wc = word_count(&b"a b\r\nA c\n\nb"[..]).unwrap();
        assert_eq!((wc.lines, wc.words), (4, 5));
        assert_eq!(wc.counts["a"], 2);
        assert_eq!(wc.counts["b"], 2);
        assert_eq!(wc.counts["c"], 1);
    }

    #[test]
    fn copy_is_equal() {
        let b = crate::fixtures::keyed_batch(4, 10);
        let c = copy_batch(&b);
        assert_eq!(b, c);
    }
}
