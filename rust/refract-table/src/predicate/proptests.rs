//! Property tests over the whole language: canonical text round trips,
//! arbitrary input never panics, and evaluation agrees with a row-by-row
//! three-valued reference.

use super::{parse, CompareOp, Expr, Literal};
use arrow_array::{Array, ArrayRef, Int32Array, RecordBatch, StringArray};
use proptest::prelude::*;
use std::sync::Arc;

fn arb_op() -> impl Strategy<Value = CompareOp> {
    prop_oneof![
        Just(CompareOp::Eq),
        Just(CompareOp::NotEq),
        Just(CompareOp::Lt),
        Just(CompareOp::LtEq),
        Just(CompareOp::Gt),
        Just(CompareOp::GtEq),
    ]
}

fn arb_column() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z_][a-zA-Z0-9_]{0,6}",
        Just("and".to_string()),
        Just("NULL".to_string()),
        Just("contains".to_string()),
        ".{0,6}",
    ]
}

fn arb_literal() -> impl Strategy<Value = Literal> {
    prop_oneof![
        any::<i64>().prop_map(Literal::Int),
        prop_oneof![
            any::<f64>().prop_filter("finite", |f| f.is_finite()),
            Just(0.0),
            Just(-0.0),
            Just(1e300),
            Just(f64::MIN_POSITIVE / 4.0),
        ]
        .prop_map(Literal::Float),
        ".{0,8}".prop_map(Literal::Str),
        any::<bool>().prop_map(Literal::Bool),
    ]
}

fn arb_leaf() -> impl Strategy<Value = Expr> {
    prop_oneof![
        (arb_column(), arb_op(), arb_literal()).prop_map(|(column, op, value)| Expr::Compare {
            column,
            op,
            value
        }),
        (
            arb_column(),
            any::<i64>().prop_filter("non-zero", |d| *d != 0),
            arb_op(),
            any::<i64>()
        )
            .prop_map(|(column, divisor, op, value)| Expr::Modulo {
                column,
                divisor,
                op,
                value
            }),
        (
            arb_column(),
            prop::collection::vec(arb_literal(), 1..4),
            any::<bool>()
        )
            .prop_map(|(column, values, negated)| Expr::InList {
                column,
                values,
                negated
            }),
        (arb_column(), any::<bool>())
            .prop_map(|(column, negated)| Expr::IsNull { column, negated }),
        (arb_column(), ".{0,8}").prop_map(|(column, needle)| Expr::Contains { column, needle }),
    ]
}

fn arb_expr() -> impl Strategy<Value = Expr> {
    arb_leaf().prop_recursive(6, 48, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(l, r)| Expr::And(Box::new(l), Box::new(r))),
            (inner.clone(), inner.clone()).prop_map(|(l, r)| Expr::Or(Box::new(l), Box::new(r))),
            inner.prop_map(|e| Expr::Not(Box::new(e))),
        ]
    })
}

/// Strings built from the language's own pieces, to reach deep into the parser.
fn token_soup() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("a"),
        Just("\"q\"\""),
        Just("'s''"),
        Just("1"),
        Just("-"),
        Just("2.5e"),
        Just(".5"),
        Just("("),
        Just(")"),
        Just(","),
        Just("%"),
        Just("="),
        Just("!="),
        Just("<>"),
        Just("<"),
        Just(">="),
        Just("AND"),
        Just("or"),
        Just("NOT"),
        Just("IN"),
        Just("IS"),
        Just("NULL"),
        Just("true"),
        Just("contains"),
        Just("é"),
        Just(" "),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.join(" "))
}

/// Reference for a single i32/utf8 row under three-valued logic.
fn reference(expr: &Expr, n: Option<i32>, s: Option<&str>) -> Option<bool> {
    match expr {
        Expr::Compare {
            op,
            value: Literal::Int(v),
            ..
        } => n.map(|n| holds(*op, i64::from(n).cmp(v))),
        Expr::Compare {
            op,
            value: Literal::Str(v),
            ..
        } => s.map(|s| holds(*op, s.as_bytes().cmp(v.as_bytes()))),
        Expr::Modulo {
            divisor, op, value, ..
        } => n.map(|n| holds(*op, (i64::from(n) % divisor).cmp(value))),
        Expr::InList {
            values, negated, ..
        } => {
            let n = n?;
            let hit = values.iter().any(|v| *v == Literal::Int(i64::from(n)));
            Some(hit != *negated)
        }
        Expr::IsNull { negated, .. } => Some(n.is_none() != *negated),
        Expr::Contains { needle, .. } => s.map(|s| s.contains(needle.as_str())),
        Expr::And(l, r) => match (reference(l, n, s), reference(r, n, s)) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        },
        Expr::Or(l, r) => match (reference(l, n, s), reference(r, n, s)) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        },
        Expr::Not(inner) => reference(inner, n, s).map(|b| !b),
        Expr::Compare { .. } => None,
    }
}

fn holds(op: CompareOp, ord: std::cmp::Ordering) -> bool {
    use std::cmp::Ordering::*;
    match op {
        CompareOp::Eq => ord == Equal,
        CompareOp::NotEq => ord != Equal,
        CompareOp::Lt => ord == Less,
        CompareOp::LtEq => ord != Greater,
        CompareOp::Gt => ord == Greater,
        CompareOp::GtEq => ord != Less,
    }
}

/// Predicates over an Int32 column `n` and a Utf8 column `s`.
fn arb_typed_expr() -> impl Strategy<Value = Expr> {
    let int = -6i64..6;
    let leaf = prop_oneof![
        (arb_op(), int.clone()).prop_map(|(op, v)| Expr::Compare {
            column: "n".into(),
            op,
            value: Literal::Int(v)
        }),
        (arb_op(), "[ab]{0,2}").prop_map(|(op, v)| Expr::Compare {
            column: "s".into(),
            op,
            value: Literal::Str(v)
        }),
        (prop_oneof![-4i64..=-1, 1i64..=4], arb_op(), int.clone()).prop_map(
            |(divisor, op, value)| Expr::Modulo {
                column: "n".into(),
                divisor,
                op,
                value
            }
        ),
        (prop::collection::vec(int, 1..4), any::<bool>()).prop_map(|(v, negated)| {
            Expr::InList {
                column: "n".into(),
                values: v.into_iter().map(Literal::Int).collect(),
                negated,
            }
        }),
        any::<bool>().prop_map(|negated| Expr::IsNull {
            column: "n".into(),
            negated
        }),
        "[ab]{0,2}".prop_map(|needle| Expr::Contains {
            column: "s".into(),
            needle
        }),
    ];
    leaf.prop_recursive(5, 32, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(l, r)| Expr::And(Box::new(l), Box::new(r))),
            (inner.clone(), inner.clone()).prop_map(|(l, r)| Expr::Or(Box::new(l), Box::new(r))),
            inner.prop_map(|e| Expr::Not(Box::new(e))),
        ]
    })
}

fn arb_rows() -> impl Strategy<Value = Vec<(Option<i32>, Option<String>)>> {
    prop::collection::vec(
        (prop::option::of(-8i32..8), prop::option::of("[ab]{0,3}")),
        0..12,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn display_round_trips(expr in arb_expr()) {
        let text = expr.to_string();
        prop_assert_eq!(parse(&text).unwrap(), expr, "text: {}", text);
    }

    #[test]
    fn arbitrary_text_never_panics(text in prop_oneof![".{0,200}", token_soup()]) {
        if let Ok(expr) = parse(&text) {
            let canonical = expr.to_string();
            prop_assert_eq!(parse(&canonical).unwrap(), expr, "canonical: {}", canonical);
        }
    }

    #[test]
    fn evaluation_matches_reference(expr in arb_typed_expr(), rows in arb_rows()) {
        let n: Int32Array = rows.iter().map(|(n, _)| *n).collect();
        let s: StringArray = rows.iter().map(|(_, s)| s.as_deref()).collect();
        let batch = RecordBatch::try_from_iter([
            ("n", Arc::new(n) as ArrayRef),
            ("s", Arc::new(s) as ArrayRef),
        ])
        .unwrap();
        let mask = expr.evaluate(&batch).unwrap();
        prop_assert_eq!(mask.null_count(), 0);
        let mask: Vec<bool> = mask.values().iter().collect();
        let expected: Vec<bool> = rows
            .iter()
            .map(|(n, s)| reference(&expr, *n, s.as_deref()) == Some(true))
            .collect();
        prop_assert_eq!(mask, expected, "expr: {}", expr);
    }
}
