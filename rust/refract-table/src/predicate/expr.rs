//! The typed predicate tree and its canonical text form.
//!
//! Every tree operation here is iterative (explicit stacks), so a deep
//! expression built in code cannot overflow the call stack while it is
//! printed or inspected.

use std::collections::BTreeSet;
use std::fmt;

/// A comparison operator. A comparison is always stored as `column op literal`;
/// the parser rewrites `literal op column` with [`CompareOp::flip`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    /// `=`
    Eq,
    /// `!=` (also written `<>`)
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
}

impl CompareOp {
    /// The operator that gives the same answer with its operands swapped
    /// (`a < b` ⇔ `b > a`).
    pub fn flip(self) -> Self {
        match self {
            CompareOp::Eq => CompareOp::Eq,
            CompareOp::NotEq => CompareOp::NotEq,
            CompareOp::Lt => CompareOp::Gt,
            CompareOp::LtEq => CompareOp::GtEq,
            CompareOp::Gt => CompareOp::Lt,
            CompareOp::GtEq => CompareOp::LtEq,
        }
    }

    /// The operator's canonical spelling.
    pub fn symbol(self) -> &'static str {
        match self {
            CompareOp::Eq => "=",
            CompareOp::NotEq => "!=",
            CompareOp::Lt => "<",
            CompareOp::LtEq => "<=",
            CompareOp::Gt => ">",
            CompareOp::GtEq => ">=",
        }
    }
}

impl fmt::Display for CompareOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.symbol())
    }
}

/// A literal value. There is no null literal: nulls are tested with `IS NULL`.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// An integer, e.g. `42` or `-7`.
    Int(i64),
    /// A finite float, e.g. `1.5`, `-2e10`.
    Float(f64),
    /// A string, written `'it''s'` (a doubled quote escapes a quote).
    Str(String),
    /// `true` or `false`.
    Bool(bool),
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Int(v) => write!(f, "{v}"),
            // `Debug` prints the shortest text that parses back to the same
            // bits and always marks a float (`1.0`, `1e300`), unlike `Display`
            // which prints `1` for 1.0.
            Literal::Float(v) => write!(f, "{v:?}"),
            Literal::Str(s) => write!(f, "'{}'", s.replace('\'', "''")),
            Literal::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// A parsed predicate. See the [module docs](super) for the language.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// `column op value`.
    Compare {
        /// The column.
        column: String,
        /// The comparison.
        op: CompareOp,
        /// The literal compared with.
        value: Literal,
    },
    /// `column % divisor op value` on an integer column (remainder has the
    /// sign of the dividend, as in Rust and SQL: `-7 % 3 = -1`).
    Modulo {
        /// The integer column.
        column: String,
        /// The divisor (non-zero).
        divisor: i64,
        /// The comparison of the remainder.
        op: CompareOp,
        /// The value the remainder is compared with.
        value: i64,
    },
    /// `column IN (values…)`, or `NOT IN` when `negated`.
    InList {
        /// The column.
        column: String,
        /// The listed values.
        values: Vec<Literal>,
        /// `NOT IN`.
        negated: bool,
    },
    /// `column IS NULL`, or `IS NOT NULL` when `negated`.
    IsNull {
        /// The column.
        column: String,
        /// `IS NOT NULL`.
        negated: bool,
    },
    /// `contains(column, 'needle')`: substring test on a string column.
    Contains {
        /// The string column.
        column: String,
        /// The substring looked for.
        needle: String,
    },
    /// `left AND right`.
    And(Box<Expr>, Box<Expr>),
    /// `left OR right`.
    Or(Box<Expr>, Box<Expr>),
    /// `NOT inner`.
    Not(Box<Expr>),
}

impl Expr {
    /// The column this leaf reads, or `None` for `AND`/`OR`/`NOT`.
    pub(crate) fn leaf_column(&self) -> Option<&str> {
        match self {
            Expr::Compare { column, .. }
            | Expr::Modulo { column, .. }
            | Expr::InList { column, .. }
            | Expr::IsNull { column, .. }
            | Expr::Contains { column, .. } => Some(column),
            Expr::And(..) | Expr::Or(..) | Expr::Not(..) => None,
        }
    }

    /// Every leaf of the tree, left to right.
    pub(crate) fn leaves(&self) -> Vec<&Expr> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(node) = stack.pop() {
            match node {
                Expr::And(l, r) | Expr::Or(l, r) => {
                    stack.push(r);
                    stack.push(l);
                }
                Expr::Not(inner) => stack.push(inner),
                leaf => out.push(leaf),
            }
        }
        out
    }

    /// The names of all columns the predicate reads.
    pub fn columns(&self) -> BTreeSet<String> {
        self.leaves()
            .into_iter()
            .filter_map(Expr::leaf_column)
            .map(str::to_owned)
            .collect()
    }
}

/// Keywords that cannot be bare identifiers.
pub(crate) const RESERVED: [&str; 9] = [
    "and", "or", "not", "in", "is", "null", "true", "false", "contains",
];

/// Writes `name` bare when it lexes back as the same identifier, otherwise
/// double-quoted with `"` doubled.
fn write_ident(f: &mut fmt::Formatter<'_>, name: &str) -> fmt::Result {
    let mut chars = name.chars();
    let simple = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !RESERVED.iter().any(|k| k.eq_ignore_ascii_case(name));
    if simple {
        f.write_str(name)
    } else {
        write!(f, "\"{}\"", name.replace('"', "\"\""))
    }
}

fn write_leaf(f: &mut fmt::Formatter<'_>, leaf: &Expr) -> fmt::Result {
    match leaf {
        Expr::Compare { column, op, value } => {
            write_ident(f, column)?;
            write!(f, " {op} {value}")
        }
        Expr::Modulo {
            column,
            divisor,
            op,
            value,
        } => {
            write_ident(f, column)?;
            write!(f, " % {divisor} {op} {value}")
        }
        Expr::InList {
            column,
            values,
            negated,
        } => {
            write_ident(f, column)?;
            f.write_str(if *negated { " NOT IN (" } else { " IN (" })?;
            for (i, v) in values.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{v}")?;
            }
            f.write_str(")")
        }
        Expr::IsNull { column, negated } => {
            write_ident(f, column)?;
            f.write_str(if *negated { " IS NOT NULL" } else { " IS NULL" })
        }
        Expr::Contains { column, needle } => {
            f.write_str("contains(")?;
            write_ident(f, column)?;
            write!(f, ", {})", Literal::Str(needle.clone()))
        }
        // Only leaves reach here (see `fmt` below).
        Expr::And(..) | Expr::Or(..) | Expr::Not(..) => Ok(()),
    }
}

/// One step of the iterative printer.
enum Piece<'a> {
    Node(&'a Expr),
    /// A child of AND/OR: parenthesised when it is itself AND/OR, so the
    /// printed text reparses to exactly this tree shape.
    Operand(&'a Expr),
    Text(&'static str),
}

/// Canonical text: keywords upper-case, `!=` for not-equal, floats always
/// with a `.` or exponent, identifiers quoted only when needed, and every
/// AND/OR operand that is itself AND/OR in parentheses. `parse` of this text
/// returns an equal `Expr` for every expression the language can spell: the
/// exceptions are hand-built trees with a non-finite float, an empty IN list
/// or a zero divisor, which [`Expr::validate`] rejects anyway.
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut stack = vec![Piece::Node(self)];
        while let Some(piece) = stack.pop() {
            match piece {
                Piece::Text(t) => f.write_str(t)?,
                Piece::Operand(e @ (Expr::And(..) | Expr::Or(..))) => {
                    stack.push(Piece::Text(")"));
                    stack.push(Piece::Node(e));
                    stack.push(Piece::Text("("));
                }
                Piece::Operand(e) | Piece::Node(e) => match e {
                    Expr::And(l, r) | Expr::Or(l, r) => {
                        let keyword = if matches!(e, Expr::And(..)) {
                            " AND "
                        } else {
                            " OR "
                        };
                        stack.push(Piece::Operand(r));
                        stack.push(Piece::Text(keyword));
                        stack.push(Piece::Operand(l));
                    }
                    Expr::Not(inner) => {
                        f.write_str("NOT ")?;
                        stack.push(Piece::Operand(inner));
                    }
                    leaf => write_leaf(f, leaf)?,
                },
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn cmp(column: &str, op: CompareOp, value: Literal) -> Expr {
        Expr::Compare {
            column: column.into(),
            op,
            value,
        }
    }

    #[rstest]
    #[case(cmp("a", CompareOp::Eq, Literal::Int(-3)), "a = -3")]
    #[case(cmp("a", CompareOp::NotEq, Literal::Float(1.0)), "a != 1.0")]
    #[case(cmp("a", CompareOp::Lt, Literal::Float(1e300)), "a < 1e300")]
    #[case(cmp("and", CompareOp::GtEq, Literal::Str("it's".into())), "\"and\" >= 'it''s'")]
    #[case(
        cmp("my col", CompareOp::LtEq, Literal::Bool(true)),
        "\"my col\" <= true"
    )]
    #[case(cmp("q\"x", CompareOp::Gt, Literal::Bool(false)), "\"q\"\"x\" > false")]
    #[case(Expr::Modulo { column: "id".into(), divisor: -10, op: CompareOp::Eq, value: -3 }, "id % -10 = -3")]
    #[case(Expr::InList { column: "x".into(), values: vec![Literal::Int(1), Literal::Str("a".into())], negated: true }, "x NOT IN (1, 'a')")]
    #[case(Expr::IsNull { column: "x".into(), negated: false }, "x IS NULL")]
    #[case(Expr::IsNull { column: "x".into(), negated: true }, "x IS NOT NULL")]
    #[case(Expr::Contains { column: "Contains".into(), needle: "a'b".into() }, "contains(\"Contains\", 'a''b')")]
    fn displays_leaves(#[case] expr: Expr, #[case] text: &str) {
        assert_eq!(expr.to_string(), text);
    }

    #[test]
    fn displays_tree_with_parentheses_only_around_and_or_operands() {
        let a = || Box::new(cmp("a", CompareOp::Eq, Literal::Int(1)));
        let b = || Box::new(cmp("b", CompareOp::Eq, Literal::Int(2)));
        let or = Expr::Or(a(), b());
        let expr = Expr::And(
            Box::new(Expr::Not(Box::new(or.clone()))),
            Box::new(Expr::And(Box::new(or), Box::new(Expr::Not(a())))),
        );
        assert_eq!(
            expr.to_string(),
            "NOT (a = 1 OR b = 2) AND ((a = 1 OR b = 2) AND NOT a = 1)"
        );
    }

    #[test]
    fn columns_are_collected_from_every_leaf() {
        let expr = Expr::Or(
            Box::new(Expr::Not(Box::new(Expr::IsNull {
                column: "z".into(),
                negated: false,
            }))),
            Box::new(Expr::And(
                Box::new(cmp("a", CompareOp::Eq, Literal::Int(1))),
                Box::new(cmp("z", CompareOp::Eq, Literal::Int(1))),
            )),
        );
        let cols: Vec<String> = expr.columns().into_iter().collect();
        assert_eq!(cols, vec!["a".to_string(), "z".to_string()]);
    }

    #[test]
    fn deep_tree_prints_without_recursion() {
        let mut expr = cmp("a", CompareOp::Eq, Literal::Int(1));
        for _ in 0..100_000 {
            expr = Expr::Not(Box::new(expr));
        }
        let text = expr.to_string();
        assert_eq!(text.len(), 100_000 * 4 + "a = 1".len());
        // Dismantle iteratively: the default drop glue recurses per level.
        while let Expr::Not(inner) = expr {
            expr = *inner;
        }
    }
}
