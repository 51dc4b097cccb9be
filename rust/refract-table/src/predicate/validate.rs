//! Checks a predicate against a schema: every column exists and every literal
//! and operation fits the column's type.

use super::expr::{Expr, Literal};
use arrow_schema::{DataType, Schema};
use refract_core::{Error, Result};

/// How predicates treat a column type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ColumnKind {
    /// Int8..Int64, UInt8..UInt64.
    Integer,
    /// Float32, Float64.
    Float,
    /// Utf8, LargeUtf8, Utf8View.
    String,
    /// Boolean.
    Boolean,
    /// Anything else: only `IS [NOT] NULL` applies.
    Other,
}

impl ColumnKind {
    pub(crate) fn of(data_type: &DataType) -> Self {
        use DataType::*;
        match data_type {
            Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 => Self::Integer,
            Float32 | Float64 => Self::Float,
            Utf8 | LargeUtf8 | Utf8View => Self::String,
            Boolean => Self::Boolean,
            // Evaluation decodes dictionaries to their value type first.
            Dictionary(_, value_type) => Self::of(value_type),
            _ => Self::Other,
        }
    }
}

impl Expr {
    /// Checks the predicate against `schema`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the column for an unknown column, a
    /// literal of the wrong type (a string against an integer column), `%` on a
    /// non-integer column, `contains` on a non-string column, a zero divisor,
    /// an empty IN list or a non-finite float literal.
    pub fn validate(&self, schema: &Schema) -> Result<()> {
        for leaf in self.leaves() {
            validate_leaf(leaf, schema)?;
        }
        Ok(())
    }
}

fn column_type<'a>(schema: &'a Schema, column: &str) -> Result<&'a DataType> {
    schema
        .column_with_name(column)
        .map(|(_, field)| field.data_type())
        .ok_or_else(|| Error::invalid_input(format!("predicate names unknown column '{column}'")))
}

fn validate_leaf(leaf: &Expr, schema: &Schema) -> Result<()> {
    let Some(column) = leaf.leaf_column() else {
        return Ok(());
    };
    let data_type = column_type(schema, column)?;
    let kind = ColumnKind::of(data_type);
    match leaf {
        Expr::Compare { value, .. } => check_literal(column, data_type, value),
        Expr::Modulo { divisor, .. } => {
            if kind != ColumnKind::Integer {
                return Err(Error::invalid_input(format!(
                    "'%' needs an integer column, but '{column}' is {data_type}"
                )));
            }
            if *divisor == 0 {
                return Err(Error::invalid_input(format!(
                    "'{column}' % 0: the divisor must not be zero"
                )));
            }
            Ok(())
        }
        Expr::InList { values, .. } => {
            if values.is_empty() {
                return Err(Error::invalid_input(format!(
                    "the IN list for column '{column}' is empty"
                )));
            }
            values
                .iter()
                .try_for_each(|value| check_literal(column, data_type, value))
        }
        Expr::IsNull { .. } => Ok(()),
        Expr::Contains { .. } => {
            if kind != ColumnKind::String {
                return Err(Error::invalid_input(format!(
                    "contains() needs a string column, but '{column}' is {data_type}"
                )));
            }
            Ok(())
        }
        Expr::And(..) | Expr::Or(..) | Expr::Not(..) => Ok(()),
    }
}

fn check_literal(column: &str, data_type: &DataType, value: &Literal) -> Result<()> {
    if let Literal::Float(f) = value {
        if !f.is_finite() {
            return Err(Error::invalid_input(format!(
                "float literal {f} compared with '{column}' is not finite"
            )));
        }
    }
    let fits = matches!(
        (ColumnKind::of(data_type), value),
        (
            ColumnKind::Integer | ColumnKind::Float,
            Literal::Int(_) | Literal::Float(_)
        ) | (ColumnKind::String, Literal::Str(_))
            | (ColumnKind::Boolean, Literal::Bool(_))
    );
    if fits {
        Ok(())
    } else {
        Err(Error::invalid_input(format!(
            "cannot compare column '{column}' of type {data_type} with the literal {value}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use crate::predicate::{parse, CompareOp, Expr, Literal};
    use arrow_schema::{DataType, Field, Schema};
    use rstest::rstest;

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("i", DataType::Int32, true),
            Field::new("u", DataType::UInt64, true),
            Field::new("f", DataType::Float32, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("ls", DataType::LargeUtf8, true),
            Field::new("b", DataType::Boolean, true),
            Field::new("d", DataType::Date32, true),
        ])
    }

    #[rstest]
    #[case("i = 1 AND u >= 2.5 AND f < -3 AND s = 'x' AND ls != '' AND b = true")]
    #[case("i % 3 = 1 AND u % -3 = 0")]
    #[case("i IN (1, 2.5) AND s NOT IN ('a') AND b IN (false)")]
    #[case("d IS NULL OR i IS NOT NULL")]
    #[case("contains(s, 'a') OR contains(ls, 'b')")]
    fn accepts(#[case] text: &str) {
        parse(text).unwrap().validate(&schema()).unwrap();
    }

    #[rstest]
    #[case("nope = 1", "unknown column 'nope'")]
    #[case("i = 1 AND (NOT missing IS NULL)", "unknown column 'missing'")]
    #[case(
        "i = 'x'",
        "cannot compare column 'i' of type Int32 with the literal 'x'"
    )]
    #[case("s = 1", "cannot compare column 's' of type Utf8 with the literal 1")]
    #[case("b = 1", "cannot compare column 'b' of type Boolean")]
    #[case("f = true", "cannot compare column 'f' of type Float32")]
    #[case("i IN (1, 'x')", "cannot compare column 'i'")]
    #[case("d = 1", "cannot compare column 'd' of type Date32")]
    #[case("f % 2 = 1", "'%' needs an integer column, but 'f' is Float32")]
    #[case("s % 2 = 1", "'%' needs an integer column, but 's' is Utf8")]
    #[case(
        "contains(i, 'x')",
        "contains() needs a string column, but 'i' is Int32"
    )]
    fn rejects(#[case] text: &str, #[case] message: &str) {
        let err = parse(text).unwrap().validate(&schema()).unwrap_err();
        assert!(
            matches!(err, refract_core::Error::InvalidInput { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains(message), "{err}");
    }

    #[rstest]
    #[case(Expr::Modulo { column: "i".into(), divisor: 0, op: CompareOp::Eq, value: 0 }, "divisor must not be zero")]
    #[case(Expr::InList { column: "i".into(), values: vec![], negated: false }, "IN list for column 'i' is empty")]
    #[case(Expr::Compare { column: "f".into(), op: CompareOp::Lt, value: Literal::Float(f64::NAN) }, "is not finite")]
    fn rejects_hand_built(#[case] expr: Expr, #[case] message: &str) {
        let err = expr.validate(&schema()).unwrap_err();
        assert!(err.to_string().contains(message), "{err}");
    }
}
