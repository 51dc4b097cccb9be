//! Turning a predicate into an index question: split the top-level `AND`
//! conjuncts and map each one an index could answer to an [`IndexQuery`].

use std::cmp::Ordering;
use std::ops::Bound;

use refract_table::predicate::{CompareOp, Expr, Literal};

use crate::types::IndexQuery;

/// One conjunct an index may answer.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexableConjunct {
    /// Position among the conjuncts.
    pub position: usize,
    /// The column it tests.
    pub column: String,
    /// The equivalent index question.
    pub query: IndexQuery,
}

/// The top-level `AND` conjuncts of `expr`, left to right.
pub fn conjuncts(expr: &Expr) -> Vec<Expr> {
    let mut out = Vec::new();
    let mut stack = vec![expr];
    while let Some(node) = stack.pop() {
        match node {
            Expr::And(l, r) => {
                stack.push(r);
                stack.push(l);
            }
            other => out.push(other.clone()),
        }
    }
    out
}

/// The conjunction of `parts` (`None` when empty).
pub fn and_all(parts: Vec<Expr>) -> Option<Expr> {
    parts
        .into_iter()
        .reduce(|acc, e| Expr::And(Box::new(acc), Box::new(e)))
}

/// The index question equivalent to `conjunct`, if any.
pub fn index_query(conjunct: &Expr) -> Option<(String, IndexQuery)> {
    match conjunct {
        Expr::Compare { column, op, value } => {
            let v = value.clone();
            let query = match op {
                CompareOp::Eq => IndexQuery::Equals(v),
                CompareOp::NotEq => return None,
                CompareOp::Lt => IndexQuery::Range {
                    low: Bound::Unbounded,
                    high: Bound::Excluded(v),
                },
                CompareOp::LtEq => IndexQuery::Range {
                    low: Bound::Unbounded,
                    high: Bound::Included(v),
                },
                CompareOp::Gt => IndexQuery::Range {
                    low: Bound::Excluded(v),
                    high: Bound::Unbounded,
                },
                CompareOp::GtEq => IndexQuery::Range {
                    low: Bound::Included(v),
                    high: Bound::Unbounded,
                },
            };
            Some((column.clone(), query))
        }
        Expr::InList {
            column,
            values,
            negated: false,
        } => Some((column.clone(), IndexQuery::InList(values.clone()))),
        Expr::IsNull {
            column,
            negated: false,
        } => Some((column.clone(), IndexQuery::IsNull)),
        Expr::Contains { column, needle } => {
            Some((column.clone(), IndexQuery::Contains(needle.clone())))
        }
        _ => None,
    }
}

/// Every indexable conjunct of `conjuncts`, in order. Range conjuncts on
/// one column merge into one range at the first one's position (`id >= a AND
/// id < b` asks the index for `[a, b)`, not for everything from `a` on); the
/// query rechecks the whole filter, so a merged bound only has to be implied
/// by the conjunction.
pub fn indexable(conjuncts: &[Expr]) -> Vec<IndexableConjunct> {
    let mut out: Vec<IndexableConjunct> = Vec::new();
    for (position, conjunct) in conjuncts.iter().enumerate() {
        let Some((column, query)) = index_query(conjunct) else {
            continue;
        };
        if let IndexQuery::Range { low, high } = &query {
            let earlier = out.iter_mut().find_map(|found| match &mut found.query {
                IndexQuery::Range { low, high } if found.column == column => Some((low, high)),
                _ => None,
            });
            if let Some((merged_low, merged_high)) = earlier {
                *merged_low = tighter(merged_low, low, Ordering::Greater);
                *merged_high = tighter(merged_high, high, Ordering::Less);
                continue;
            }
        }
        out.push(IndexableConjunct {
            position,
            column,
            query,
        });
    }
    out
}

/// The tighter of two bounds on one side: the one whose value compares as
/// `inward` against the other (`Greater` for lower bounds), the excluded one
/// on a tie. Values of incomparable types keep `current`.
fn tighter(current: &Bound<Literal>, other: &Bound<Literal>, inward: Ordering) -> Bound<Literal> {
    let (a, b) = match (current, other) {
        (Bound::Unbounded, _) => return other.clone(),
        (_, Bound::Unbounded) => return current.clone(),
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            (a, b)
        }
    };
    match compare(b, a) {
        Some(order) if order == inward => other.clone(),
        Some(Ordering::Equal) if matches!(other, Bound::Excluded(_)) => other.clone(),
        _ => current.clone(),
    }
}

/// Orders two literals of comparable types (ints and floats compare as numbers).
fn compare(a: &Literal, b: &Literal) -> Option<Ordering> {
    match (a, b) {
        (Literal::Int(x), Literal::Int(y)) => Some(x.cmp(y)),
        (Literal::Str(x), Literal::Str(y)) => Some(x.cmp(y)),
        (Literal::Bool(x), Literal::Bool(y)) => Some(x.cmp(y)),
        (Literal::Int(x), Literal::Float(y)) => (*x as f64).partial_cmp(y),
        (Literal::Float(x), Literal::Int(y)) => x.partial_cmp(&(*y as f64)),
        (Literal::Float(x), Literal::Float(y)) => x.partial_cmp(y),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use refract_table::predicate::parse;
    use rstest::rstest;

    #[test]
    fn splits_top_level_and_only() {
        let expr = parse("a = 1 AND (b = 2 OR c = 3) AND d > 4").unwrap();
        let parts = conjuncts(&expr);
        assert_eq!(parts.len(), 3);
        let found = indexable(&parts);
        assert_eq!(
            found
                .iter()
                .map(|f| (f.position, f.column.as_str()))
                .collect::<Vec<_>>(),
            vec![(0, "a"), (2, "d")]
        );
    }

    fn range(low: Bound<Literal>, high: Bound<Literal>) -> IndexQuery {
        IndexQuery::Range { low, high }
    }

    #[rstest]
    #[case::both_sides(
        "x >= 10 AND x < 20",
        range(Bound::Included(Literal::Int(10)), Bound::Excluded(Literal::Int(20)))
    )]
    #[case::tighter_wins(
        "x > 3 AND x >= 10 AND x <= 30 AND x < 20",
        range(Bound::Included(Literal::Int(10)), Bound::Excluded(Literal::Int(20)))
    )]
    #[case::excluded_on_tie(
        "x >= 10 AND x > 10 AND x < 20 AND x <= 20",
        range(Bound::Excluded(Literal::Int(10)), Bound::Excluded(Literal::Int(20)))
    )]
    #[case::mixed_numbers(
        "x > 2.5 AND x < 9 AND x >= 3",
        range(Bound::Included(Literal::Int(3)), Bound::Excluded(Literal::Int(9)))
    )]
    #[case::incomparable_keeps_first("x > 'a' AND x > 5", range(Bound::Excluded(Literal::Str("a".into())), Bound::Unbounded))]
    fn merges_ranges_on_one_column(#[case] text: &str, #[case] expected: IndexQuery) {
        let found = indexable(&conjuncts(&parse(text).unwrap()));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].position, found[0].column.as_str()), (0, "x"));
        assert_eq!(found[0].query, expected);
    }

    #[test]
    fn keeps_other_columns_and_equalities_apart() {
        let found = indexable(&conjuncts(
            &parse("y < 4 AND x = 2 AND x > 1 AND y > 0 AND x < 9").unwrap(),
        ));
        let shapes: Vec<(usize, &str, IndexQuery)> = found
            .iter()
            .map(|f| (f.position, f.column.as_str(), f.query.clone()))
            .collect();
        assert_eq!(
            shapes,
            vec![
                (
                    0,
                    "y",
                    range(
                        Bound::Excluded(Literal::Int(0)),
                        Bound::Excluded(Literal::Int(4))
                    )
                ),
                (1, "x", IndexQuery::Equals(Literal::Int(2))),
                (
                    2,
                    "x",
                    range(
                        Bound::Excluded(Literal::Int(1)),
                        Bound::Excluded(Literal::Int(9))
                    )
                ),
            ]
        );
    }

    #[rstest]
    #[case("x < 5", IndexQuery::Range { low: Bound::Unbounded, high: Bound::Excluded(Literal::Int(5)) })]
    #[case("5 <= x", IndexQuery::Range { low: Bound::Included(Literal::Int(5)), high: Bound::Unbounded })]
    #[case("x IN (1, 2)", IndexQuery::InList(vec![Literal::Int(1), Literal::Int(2)]))]
    #[case("x IS NULL", IndexQuery::IsNull)]
    #[case("contains(x, 'ab')", IndexQuery::Contains("ab".into()))]
    fn maps_leaves(#[case] text: &str, #[case] expected: IndexQuery) {
        let expr = parse(text).unwrap();
        assert_eq!(index_query(&expr), Some(("x".to_string(), expected)));
    }

    #[rstest]
    #[case("x != 5")]
    #[case("x NOT IN (1)")]
    #[case("x IS NOT NULL")]
    #[case("x % 2 = 0")]
    #[case("NOT x = 1")]
    fn declines_non_indexable(#[case] text: &str) {
        assert_eq!(index_query(&parse(text).unwrap()), None);
    }
}
