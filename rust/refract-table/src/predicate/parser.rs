//! Recursive-descent parser: tokens → [`Expr`].
//!
//! ```text
//! or_expr   := and_expr (OR and_expr)*
//! and_expr  := not_expr (AND not_expr)*
//! not_expr  := NOT not_expr | primary
//! primary   := '(' or_expr ')'
//!            | contains '(' column ',' string ')'
//!            | term cmp_op literal | literal cmp_op term
//!            | column [NOT] IN '(' literal (',' literal)* ')'
//!            | column IS [NOT] NULL
//! term      := column | column '%' integer
//! ```
//!
//! Recursion happens only at `(` and `NOT`, and that nesting is capped at
//! [`MAX_DEPTH`]. Runs of `AND`/`OR` are built into balanced trees, so a long
//! chain does not make a deep tree either.

use super::expr::{CompareOp, Expr, Literal};
use super::lexer::{syntax_error, tokenize, Tok, Token};
use super::MAX_DEPTH;
use refract_core::Result;

/// Keywords that the parser never takes as a bare column name.
const KEYWORDS: [&str; 8] = ["and", "or", "not", "in", "is", "null", "true", "false"];

/// Parses a complete predicate.
pub(crate) fn parse_tokens(input: &str) -> Result<Expr> {
    let tokens = tokenize(input)?;
    let mut parser = Parser {
        tokens,
        at: 0,
        depth: 0,
    };
    let expr = parser.or_expr()?;
    let end = parser.peek();
    if end.tok != Tok::End {
        return Err(syntax_error(
            end.pos,
            format!(
                "expected AND, OR or end of input, found {}",
                describe(&end.tok)
            ),
        ));
    }
    Ok(expr)
}

/// How a token is named in error messages.
fn describe(tok: &Tok) -> String {
    match tok {
        Tok::Word(w) => format!("'{w}'"),
        Tok::QuotedIdent(w) => format!("identifier \"{w}\""),
        Tok::Int(v) => format!("number {v}"),
        Tok::Float(v) => format!("number {v:?}"),
        Tok::Str(_) => "a string literal".to_owned(),
        Tok::LParen => "'('".to_owned(),
        Tok::RParen => "')'".to_owned(),
        Tok::Comma => "','".to_owned(),
        Tok::Minus => "'-'".to_owned(),
        Tok::Percent => "'%'".to_owned(),
        Tok::Eq => "'='".to_owned(),
        Tok::NotEq => "'!='".to_owned(),
        Tok::Lt => "'<'".to_owned(),
        Tok::LtEq => "'<='".to_owned(),
        Tok::Gt => "'>'".to_owned(),
        Tok::GtEq => "'>='".to_owned(),
        Tok::End => "end of input".to_owned(),
    }
}

fn is_keyword(tok: &Tok, keyword: &str) -> bool {
    matches!(tok, Tok::Word(w) if w.eq_ignore_ascii_case(keyword))
}

fn compare_op(tok: &Tok) -> Option<CompareOp> {
    Some(match tok {
        Tok::Eq => CompareOp::Eq,
        Tok::NotEq => CompareOp::NotEq,
        Tok::Lt => CompareOp::Lt,
        Tok::LtEq => CompareOp::LtEq,
        Tok::Gt => CompareOp::Gt,
        Tok::GtEq => CompareOp::GtEq,
        _ => return None,
    })
}

/// The column side of a comparison.
enum Term {
    Column(String),
    Modulo(String, i64),
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    /// Current nesting of `(` and `NOT`.
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Token {
        // `tokenize` always ends with `End`, and `advance` never moves past it.
        self.tokens
            .get(self.at)
            .or(self.tokens.last())
            .cloned()
            .unwrap_or(Token {
                tok: Tok::End,
                pos: 1,
            })
    }

    fn peek_tok_at(&self, ahead: usize) -> Option<&Tok> {
        self.tokens.get(self.at + ahead).map(|t| &t.tok)
    }

    fn advance(&mut self) -> Token {
        let token = self.peek();
        if token.tok != Tok::End {
            self.at += 1;
        }
        token
    }

    fn expected(&self, what: &str) -> refract_core::Error {
        let token = self.peek();
        syntax_error(
            token.pos,
            format!("expected {what}, found {}", describe(&token.tok)),
        )
    }

    fn expect(&mut self, tok: Tok, what: &str) -> Result<()> {
        if self.peek().tok == tok {
            self.advance();
            Ok(())
        } else {
            Err(self.expected(what))
        }
    }

    fn enter(&mut self, pos: usize) -> Result<()> {
        if self.depth >= MAX_DEPTH {
            return Err(syntax_error(
                pos,
                format!("expression nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        self.depth += 1;
        Ok(())
    }

    fn or_expr(&mut self) -> Result<Expr> {
        let first = self.and_expr()?;
        let mut rest = Vec::new();
        while is_keyword(&self.peek().tok, "or") {
            self.advance();
            rest.push(self.and_expr()?);
        }
        Ok(balanced(first, rest, Expr::Or))
    }

    fn and_expr(&mut self) -> Result<Expr> {
        let first = self.not_expr()?;
        let mut rest = Vec::new();
        while is_keyword(&self.peek().tok, "and") {
            self.advance();
            rest.push(self.not_expr()?);
        }
        Ok(balanced(first, rest, Expr::And))
    }

    fn not_expr(&mut self) -> Result<Expr> {
        let token = self.peek();
        if !is_keyword(&token.tok, "not") {
            return self.primary();
        }
        self.advance();
        self.enter(token.pos)?;
        let inner = self.not_expr()?;
        self.depth -= 1;
        Ok(Expr::Not(Box::new(inner)))
    }

    fn primary(&mut self) -> Result<Expr> {
        let token = self.peek();
        if token.tok == Tok::LParen {
            self.advance();
            self.enter(token.pos)?;
            let inner = self.or_expr()?;
            self.expect(Tok::RParen, "')' or an operator")?;
            self.depth -= 1;
            return Ok(inner);
        }
        if is_keyword(&token.tok, "contains") && self.peek_tok_at(1) == Some(&Tok::LParen) {
            return self.contains();
        }
        if let Some(column) = self.try_column() {
            return self.after_column(column);
        }
        if let Some(literal) = self.try_literal()? {
            return self.literal_first(literal, token.pos);
        }
        Err(self.expected("a column name, a literal, NOT or '('"))
    }

    /// `contains(column, 'needle')`, positioned at `contains`.
    fn contains(&mut self) -> Result<Expr> {
        self.advance(); // `contains`
        self.advance(); // `(`
        let column = self
            .try_column()
            .ok_or_else(|| self.expected("a column name in contains()"))?;
        self.expect(Tok::Comma, "',' after the column in contains()")?;
        let needle = match self.peek().tok {
            Tok::Str(s) => {
                self.advance();
                s
            }
            _ => return Err(self.expected("a string literal in contains()")),
        };
        self.expect(Tok::RParen, "')' to close contains()")?;
        Ok(Expr::Contains { column, needle })
    }

    fn try_column(&mut self) -> Option<String> {
        match self.peek().tok {
            Tok::QuotedIdent(name) => {
                self.advance();
                Some(name)
            }
            Tok::Word(name) if !KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(&name)) => {
                self.advance();
                Some(name)
            }
            _ => None,
        }
    }

    /// A literal with an optional leading `-` on numbers; `None` when the
    /// next token cannot start a literal.
    fn try_literal(&mut self) -> Result<Option<Literal>> {
        let token = self.peek();
        let literal = match token.tok {
            Tok::Minus => {
                self.advance();
                match self.peek().tok {
                    Tok::Int(m) => {
                        // i64::MIN's magnitude is one more than i64::MAX.
                        let v = 0i64.checked_sub_unsigned(m).ok_or_else(|| {
                            syntax_error(
                                token.pos,
                                "integer literal out of range for a 64-bit integer",
                            )
                        })?;
                        Literal::Int(v)
                    }
                    Tok::Float(f) => Literal::Float(-f),
                    _ => return Err(self.expected("a number after '-'")),
                }
            }
            Tok::Int(m) => Literal::Int(i64::try_from(m).map_err(|_| {
                syntax_error(
                    token.pos,
                    "integer literal out of range for a 64-bit integer",
                )
            })?),
            Tok::Float(f) => Literal::Float(f),
            Tok::Str(s) => Literal::Str(s),
            Tok::Word(ref w) if w.eq_ignore_ascii_case("true") => Literal::Bool(true),
            Tok::Word(ref w) if w.eq_ignore_ascii_case("false") => Literal::Bool(false),
            _ => return Ok(None),
        };
        self.advance();
        Ok(Some(literal))
    }

    fn literal_after(&mut self, op: CompareOp) -> Result<Literal> {
        if is_keyword(&self.peek().tok, "null") {
            return Err(self.expected(&format!(
                "a literal after '{op}' (compare with null using IS NULL or IS NOT NULL)"
            )));
        }
        self.try_literal()?
            .ok_or_else(|| self.expected(&format!("a literal after '{op}'")))
    }

    fn integer_after(&mut self, what: &str) -> Result<i64> {
        let pos = self.peek().pos;
        match self.try_literal()? {
            Some(Literal::Int(v)) => Ok(v),
            _ => Err(syntax_error(
                pos,
                format!("expected an integer literal after {what}"),
            )),
        }
    }

    fn after_column(&mut self, column: String) -> Result<Expr> {
        let token = self.peek();
        if is_keyword(&token.tok, "is") {
            self.advance();
            let negated = is_keyword(&self.peek().tok, "not");
            if negated {
                self.advance();
            }
            if !is_keyword(&self.peek().tok, "null") {
                return Err(self.expected("NULL after IS"));
            }
            self.advance();
            return Ok(Expr::IsNull { column, negated });
        }
        if is_keyword(&token.tok, "in") {
            self.advance();
            return self.in_list(column, false);
        }
        if is_keyword(&token.tok, "not") {
            self.advance();
            if !is_keyword(&self.peek().tok, "in") {
                return Err(self.expected("IN after NOT"));
            }
            self.advance();
            return self.in_list(column, true);
        }
        let term = self.modulo_suffix(column)?;
        let op = compare_op(&self.peek().tok)
            .ok_or_else(|| self.expected("a comparison operator, IN, IS or '%'"))?;
        self.advance();
        match term {
            Term::Column(column) => {
                let value = self.literal_after(op)?;
                Ok(Expr::Compare { column, op, value })
            }
            Term::Modulo(column, divisor) => {
                let value = self.integer_after(&format!("'{op}'"))?;
                Ok(Expr::Modulo {
                    column,
                    divisor,
                    op,
                    value,
                })
            }
        }
    }

    fn modulo_suffix(&mut self, column: String) -> Result<Term> {
        if self.peek().tok != Tok::Percent {
            return Ok(Term::Column(column));
        }
        self.advance();
        let pos = self.peek().pos;
        let divisor = self.integer_after("'%'")?;
        if divisor == 0 {
            return Err(syntax_error(pos, "expected a non-zero divisor after '%'"));
        }
        Ok(Term::Modulo(column, divisor))
    }

    /// `literal op term`, stored as `term flip(op) literal`.
    fn literal_first(&mut self, literal: Literal, literal_pos: usize) -> Result<Expr> {
        let op = compare_op(&self.peek().tok)
            .ok_or_else(|| self.expected("a comparison operator after the literal"))?;
        self.advance();
        let column = self
            .try_column()
            .ok_or_else(|| self.expected(&format!("a column name after '{op}'")))?;
        let op = op.flip();
        match self.modulo_suffix(column)? {
            Term::Column(column) => Ok(Expr::Compare {
                column,
                op,
                value: literal,
            }),
            Term::Modulo(column, divisor) => match literal {
                Literal::Int(value) => Ok(Expr::Modulo {
                    column,
                    divisor,
                    op,
                    value,
                }),
                _ => Err(syntax_error(
                    literal_pos,
                    "expected an integer literal on the other side of a '%' comparison",
                )),
            },
        }
    }

    fn in_list(&mut self, column: String, negated: bool) -> Result<Expr> {
        self.expect(Tok::LParen, "'(' after IN")?;
        let mut values = Vec::new();
        loop {
            if is_keyword(&self.peek().tok, "null") {
                return Err(self.expected("a literal in the IN list (NULL is not allowed)"));
            }
            let value = self
                .try_literal()?
                .ok_or_else(|| self.expected("a literal in the IN list"))?;
            values.push(value);
            match self.peek().tok {
                Tok::Comma => {
                    self.advance();
                }
                Tok::RParen => {
                    self.advance();
                    return Ok(Expr::InList {
                        column,
                        values,
                        negated,
                    });
                }
                _ => return Err(self.expected("',' or ')' in the IN list")),
            }
        }
    }
}

/// Combines `first` and `rest` into a balanced tree with `join`, so a run of
/// n operands is about log2 n deep instead of n, keeping left-to-right order.
fn balanced(first: Expr, mut rest: Vec<Expr>, join: fn(Box<Expr>, Box<Expr>) -> Expr) -> Expr {
    if rest.is_empty() {
        return first;
    }
    // The left half takes `first` and `half - 1` more operands; the right
    // half gets the remaining `rest.len() + 1 - half >= 1` operands.
    let half = rest.len().div_ceil(2);
    let mut right = rest.split_off(half - 1).into_iter();
    let left = balanced(first, rest, join);
    match right.next() {
        Some(right_first) => join(
            Box::new(left),
            Box::new(balanced(right_first, right.collect(), join)),
        ),
        None => left,
    }
}

#[cfg(test)]
mod tests {
    use crate::predicate::{parse, CompareOp, Expr, Literal, MAX_DEPTH, MAX_INPUT_BYTES};
    use refract_core::Error;
    use rstest::rstest;

    fn cmp(column: &str, op: CompareOp, value: Literal) -> Expr {
        Expr::Compare {
            column: column.into(),
            op,
            value,
        }
    }

    fn eq(column: &str, v: i64) -> Expr {
        cmp(column, CompareOp::Eq, Literal::Int(v))
    }

    fn and(l: Expr, r: Expr) -> Expr {
        Expr::And(Box::new(l), Box::new(r))
    }

    fn or(l: Expr, r: Expr) -> Expr {
        Expr::Or(Box::new(l), Box::new(r))
    }

    fn not(e: Expr) -> Expr {
        Expr::Not(Box::new(e))
    }

    /// Height of the tree (a leaf is 1), computed iteratively.
    fn height(expr: &Expr) -> usize {
        let mut max = 0;
        let mut stack = vec![(expr, 1)];
        while let Some((node, h)) = stack.pop() {
            max = max.max(h);
            match node {
                Expr::And(l, r) | Expr::Or(l, r) => {
                    stack.push((l, h + 1));
                    stack.push((r, h + 1));
                }
                Expr::Not(inner) => stack.push((inner, h + 1)),
                _ => {}
            }
        }
        max
    }

    #[rstest]
    #[case("x = 1", eq("x", 1))]
    #[case("x != -2", cmp("x", CompareOp::NotEq, Literal::Int(-2)))]
    #[case("x <> 2", cmp("x", CompareOp::NotEq, Literal::Int(2)))]
    #[case("x<2.5", cmp("x", CompareOp::Lt, Literal::Float(2.5)))]
    #[case("x <= - 1e3", cmp("x", CompareOp::LtEq, Literal::Float(-1000.0)))]
    #[case("x > 'it''s'", cmp("x", CompareOp::Gt, Literal::Str("it's".into())))]
    #[case("x >= TRUE", cmp("x", CompareOp::GtEq, Literal::Bool(true)))]
    #[case("x = False", cmp("x", CompareOp::Eq, Literal::Bool(false)))]
    #[case("5 < x", cmp("x", CompareOp::Gt, Literal::Int(5)))]
    #[case("5 >= x", cmp("x", CompareOp::LtEq, Literal::Int(5)))]
    #[case("'a' != x", cmp("x", CompareOp::NotEq, Literal::Str("a".into())))]
    #[case("x = -9223372036854775808", eq("x", i64::MIN))]
    #[case("x = 9223372036854775807", eq("x", i64::MAX))]
    #[case("id % 10 = 3", Expr::Modulo { column: "id".into(), divisor: 10, op: CompareOp::Eq, value: 3 })]
    #[case("id % -10 >= -3", Expr::Modulo { column: "id".into(), divisor: -10, op: CompareOp::GtEq, value: -3 })]
    #[case("3 < id % 10", Expr::Modulo { column: "id".into(), divisor: 10, op: CompareOp::Gt, value: 3 })]
    #[case("x IN (1, 'a', 2.5, true)", Expr::InList { column: "x".into(), values: vec![Literal::Int(1), Literal::Str("a".into()), Literal::Float(2.5), Literal::Bool(true)], negated: false })]
    #[case("x not in (-1)", Expr::InList { column: "x".into(), values: vec![Literal::Int(-1)], negated: true })]
    #[case("x is null", Expr::IsNull { column: "x".into(), negated: false })]
    #[case("x IS NOT NULL", Expr::IsNull { column: "x".into(), negated: true })]
    #[case("contains(name, 'ab')", Expr::Contains { column: "name".into(), needle: "ab".into() })]
    #[case("CONTAINS(\"a b\", '')", Expr::Contains { column: "a b".into(), needle: String::new() })]
    #[case("contains = 1", eq("contains", 1))]
    #[case("\"and\" = 1", eq("and", 1))]
    #[case("\"\" = 1", eq("", 1))]
    #[case("_x9 = 1", eq("_x9", 1))]
    #[case("CamelCase = 1", eq("CamelCase", 1))]
    fn parses_leaves(#[case] text: &str, #[case] expected: Expr) {
        assert_eq!(parse(text).unwrap(), expected);
    }

    #[rstest]
    #[case(
        "a = 1 OR b = 2 AND c = 3",
        or(eq("a", 1), and(eq("b", 2), eq("c", 3)))
    )]
    #[case(
        "a = 1 AND b = 2 OR c = 3",
        or(and(eq("a", 1), eq("b", 2)), eq("c", 3))
    )]
    #[case("NOT a = 1 AND b = 2", and(not(eq("a", 1)), eq("b", 2)))]
    #[case("NOT (a = 1 AND b = 2)", not(and(eq("a", 1), eq("b", 2))))]
    #[case(
        "(a = 1 OR b = 2) AND c = 3",
        and(or(eq("a", 1), eq("b", 2)), eq("c", 3))
    )]
    #[case("not not a = 1", not(not(eq("a", 1))))]
    #[case("((a = 1))", eq("a", 1))]
    #[case(
        "a = 1 and b = 2 And c = 3",
        and(eq("a", 1), and(eq("b", 2), eq("c", 3)))
    )]
    #[case(
        "a = 1 OR b = 2 OR c = 3 OR d = 4",
        or(or(eq("a", 1), eq("b", 2)), or(eq("c", 3), eq("d", 4)))
    )]
    #[case("NOT x IN (1) AND x NOT IN (2)", and(
        not(Expr::InList { column: "x".into(), values: vec![Literal::Int(1)], negated: false }),
        Expr::InList { column: "x".into(), values: vec![Literal::Int(2)], negated: true }))]
    fn respects_precedence(#[case] text: &str, #[case] expected: Expr) {
        assert_eq!(parse(text).unwrap(), expected);
    }

    #[rstest]
    #[case("id = ", 6, "expected a literal after '=', found end of input")]
    #[case("name = 'x' AND id = ", 21, "expected a literal after '='")]
    #[case("a = 1 b = 2", 7, "expected AND, OR or end of input, found 'b'")]
    #[case("(a = 1", 7, "expected ')' or an operator")]
    #[case("a = 1)", 6, "expected AND, OR or end of input, found ')'")]
    #[case("a IN ()", 7, "expected a literal in the IN list, found ')'")]
    #[case("a IN (1,)", 9, "expected a literal in the IN list")]
    #[case("a IN 1", 6, "expected '(' after IN")]
    #[case("a = null", 5, "IS NULL")]
    #[case("a IS NOT 5", 10, "expected NULL after IS")]
    #[case("1 = 2", 5, "expected a column name after '='")]
    #[case("a % 0 = 1", 5, "non-zero divisor")]
    #[case("a % 2 = 1.5", 9, "expected an integer literal after '='")]
    #[case("'x' = a % 2", 1, "expected an integer literal on the other side")]
    #[case("a % b = 1", 5, "expected an integer literal after '%'")]
    #[case("contains(a 'x')", 12, "expected ',' after the column in contains()")]
    #[case("contains(a, b)", 13, "expected a string literal in contains()")]
    #[case("AND a = 1", 1, "expected a column name, a literal, NOT or '('")]
    #[case("a NOT LIKE 'x'", 7, "expected IN after NOT")]
    #[case("a = - 'x'", 7, "expected a number after '-'")]
    #[case("a == 1", 4, "expected a literal after '='")]
    #[case("a", 2, "expected a comparison operator, IN, IS or '%'")]
    #[case("'é' = x AND", 12, "expected a column name, a literal, NOT or '('")]
    #[case("a = 9223372036854775808", 5, "out of range")]
    #[case("a = -9223372036854775809", 5, "out of range")]
    #[case("", 1, "found end of input")]
    fn reports_syntax_errors(#[case] text: &str, #[case] pos: usize, #[case] message: &str) {
        let err = parse(text).unwrap_err();
        let Error::InvalidInput { message: got } = &err else {
            panic!("{text:?}: expected InvalidInput, got {err:?}");
        };
        let prefix = format!("syntax error at position {pos}: ");
        assert!(got.starts_with(&prefix), "{text:?}: {got}");
        assert!(got.contains(message), "{text:?}: {got}");
    }

    #[test]
    fn nesting_up_to_the_limit_parses() {
        let text = format!("{}a = 1{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        assert_eq!(parse(&text).unwrap(), eq("a", 1));
        let mut expected = eq("a", 1);
        for _ in 0..MAX_DEPTH {
            expected = not(expected);
        }
        assert_eq!(
            parse(&format!("{}a = 1", "NOT ".repeat(MAX_DEPTH))).unwrap(),
            expected
        );
    }

    #[rstest]
    #[case(format!("{}a = 1{}", "(".repeat(MAX_DEPTH + 1), ")".repeat(MAX_DEPTH + 1)), MAX_DEPTH + 1)]
    #[case(format!("{}a = 1", "NOT ".repeat(MAX_DEPTH + 1)), 4 * MAX_DEPTH + 1)]
    #[case(format!("{}a = 1", "NOT (".repeat(MAX_DEPTH)), 5 * (MAX_DEPTH / 2) + 1)]
    #[case("(".repeat(60_000), MAX_DEPTH + 1)]
    fn nesting_beyond_the_limit_is_an_error(#[case] text: String, #[case] pos: usize) {
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "syntax error at position {pos}: expression nested deeper than {MAX_DEPTH} levels"
            )),
            "{err}"
        );
    }

    #[test]
    fn long_chains_build_shallow_trees() {
        let terms = 9_000;
        let text = vec!["a=1"; terms].join(" OR ");
        let expr = parse(&text).unwrap();
        assert_eq!(height(&expr), 15); // ceil(log2(9_000)) + 1
        assert_eq!(expr.leaves().len(), terms);
    }

    #[test]
    fn input_size_is_limited() {
        let mut text = "a = 1".to_string();
        text.push_str(&" ".repeat(MAX_INPUT_BYTES - text.len()));
        assert_eq!(parse(&text).unwrap(), eq("a", 1));
        text.push(' ');
        let err = parse(&text).unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
        assert!(err.to_string().contains("limit is 65536 bytes"), "{err}");
    }
}
