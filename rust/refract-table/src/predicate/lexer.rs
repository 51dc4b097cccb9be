//! Splits predicate text into tokens, each tagged with its 1-based character
//! position so syntax errors can point at it.

use refract_core::{Error, Result};

/// A token kind.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// A bare identifier or keyword (keywords are recognised by the parser).
    Word(String),
    /// A `"double-quoted"` identifier; never a keyword.
    QuotedIdent(String),
    /// An integer literal's magnitude (the parser applies a leading `-`).
    Int(u64),
    /// A finite, non-negative float literal.
    Float(f64),
    /// A `'single-quoted'` string literal.
    Str(String),
    LParen,
    RParen,
    Comma,
    Minus,
    Percent,
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
    /// End of input.
    End,
}

/// A token and the 1-based character position where it starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub tok: Tok,
    pub pos: usize,
}

/// Builds the error every syntax problem reports.
pub(crate) fn syntax_error(pos: usize, message: impl std::fmt::Display) -> Error {
    Error::invalid_input(format!("syntax error at position {pos}: {message}"))
}

/// Tokenizes `input`; the last token is always [`Tok::End`].
pub(crate) fn tokenize(input: &str) -> Result<Vec<Token>> {
    Lexer {
        chars: input.chars().collect(),
        at: 0,
    }
    .run()
}

struct Lexer {
    chars: Vec<char>,
    /// 0-based index into `chars`; positions reported are `at + 1`.
    at: usize,
}

impl Lexer {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    fn run(mut self) -> Result<Vec<Token>> {
        let mut out = Vec::new();
        loop {
            while self.peek().is_some_and(char::is_whitespace) {
                self.at += 1;
            }
            let pos = self.at + 1;
            let Some(c) = self.peek() else {
                out.push(Token { tok: Tok::End, pos });
                return Ok(out);
            };
            let tok = self.next_token(c, pos)?;
            out.push(Token { tok, pos });
        }
    }

    fn next_token(&mut self, c: char, pos: usize) -> Result<Tok> {
        if c.is_ascii_alphabetic() || c == '_' {
            return Ok(Tok::Word(
                self.take_while(|c| c.is_ascii_alphanumeric() || c == '_'),
            ));
        }
        if c.is_ascii_digit() || (c == '.' && self.peek_at(1).is_some_and(|d| d.is_ascii_digit())) {
            return self.number(pos);
        }
        let two = self.peek_at(1);
        let (tok, width) = match (c, two) {
            ('\'', _) => return self.quoted('\'', pos, "string literal").map(Tok::Str),
            ('"', _) => {
                return self
                    .quoted('"', pos, "quoted identifier")
                    .map(Tok::QuotedIdent)
            }
            ('(', _) => (Tok::LParen, 1),
            (')', _) => (Tok::RParen, 1),
            (',', _) => (Tok::Comma, 1),
            ('-', _) => (Tok::Minus, 1),
            ('%', _) => (Tok::Percent, 1),
            ('=', _) => (Tok::Eq, 1),
            ('!', Some('=')) => (Tok::NotEq, 2),
            ('<', Some('>')) => (Tok::NotEq, 2),
            ('<', Some('=')) => (Tok::LtEq, 2),
            ('<', _) => (Tok::Lt, 1),
            ('>', Some('=')) => (Tok::GtEq, 2),
            ('>', _) => (Tok::Gt, 1),
            ('!', _) => return Err(syntax_error(pos, "expected '=' after '!'")),
            _ => return Err(syntax_error(pos, format!("unexpected character {c:?}"))),
        };
        self.at += width;
        Ok(tok)
    }

    fn take_while(&mut self, keep: impl Fn(char) -> bool) -> String {
        let start = self.at;
        while self.peek().is_some_and(&keep) {
            self.at += 1;
        }
        // `start <= at <= chars.len()`: `at` only advances past characters
        // that `peek` returned.
        self.chars[start..self.at].iter().collect()
    }

    /// `digits [. digits] [e [+-] digits]`, or `. digits [exponent]`.
    fn number(&mut self, pos: usize) -> Result<Tok> {
        let mut text = self.take_while(|c| c.is_ascii_digit());
        let mut is_float = false;
        if self.peek() == Some('.') {
            is_float = true;
            self.at += 1;
            text.push('.');
            text.push_str(&self.take_while(|c| c.is_ascii_digit()));
        }
        if matches!(self.peek(), Some('e' | 'E')) {
            is_float = true;
            self.at += 1;
            text.push('e');
            if let Some(sign @ ('+' | '-')) = self.peek() {
                self.at += 1;
                text.push(sign);
            }
            let digits = self.take_while(|c| c.is_ascii_digit());
            if digits.is_empty() {
                return Err(syntax_error(
                    self.at + 1,
                    "expected digits in the exponent of a number",
                ));
            }
            text.push_str(&digits);
        }
        if self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        {
            return Err(syntax_error(
                self.at + 1,
                "expected a space or operator after a number",
            ));
        }
        if is_float {
            match text.parse::<f64>() {
                Ok(v) if v.is_finite() => Ok(Tok::Float(v)),
                _ => Err(syntax_error(pos, "float literal out of range")),
            }
        } else {
            text.parse::<u64>()
                .map(Tok::Int)
                .map_err(|_| syntax_error(pos, "integer literal out of range for a 64-bit integer"))
        }
    }

    /// A `q`-delimited run where a doubled `q` stands for one `q`.
    fn quoted(&mut self, q: char, pos: usize, what: &str) -> Result<String> {
        self.at += 1; // opening quote
        let mut out = String::new();
        loop {
            match self.peek() {
                None => return Err(syntax_error(pos, format!("unterminated {what}"))),
                Some(c) if c == q => {
                    if self.peek_at(1) == Some(q) {
                        out.push(q);
                        self.at += 2;
                    } else {
                        self.at += 1;
                        return Ok(out);
                    }
                }
                Some(c) => {
                    out.push(c);
                    self.at += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn kinds(input: &str) -> Vec<Tok> {
        tokenize(input)
            .unwrap()
            .into_iter()
            .map(|t| t.tok)
            .collect()
    }

    #[rstest]
    #[case("12", vec![Tok::Int(12), Tok::End])]
    #[case("1.5", vec![Tok::Float(1.5), Tok::End])]
    #[case(".5", vec![Tok::Float(0.5), Tok::End])]
    #[case("2.", vec![Tok::Float(2.0), Tok::End])]
    #[case("1e3", vec![Tok::Float(1000.0), Tok::End])]
    #[case("1E-2", vec![Tok::Float(0.01), Tok::End])]
    #[case("-3", vec![Tok::Minus, Tok::Int(3), Tok::End])]
    #[case("'it''s'", vec![Tok::Str("it's".into()), Tok::End])]
    #[case("\"a\"\"b\"", vec![Tok::QuotedIdent("a\"b".into()), Tok::End])]
    #[case("a<>b!=c<=d>=e<f>g", vec![
        Tok::Word("a".into()), Tok::NotEq, Tok::Word("b".into()), Tok::NotEq,
        Tok::Word("c".into()), Tok::LtEq, Tok::Word("d".into()), Tok::GtEq,
        Tok::Word("e".into()), Tok::Lt, Tok::Word("f".into()), Tok::Gt,
        Tok::Word("g".into()), Tok::End])]
    #[case("(x,%)", vec![Tok::LParen, Tok::Word("x".into()), Tok::Comma, Tok::Percent, Tok::RParen, Tok::End])]
    fn lexes(#[case] input: &str, #[case] expected: Vec<Tok>) {
        assert_eq!(kinds(input), expected);
    }

    #[test]
    fn positions_count_characters_not_bytes() {
        let toks = tokenize("'é' = x").unwrap();
        let positions: Vec<usize> = toks.iter().map(|t| t.pos).collect();
        assert_eq!(positions, vec![1, 5, 7, 8]);
    }

    #[rstest]
    #[case("a ! b", 3)]
    #[case("'abc", 1)]
    #[case("x = \"ab", 5)]
    #[case("1e", 3)]
    #[case("12abc", 3)]
    #[case("1.2.3", 4)]
    #[case("18446744073709551616", 1)]
    #[case("1e999", 1)]
    #[case("a # b", 3)]
    fn reports_lexical_errors_at_position(#[case] input: &str, #[case] pos: usize) {
        let err = tokenize(input).unwrap_err().to_string();
        assert!(
            err.contains(&format!("syntax error at position {pos}:")),
            "{input:?}: {err}"
        );
    }
}
