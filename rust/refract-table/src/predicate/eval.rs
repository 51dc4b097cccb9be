//! Evaluates a predicate tree on a batch: leaves with Arrow kernels, AND/OR/NOT
//! with Kleene (three-valued) logic, iteratively so tree depth cannot exhaust
//! the stack.

use super::expr::Expr;
use super::leaf::evaluate_leaf;
use arrow::compute::{and_kleene, not, or_kleene};
use arrow_array::{Array, BooleanArray, RecordBatch};
use refract_core::{Error, Result};

impl Expr {
    /// Evaluates the predicate on `batch` and returns one `true`/`false` per
    /// row (the returned array has no nulls).
    ///
    /// Semantics:
    /// * SQL three-valued logic: a comparison with a null value is unknown,
    ///   `NOT unknown` is unknown, `false AND unknown` is false, `true OR
    ///   unknown` is true; an unknown final result selects nothing (false).
    ///   `x NOT IN (…)` is unknown when `x` is null.
    /// * Numbers compare by value whatever the column and literal types
    ///   (`int32_col > 10000000000` is false everywhere, `int_col = 2.5` never
    ///   holds). Float32 values widen exactly to f64, so `f32_col = 0.1` is
    ///   false for the f32 nearest 0.1. Floats use PostgreSQL's order:
    ///   `-0.0 = 0.0`, NaN equals NaN and is greater than every number.
    /// * Strings compare by UTF-8 bytes; `contains` is a case-sensitive
    ///   substring test; booleans order `false < true`.
    /// * `x % n` has the sign of `x` (`-7 % 3 = -1`, `7 % -3 = 1`).
    ///
    /// The predicate is first validated against the batch's schema
    /// ([`Expr::validate`]).
    ///
    /// # Errors
    /// InvalidInput when the predicate does not fit the batch's schema (see
    /// [`Expr::validate`]); External when an Arrow kernel fails.
    pub fn evaluate(&self, batch: &RecordBatch) -> Result<BooleanArray> {
        self.validate(batch.schema().as_ref())?;
        Ok(nulls_to_false(evaluate_kleene(self, batch)?))
    }
}

/// One step of the post-order walk.
enum Step<'a> {
    Visit(&'a Expr),
    And,
    Or,
    Not,
}

/// Evaluates with three-valued logic: null where the answer is unknown.
fn evaluate_kleene(expr: &Expr, batch: &RecordBatch) -> Result<BooleanArray> {
    let mut steps = vec![Step::Visit(expr)];
    let mut results: Vec<BooleanArray> = Vec::new();
    while let Some(step) = steps.pop() {
        match step {
            Step::Visit(Expr::And(l, r)) => {
                steps.extend([Step::And, Step::Visit(r), Step::Visit(l)])
            }
            Step::Visit(Expr::Or(l, r)) => steps.extend([Step::Or, Step::Visit(r), Step::Visit(l)]),
            Step::Visit(Expr::Not(inner)) => steps.extend([Step::Not, Step::Visit(inner)]),
            Step::Visit(leaf) => results.push(evaluate_leaf(leaf, batch)?),
            Step::And => {
                let (l, r) = pop_pair(&mut results)?;
                results.push(and_kleene(&l, &r).map_err(arrow_error)?);
            }
            Step::Or => {
                let (l, r) = pop_pair(&mut results)?;
                results.push(or_kleene(&l, &r).map_err(arrow_error)?);
            }
            Step::Not => {
                let inner = pop(&mut results)?;
                results.push(not(&inner).map_err(arrow_error)?);
            }
        }
    }
    pop(&mut results)
}

fn arrow_error(e: arrow_schema::ArrowError) -> Error {
    Error::external("evaluating predicate", e)
}

/// Every operator step is pushed below the visits of its operands, so the
/// operands' results are on the stack when it runs; an empty stack would be a
/// bug in the walk above, reported rather than panicking.
fn pop(results: &mut Vec<BooleanArray>) -> Result<BooleanArray> {
    results
        .pop()
        .ok_or_else(|| Error::invalid_input("internal error: predicate evaluation stack underflow"))
}

fn pop_pair(results: &mut Vec<BooleanArray>) -> Result<(BooleanArray, BooleanArray)> {
    let right = pop(results)?;
    let left = pop(results)?;
    Ok((left, right))
}

/// Unknown (null) becomes false: a filter keeps only rows known to match.
fn nulls_to_false(mask: BooleanArray) -> BooleanArray {
    match mask.nulls() {
        Some(nulls) if mask.null_count() > 0 => {
            BooleanArray::new(mask.values() & nulls.inner(), None)
        }
        _ => BooleanArray::new(mask.values().clone(), None),
    }
}

#[cfg(test)]
mod tests {
    use crate::predicate::parse;
    use arrow_array::types::Int32Type;
    use arrow_array::{
        Array, ArrayRef, BooleanArray, DictionaryArray, Float32Array, Float64Array, Int16Array,
        Int32Array, Int64Array, Int8Array, LargeStringArray, RecordBatch, StringArray,
        StringViewArray, UInt16Array, UInt32Array, UInt64Array, UInt8Array,
    };
    use refract_core::Error;
    use rstest::rstest;
    use std::sync::Arc;

    const T: bool = true;
    const F: bool = false;

    /// Five rows; row 2 is null in every column.
    fn batch() -> RecordBatch {
        let signed = [Some(-3), Some(0), None, Some(5), Some(100)];
        let unsigned = [Some(0), Some(3), None, Some(5), Some(200)];
        let floats = [Some(-1.5), Some(-0.0), None, Some(5.0), Some(-f64::NAN)];
        let strings = [
            Some("apple"),
            Some(""),
            None,
            Some("banana"),
            Some("Apple pie"),
        ];
        let columns: Vec<(&str, ArrayRef)> = vec![
            (
                "i8",
                Arc::new(Int8Array::from_iter(
                    signed.map(|v| v.map(|v: i64| v as i8)),
                )),
            ),
            (
                "i16",
                Arc::new(Int16Array::from_iter(signed.map(|v| v.map(|v| v as i16)))),
            ),
            (
                "i32",
                Arc::new(Int32Array::from_iter(signed.map(|v| v.map(|v| v as i32)))),
            ),
            ("i64", Arc::new(Int64Array::from_iter(signed))),
            (
                "u8",
                Arc::new(UInt8Array::from_iter(
                    unsigned.map(|v| v.map(|v: u64| v as u8)),
                )),
            ),
            (
                "u16",
                Arc::new(UInt16Array::from_iter(
                    unsigned.map(|v| v.map(|v| v as u16)),
                )),
            ),
            (
                "u32",
                Arc::new(UInt32Array::from_iter(
                    unsigned.map(|v| v.map(|v| v as u32)),
                )),
            ),
            ("u64", Arc::new(UInt64Array::from_iter(unsigned))),
            (
                "f32",
                Arc::new(Float32Array::from_iter(floats.map(|v| v.map(|v| v as f32)))),
            ),
            ("f64", Arc::new(Float64Array::from_iter(floats))),
            ("s", Arc::new(StringArray::from_iter(strings))),
            ("ls", Arc::new(LargeStringArray::from_iter(strings))),
            ("vs", Arc::new(StringViewArray::from_iter(strings))),
            (
                "b",
                Arc::new(BooleanArray::from_iter([
                    Some(T),
                    Some(F),
                    None,
                    Some(T),
                    Some(F),
                ])),
            ),
        ];
        RecordBatch::try_from_iter(columns).unwrap()
    }

    fn mask_of(text: &str, batch: &RecordBatch) -> Vec<bool> {
        let mask = parse(text).unwrap().evaluate(batch).unwrap();
        assert_eq!(mask.null_count(), 0, "{text}");
        assert!(mask.nulls().is_none(), "{text}");
        mask.iter().map(|v| v.unwrap()).collect()
    }

    fn check(template: &str, column: &str, expected: [bool; 5]) {
        let text = template.replace("{c}", column);
        assert_eq!(mask_of(&text, &batch()), expected, "{text}");
    }

    // Signed columns hold [-3, 0, null, 5, 100].
    #[rstest]
    #[case("{c} = 5", [F, F, F, T, F])]
    #[case("{c} != 5", [T, T, F, F, T])]
    #[case("{c} <> 0", [T, F, F, T, T])]
    #[case("{c} < 0", [T, F, F, F, F])]
    #[case("{c} <= 0", [T, T, F, F, F])]
    #[case("{c} > 5", [F, F, F, F, T])]
    #[case("{c} >= 5", [F, F, F, T, T])]
    #[case("-1 > {c}", [T, F, F, F, F])]
    #[case("{c} > 2.5", [F, F, F, T, T])]
    #[case("{c} < -2.5", [T, F, F, F, F])]
    #[case("{c} = 5.0", [F, F, F, T, F])]
    #[case("{c} = 4.5", [F, F, F, F, F])]
    #[case("{c} != 4.5", [T, T, F, T, T])]
    #[case("{c} < 10000000000", [T, T, F, T, T])]
    #[case("{c} > 10000000000", [F, F, F, F, F])]
    #[case("{c} = -10000000000", [F, F, F, F, F])]
    #[case("{c} != 10000000000", [T, T, F, T, T])]
    #[case("{c} >= -10000000000", [T, T, F, T, T])]
    #[case("{c} < 1e300", [T, T, F, T, T])]
    #[case("{c} IN (0, 5, 7)", [F, T, F, T, F])]
    #[case("{c} IN (2.5, 100, 10000000000)", [F, F, F, F, T])]
    #[case("{c} NOT IN (0, 5)", [T, F, F, F, T])]
    #[case("NOT {c} NOT IN (0, 5)", [F, T, F, T, F])]
    #[case("{c} IS NULL", [F, F, T, F, F])]
    #[case("{c} IS NOT NULL", [T, T, F, T, T])]
    #[case("{c} % 4 = -3", [T, F, F, F, F])]
    #[case("{c} % 4 = 1", [F, F, F, T, F])]
    #[case("{c} % -4 = 0", [F, T, F, F, T])]
    fn signed_integers(
        #[values("i8", "i16", "i32", "i64")] column: &str,
        #[case] template: &str,
        #[case] expected: [bool; 5],
    ) {
        check(template, column, expected);
    }

    // Unsigned columns hold [0, 3, null, 5, 200].
    #[rstest]
    #[case("{c} = 5", [F, F, F, T, F])]
    #[case("{c} != 3", [T, F, F, T, T])]
    #[case("{c} < 3", [T, F, F, F, F])]
    #[case("{c} <= 3", [T, T, F, F, F])]
    #[case("{c} > 5", [F, F, F, F, T])]
    #[case("{c} >= 5", [F, F, F, T, T])]
    #[case("{c} > -1", [T, T, F, T, T])]
    #[case("{c} < -1", [F, F, F, F, F])]
    #[case("{c} != -1", [T, T, F, T, T])]
    #[case("{c} <= 2.5", [T, F, F, F, F])]
    #[case("{c} < 1e19", [T, T, F, T, T])]
    #[case("{c} IN (-1, 3, 200)", [F, T, F, F, T])]
    #[case("{c} % 4 = 0", [T, F, F, F, T])]
    #[case("{c} % -4 = 1", [F, F, F, T, F])]
    #[case("{c} % 4 = -1", [F, F, F, F, F])]
    fn unsigned_integers(
        #[values("u8", "u16", "u32", "u64")] column: &str,
        #[case] template: &str,
        #[case] expected: [bool; 5],
    ) {
        check(template, column, expected);
    }

    // Float columns hold [-1.5, -0.0, null, 5.0, NaN with the sign bit set].
    #[rstest]
    #[case("{c} = 0", [F, T, F, F, F])]
    #[case("{c} = -0.0", [F, T, F, F, F])]
    #[case("{c} < 0", [T, F, F, F, F])]
    #[case("{c} <= 0.0", [T, T, F, F, F])]
    #[case("{c} > 0", [F, F, F, T, T])]
    #[case("{c} >= 5", [F, F, F, T, T])]
    #[case("{c} != 5", [T, T, F, F, T])]
    #[case("{c} = -1.5", [T, F, F, F, F])]
    #[case("{c} > 1e300", [F, F, F, F, T])]
    #[case("{c} > 9007199254740993", [F, F, F, F, T])]
    #[case("{c} < 9007199254740993", [T, T, F, T, F])]
    #[case("{c} = 9007199254740993", [F, F, F, F, F])]
    #[case("{c} != 9007199254740993", [T, T, F, T, T])]
    #[case("{c} IN (5, -1.5)", [T, F, F, T, F])]
    #[case("{c} IS NULL", [F, F, T, F, F])]
    fn floats(
        #[values("f32", "f64")] column: &str,
        #[case] template: &str,
        #[case] expected: [bool; 5],
    ) {
        check(template, column, expected);
    }

    // String columns hold ["apple", "", null, "banana", "Apple pie"].
    #[rstest]
    #[case("{c} = 'apple'", [T, F, F, F, F])]
    #[case("{c} != ''", [T, F, F, T, T])]
    #[case("{c} < 'b'", [T, T, F, F, T])]
    #[case("{c} <= 'banana'", [T, T, F, T, T])]
    #[case("{c} > 'apple'", [F, F, F, T, F])]
    #[case("{c} >= 'Apple pie'", [T, F, F, T, T])]
    #[case("'banana' = {c}", [F, F, F, T, F])]
    #[case("contains({c}, 'pp')", [T, F, F, F, T])]
    #[case("contains({c}, '')", [T, T, F, T, T])]
    #[case("contains({c}, 'Apple')", [F, F, F, F, T])]
    #[case("NOT contains({c}, 'an')", [T, T, F, F, T])]
    #[case("{c} IN ('apple', 'banana')", [T, F, F, T, F])]
    #[case("{c} NOT IN ('apple', 'banana')", [F, T, F, F, T])]
    #[case("{c} IS NOT NULL", [T, T, F, T, T])]
    fn strings(
        #[values("s", "ls", "vs")] column: &str,
        #[case] template: &str,
        #[case] expected: [bool; 5],
    ) {
        check(template, column, expected);
    }

    // The boolean column holds [true, false, null, true, false].
    #[rstest]
    #[case("b = true", [T, F, F, T, F])]
    #[case("b != true", [F, T, F, F, T])]
    #[case("b < true", [F, T, F, F, T])]
    #[case("b <= false", [F, T, F, F, T])]
    #[case("b > false", [T, F, F, T, F])]
    #[case("b >= false", [T, T, F, T, T])]
    #[case("false = b", [F, T, F, F, T])]
    #[case("b IN (false)", [F, T, F, F, T])]
    #[case("NOT b = true", [F, T, F, F, T])]
    fn booleans(#[case] text: &str, #[case] expected: [bool; 5]) {
        assert_eq!(mask_of(text, &batch()), expected, "{text}");
    }

    /// Nine rows: every combination of x, y in {true, false, null}.
    fn truth_table() -> RecordBatch {
        let v = [Some(T), Some(F), None];
        let x: BooleanArray = v.iter().flat_map(|x| [*x; 3]).collect();
        let y: BooleanArray = (0..3).flat_map(|_| v).collect();
        RecordBatch::try_from_iter([
            ("x", Arc::new(x) as ArrayRef),
            ("y", Arc::new(y) as ArrayRef),
        ])
        .unwrap()
    }

    // Rows (x, y): TT TF TN FT FF FN NT NF NN; unknown results select nothing.
    #[rstest]
    #[case("x = true AND y = true", [T, F, F, F, F, F, F, F, F])]
    #[case("NOT (x = true AND y = true)", [F, T, F, T, T, T, F, T, F])]
    #[case("x = true OR y = true", [T, T, T, T, F, F, T, F, F])]
    #[case("NOT (x = true OR y = true)", [F, F, F, F, T, F, F, F, F])]
    #[case("NOT x = true", [F, F, F, T, T, T, F, F, F])]
    #[case("NOT NOT x = true", [T, T, T, F, F, F, F, F, F])]
    #[case("NOT (x = true OR y IS NULL)", [F, F, F, T, T, F, F, F, F])]
    #[case("x IS NULL OR NOT y = false", [T, F, F, T, F, F, T, T, T])]
    #[case("x = true OR y = true AND x = false", [T, T, T, T, F, F, F, F, F])]
    #[case("(x = true OR y = true) AND x = false", [F, F, F, T, F, F, F, F, F])]
    fn three_valued_logic(#[case] text: &str, #[case] expected: [bool; 9]) {
        assert_eq!(mask_of(text, &truth_table()), expected, "{text}");
    }

    fn modulo_batch() -> RecordBatch {
        let m = Int64Array::from(vec![
            Some(-7),
            Some(7),
            Some(-6),
            None,
            Some(i64::MIN),
            Some(9),
        ]);
        let u = UInt64Array::from(vec![
            Some(u64::MAX),
            Some(1),
            None,
            Some(10),
            Some(0),
            Some(7),
        ]);
        RecordBatch::try_from_iter([
            ("m", Arc::new(m) as ArrayRef),
            ("u", Arc::new(u) as ArrayRef),
        ])
        .unwrap()
    }

    // m holds [-7, 7, -6, null, i64::MIN, 9]; the remainder takes the
    // dividend's sign; i64::MIN % -1 is 0 rather than an overflow.
    // u holds [u64::MAX, 1, null, 10, 0, 7].
    #[rstest]
    #[case("m % 3 = -1", [T, F, F, F, F, F])]
    #[case("-1 = m % 3", [T, F, F, F, F, F])]
    #[case("m % -3 = 1", [F, T, F, F, F, F])]
    #[case("m % -3 = -1", [T, F, F, F, F, F])]
    #[case("m % 3 = -2", [F, F, F, F, T, F])]
    #[case("m % -1 = 0", [T, T, T, F, T, T])]
    #[case("m % 3 < 0", [T, F, F, F, T, F])]
    #[case("m % 2 != 0", [T, T, F, F, F, T])]
    #[case("m % 9223372036854775807 = -1", [F, F, F, F, T, F])]
    #[case("m % -9223372036854775808 = 7", [F, T, F, F, F, F])]
    #[case("u % 10 = 5", [T, F, F, F, F, F])]
    #[case("u % -10 = 5", [T, F, F, F, F, F])]
    #[case("u % -9223372036854775808 = 9223372036854775807", [T, F, F, F, F, F])]
    #[case("u % 2 = 1", [T, T, F, F, F, T])]
    #[case("u > 9223372036854775807", [T, F, F, F, F, F])]
    #[case("u >= 1e19", [T, F, F, F, F, F])]
    fn modulo_and_wide_values(#[case] text: &str, #[case] expected: [bool; 6]) {
        assert_eq!(mask_of(text, &modulo_batch()), expected, "{text}");
    }

    #[test]
    fn float32_values_are_compared_exactly() {
        let batch = RecordBatch::try_from_iter([(
            "f",
            Arc::new(Float32Array::from(vec![0.1f32])) as ArrayRef,
        )])
        .unwrap();
        assert_eq!(mask_of("f = 0.1", &batch), [F]);
        assert_eq!(mask_of("f > 0.1", &batch), [T]);
        assert_eq!(mask_of("f = 0.10000000149011612", &batch), [T]);
    }

    #[test]
    fn sliced_batches_keep_row_alignment() {
        let batch = batch().slice(1, 3); // rows 0, null, 5
        assert_eq!(mask_of("i32 > -1 AND NOT i8 = 5", &batch), [T, F, F]);
        assert_eq!(mask_of("i64 IS NULL OR u8 = 5", &batch), [F, T, T]);
        assert_eq!(mask_of("i16 > 10000000000 OR s = ''", &batch), [T, F, F]);
    }

    #[test]
    fn long_chains_evaluate() {
        let text = (0..4_000)
            .map(|i| format!("i64 = {i}"))
            .collect::<Vec<_>>()
            .join(" OR ");
        assert_eq!(mask_of(&text, &batch()), [F, T, F, T, T]);
    }

    #[test]
    fn dictionary_columns_are_decoded() {
        let keys = Int32Array::from(vec![Some(0), Some(1), None, Some(0), Some(2)]);
        let values = StringArray::from(vec![Some("apple"), Some("banana"), None]);
        let dict = DictionaryArray::<Int32Type>::try_new(keys, Arc::new(values)).unwrap();
        let batch = RecordBatch::try_from_iter([("d", Arc::new(dict) as ArrayRef)]).unwrap();
        assert_eq!(mask_of("d = 'apple'", &batch), [T, F, F, T, F]);
        assert_eq!(mask_of("contains(d, 'an')", &batch), [F, T, F, F, F]);
        // Row 4's key is valid but points at a null value: still null.
        assert_eq!(mask_of("d IS NULL", &batch), [F, F, T, F, T]);
        assert_eq!(mask_of("d NOT IN ('apple')", &batch), [F, T, F, F, F]);
    }

    #[rstest]
    #[case("missing = 1", "unknown column 'missing'")]
    #[case("i32 = 'x'", "cannot compare column 'i32'")]
    #[case("s % 2 = 1", "'%' needs an integer column")]
    fn evaluate_validates_first(#[case] text: &str, #[case] message: &str) {
        let err = parse(text).unwrap().evaluate(&batch()).unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
        assert!(err.to_string().contains(message), "{err}");
    }
}
