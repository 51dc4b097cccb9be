//! Trigram extraction.
//!
//! Text is normalised one character at a time (Unicode lowercase) and then cut
//! into 3-byte windows of its UTF-8 encoding. Because the normalisation maps
//! every character independently, a substring of a value normalises to a
//! substring of the normalised value, so every trigram of a needle is a trigram
//! of any value containing it: postings intersected over the needle's trigrams
//! are a superset of the true matches (the query layer rechecks them).

use std::collections::BTreeSet;

/// A byte trigram packed as `b0 << 16 | b1 << 8 | b2`.
pub type Trigram = u32;

/// The number of characters a needle needs before the index can narrow it.
pub const MIN_NEEDLE_CHARS: usize = 3;

/// Lowercases `text` character by character (see the module docs for why per character).
pub fn normalize(text: &str) -> String {
    text.chars().flat_map(char::to_lowercase).collect()
}

/// Packs three bytes into a [`Trigram`].
pub fn pack(window: [u8; 3]) -> Trigram {
    (u32::from(window[0]) << 16) | (u32::from(window[1]) << 8) | u32::from(window[2])
}

/// The distinct trigrams of `text` after normalisation, ascending.
pub fn trigrams(text: &str) -> BTreeSet<Trigram> {
    let normalized = normalize(text);
    normalized
        .as_bytes()
        .windows(3)
        .map(|w| pack([w[0], w[1], w[2]]))
        .collect()
}

/// True when a `contains` needle is long enough for the index to answer.
pub fn needle_is_indexable(needle: &str) -> bool {
    needle.chars().count() >= MIN_NEEDLE_CHARS
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rstest::rstest;

    #[rstest]
    #[case("abc", vec![pack(*b"abc")])]
    #[case("ABcd", vec![pack(*b"abc"), pack(*b"bcd")])]
    #[case("aaaa", vec![pack(*b"aaa")])]
    #[case("ab", vec![])]
    #[case("", vec![])]
    fn extracts_distinct_sorted_trigrams(#[case] text: &str, #[case] expected: Vec<Trigram>) {
        assert_eq!(trigrams(text).into_iter().collect::<Vec<_>>(), expected);
    }

    #[rstest]
    #[case("ab", false)]
    #[case("abc", true)]
    #[case("é日本", true)]
    #[case("日本", false)]
    fn needle_length_is_counted_in_characters(#[case] needle: &str, #[case] indexable: bool) {
        assert_eq!(needle_is_indexable(needle), indexable);
    }

    #[test]
    fn multibyte_characters_produce_byte_trigrams() {
        // "é" is two bytes, so "éa" alone already yields one trigram.
        assert_eq!(trigrams("Éa").len(), 1);
    }

    proptest! {
        /// The property the index relies on: a substring's trigrams are a subset
        /// of the containing value's trigrams.
        #[test]
        fn substring_trigrams_are_a_subset(text in "\\PC{0,24}", start in 0usize..24, len in 0usize..24) {
            let chars: Vec<char> = text.chars().collect();
            let start = start.min(chars.len());
            let end = (start + len).min(chars.len());
            let needle: String = chars[start..end].iter().collect();
            let haystack = trigrams(&text);
            prop_assert!(trigrams(&needle).is_subset(&haystack));
        }
    }
}
