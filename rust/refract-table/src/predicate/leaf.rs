//! Evaluates one leaf (comparison, `%`, IN, IS NULL, contains) on a column
//! with Arrow kernels, returning a three-valued mask: null where the column
//! value is null.

use super::expr::{CompareOp, Expr, Literal};
use super::numeric::{self, Target};
use arrow::compute::kernels::cmp;
use arrow::compute::{cast, contains, is_not_null, is_null, or_kleene};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type,
    UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Datum, Float64Array, Int64Array, LargeStringArray,
    PrimitiveArray, RecordBatch, StringArray, StringViewArray,
};
use arrow_schema::{ArrowError, DataType};
use refract_core::{Error, Result};

fn arrow_error(e: ArrowError) -> Error {
    Error::external("evaluating predicate", e)
}

/// Evaluates a leaf of an already validated predicate.
pub(crate) fn evaluate_leaf(leaf: &Expr, batch: &RecordBatch) -> Result<BooleanArray> {
    let column = leaf
        .leaf_column()
        .ok_or_else(|| Error::invalid_input("AND/OR/NOT is not a leaf predicate"))?;
    let array = batch.column_by_name(column).ok_or_else(|| {
        Error::invalid_input(format!("predicate names unknown column '{column}'"))
    })?;
    let array = &decode_dictionary(array)?;
    match leaf {
        Expr::Compare { op, value, .. } => compare(array, *op, value),
        Expr::Modulo {
            divisor, op, value, ..
        } => {
            let remainders = remainders(array, *divisor)?;
            apply(*op, &remainders, &Int64Array::new_scalar(*value))
        }
        Expr::InList {
            values, negated, ..
        } => in_list(array, values, *negated),
        Expr::IsNull { negated: false, .. } => is_null(array).map_err(arrow_error),
        Expr::IsNull { negated: true, .. } => is_not_null(array).map_err(arrow_error),
        Expr::Contains { needle, .. } => substring(array, needle),
        Expr::And(..) | Expr::Or(..) | Expr::Not(..) => {
            Err(Error::invalid_input("AND/OR/NOT is not a leaf predicate"))
        }
    }
}

/// A dictionary-encoded column as a plain array of its values, so every
/// kernel below (and `IS NULL`, which must see null values, not only null
/// keys) sees one representation.
fn decode_dictionary(array: &ArrayRef) -> Result<ArrayRef> {
    match array.data_type() {
        DataType::Dictionary(_, value_type) => cast(array, value_type).map_err(arrow_error),
        _ => Ok(array.clone()),
    }
}

fn apply(op: CompareOp, lhs: &dyn Datum, rhs: &dyn Datum) -> Result<BooleanArray> {
    let kernel = match op {
        CompareOp::Eq => cmp::eq,
        CompareOp::NotEq => cmp::neq,
        CompareOp::Lt => cmp::lt,
        CompareOp::LtEq => cmp::lt_eq,
        CompareOp::Gt => cmp::gt,
        CompareOp::GtEq => cmp::gt_eq,
    };
    kernel(lhs, rhs).map_err(arrow_error)
}

/// `value` for every row, null where `array` is null.
fn constant(array: &dyn Array, value: bool) -> BooleanArray {
    let values = if value {
        arrow::buffer::BooleanBuffer::new_set(array.len())
    } else {
        arrow::buffer::BooleanBuffer::new_unset(array.len())
    };
    BooleanArray::new(values, array.logical_nulls())
}

fn type_mismatch(array: &dyn Array, literal: &Literal) -> Error {
    Error::invalid_input(format!(
        "cannot compare a {} column with the literal {literal}",
        array.data_type()
    ))
}

fn compare(array: &ArrayRef, op: CompareOp, literal: &Literal) -> Result<BooleanArray> {
    match (array.data_type(), literal) {
        (DataType::Int8, _) => compare_integer::<Int8Type>(array, op, literal),
        (DataType::Int16, _) => compare_integer::<Int16Type>(array, op, literal),
        (DataType::Int32, _) => compare_integer::<Int32Type>(array, op, literal),
        (DataType::Int64, _) => compare_integer::<Int64Type>(array, op, literal),
        (DataType::UInt8, _) => compare_integer::<UInt8Type>(array, op, literal),
        (DataType::UInt16, _) => compare_integer::<UInt16Type>(array, op, literal),
        (DataType::UInt32, _) => compare_integer::<UInt32Type>(array, op, literal),
        (DataType::UInt64, _) => compare_integer::<UInt64Type>(array, op, literal),
        (DataType::Float32 | DataType::Float64, _) => compare_float(array, op, literal),
        (DataType::Utf8, Literal::Str(s)) => apply(op, array, &StringArray::new_scalar(s)),
        (DataType::LargeUtf8, Literal::Str(s)) => {
            apply(op, array, &LargeStringArray::new_scalar(s))
        }
        (DataType::Utf8View, Literal::Str(s)) => apply(op, array, &StringViewArray::new_scalar(s)),
        (DataType::Boolean, Literal::Bool(b)) => apply(op, array, &BooleanArray::new_scalar(*b)),
        _ => Err(type_mismatch(array, literal)),
    }
}

/// Compares in the column's own type; a literal that the type cannot hold
/// decides every row without touching the values (see [`numeric`]).
fn compare_integer<T>(array: &ArrayRef, op: CompareOp, literal: &Literal) -> Result<BooleanArray>
where
    T: ArrowPrimitiveType,
    T::Native: TryFrom<i128>,
{
    let target =
        numeric::integer_target(op, literal).ok_or_else(|| type_mismatch(array, literal))?;
    let narrowed = match target {
        Target::Constant(answer) => Target::Constant(answer),
        Target::Compare(op, bound) => numeric::narrow::<T::Native>(op, bound),
    };
    match narrowed {
        Target::Constant(answer) => Ok(constant(array, answer)),
        Target::Compare(op, value) => apply(op, array, &PrimitiveArray::<T>::new_scalar(value)),
    }
}

/// Compares as f64 after [`numeric::canonical_float`], so `-0.0 = 0` and NaN
/// is one value above all numbers; Float32 widens to f64 exactly.
fn compare_float(array: &ArrayRef, op: CompareOp, literal: &Literal) -> Result<BooleanArray> {
    let target = numeric::float_target(op, literal).ok_or_else(|| type_mismatch(array, literal))?;
    let (op, value) = match target {
        Target::Constant(answer) => return Ok(constant(array, answer)),
        Target::Compare(op, value) => (op, value),
    };
    let canonical: Float64Array = match array.data_type() {
        DataType::Float32 => array
            .as_primitive::<Float32Type>()
            .unary(|x| numeric::canonical_float(f64::from(x))),
        DataType::Float64 => array
            .as_primitive::<Float64Type>()
            .unary(numeric::canonical_float),
        other => {
            return Err(Error::invalid_input(format!(
                "expected a float column, found {other}"
            )))
        }
    };
    apply(op, &canonical, &Float64Array::new_scalar(value))
}

/// `x % divisor` for every value of an integer column, as i64 (remainder
/// has the sign of the dividend; `i64::MIN % -1` is 0).
fn remainders(array: &ArrayRef, divisor: i64) -> Result<Int64Array> {
    if divisor == 0 {
        return Err(Error::invalid_input("the divisor of '%' must not be zero"));
    }
    match array.data_type() {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            let wide = cast(array, &DataType::Int64).map_err(arrow_error)?;
            Ok(wide
                .as_primitive::<Int64Type>()
                .unary(|x| x.wrapping_rem(divisor)))
        }
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            let wide = cast(array, &DataType::UInt64).map_err(arrow_error)?;
            // For a non-negative dividend the truncated remainder is
            // `x mod |divisor|`, below |divisor| <= 2^63, so it fits in i64.
            let modulus = divisor.unsigned_abs();
            Ok(wide
                .as_primitive::<UInt64Type>()
                .unary(|x| (x % modulus) as i64))
        }
        other => Err(Error::invalid_input(format!(
            "'%' needs an integer column, found {other}"
        ))),
    }
}

/// `x IN (v1, v2, …)` as `x = v1 OR x = v2 OR …` under three-valued logic;
/// the literals are never null, so the result is null exactly where `x` is.
fn in_list(array: &ArrayRef, values: &[Literal], negated: bool) -> Result<BooleanArray> {
    let mut any = BooleanArray::new(arrow::buffer::BooleanBuffer::new_unset(array.len()), None);
    for value in values {
        let hit = compare(array, CompareOp::Eq, value)?;
        any = or_kleene(&any, &hit).map_err(arrow_error)?;
    }
    if negated {
        arrow::compute::not(&any).map_err(arrow_error)
    } else {
        Ok(any)
    }
}

fn substring(array: &ArrayRef, needle: &str) -> Result<BooleanArray> {
    let result = match array.data_type() {
        DataType::Utf8 => contains(array, &StringArray::new_scalar(needle)),
        DataType::LargeUtf8 => contains(array, &LargeStringArray::new_scalar(needle)),
        DataType::Utf8View => contains(array, &StringViewArray::new_scalar(needle)),
        other => {
            return Err(Error::invalid_input(format!(
                "contains() needs a string column, found {other}"
            )))
        }
    };
    result.map_err(arrow_error)
}
