//! Turning a predicate into an index question: split the top-level `AND`
//! conjuncts and map each one an index could answer to an [`IndexQuery`].

use std::ops::Bound;

use refract_table::predicate::{CompareOp, Expr};

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

/// Every indexable conjunct of `conjuncts`, in order.
pub fn indexable(conjuncts: &[Expr]) -> Vec<IndexableConjunct> {
    conjuncts
        .iter()
        .enumerate()
        .filter_map(|(position, c)| {
            index_query(c).map(|(column, query)| IndexableConjunct {
                position,
                column,
                query,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use refract_table::predicate::{parse, Literal};
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
