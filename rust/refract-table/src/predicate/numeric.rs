//! Exact numeric comparison between a column type and a literal of another
//! type.
//!
//! A literal is never rounded into the column's type. Instead, `x op literal`
//! is rewritten to an equivalent comparison against a value that the column
//! type holds exactly, or to a constant answer when no value of the column
//! type can satisfy (or fail) it. So `int32_col > 10_000_000_000` is false for
//! every row, and `int_col < 2.5` becomes `int_col < 3`.

use super::expr::{CompareOp, Literal};

/// `x op literal` for every non-null `x`, reduced to something the column
/// type can evaluate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Target<T> {
    /// Compare against a value of the column's type.
    Compare(CompareOp, T),
    /// Every non-null value gives this answer.
    Constant(bool),
}

/// The answer for a bound outside the column type's range, `above` telling
/// whether it lies above every value of the type.
fn out_of_range(op: CompareOp, above: bool) -> bool {
    match op {
        CompareOp::Eq => false,
        CompareOp::NotEq => true,
        CompareOp::Lt | CompareOp::LtEq => above,
        CompareOp::Gt | CompareOp::GtEq => !above,
    }
}

/// Narrows an integer comparison to the native type `N` of the column.
pub(crate) fn narrow<N: TryFrom<i128>>(op: CompareOp, bound: i128) -> Target<N> {
    match N::try_from(bound) {
        Ok(n) => Target::Compare(op, n),
        // Every integer type holds 0, so a bound that does not fit lies on
        // the side of its sign.
        Err(_) => Target::Constant(out_of_range(op, bound > 0)),
    }
}

/// `x op literal` for an integer column, as a comparison against an exact
/// integer. `None` for non-numeric literals (rejected by validation).
pub(crate) fn integer_target(op: CompareOp, literal: &Literal) -> Option<Target<i128>> {
    match literal {
        Literal::Int(v) => Some(Target::Compare(op, i128::from(*v))),
        Literal::Float(f) => Some(float_vs_integers(op, *f)),
        Literal::Str(_) | Literal::Bool(_) => None,
    }
}

/// Integer `x` against a finite float `f`: `x < 2.5` ⇔ `x < 3`,
/// `x <= 2.5` ⇔ `x <= 2`, `x = 2.5` never holds.
fn float_vs_integers(op: CompareOp, f: f64) -> Target<i128> {
    // Clamping keeps floor/ceil exactly representable in i128 while staying
    // outside every 64-bit range; a NaN (only possible from a hand-built
    // `Expr`, validation rejects it) compares like a value above all others.
    let f = if f.is_nan() {
        1e30
    } else {
        f.clamp(-1e30, 1e30)
    };
    // Both are integral and within ±1e30, so the casts are exact.
    let floor = f.floor() as i128;
    let ceil = f.ceil() as i128;
    let integral = floor == ceil;
    match op {
        CompareOp::Eq if !integral => Target::Constant(false),
        CompareOp::NotEq if !integral => Target::Constant(true),
        CompareOp::Eq | CompareOp::NotEq | CompareOp::LtEq | CompareOp::Gt => {
            Target::Compare(op, floor)
        }
        CompareOp::Lt | CompareOp::GtEq => Target::Compare(op, ceil),
    }
}

/// The float order predicates use (PostgreSQL's): `-0.0 == 0.0`, and every
/// NaN equals every other NaN and is greater than all numbers. Applying this
/// to both sides lets Arrow's total-order kernels implement it.
pub(crate) fn canonical_float(x: f64) -> f64 {
    if x.is_nan() {
        f64::NAN
    } else if x == 0.0 {
        0.0
    } else {
        x
    }
}

/// `x op literal` for a float column whose values went through
/// [`canonical_float`]. `None` for non-numeric literals.
pub(crate) fn float_target(op: CompareOp, literal: &Literal) -> Option<Target<f64>> {
    match literal {
        Literal::Float(f) => Some(Target::Compare(op, canonical_float(*f))),
        Literal::Int(v) => Some(integer_vs_floats(op, *v)),
        Literal::Str(_) | Literal::Bool(_) => None,
    }
}

/// Float `x` against integer `v`, exact even when `v` has no f64 of its own
/// (|v| > 2^53): then `x < v` ⇔ `x <= lo` and `x > v` ⇔ `x >= hi`, with `lo`
/// and `hi` the floats either side of `v`.
fn integer_vs_floats(op: CompareOp, v: i64) -> Target<f64> {
    let rounded = v as f64;
    // `rounded` is integral with magnitude at most 2^63: exact in i128.
    let rounded_exact = rounded as i128;
    let v = i128::from(v);
    if rounded_exact == v {
        return Target::Compare(op, canonical_float(rounded));
    }
    let (lo, hi) = if rounded_exact > v {
        (rounded.next_down(), rounded)
    } else {
        (rounded, rounded.next_up())
    };
    match op {
        CompareOp::Eq => Target::Constant(false),
        CompareOp::NotEq => Target::Constant(true),
        CompareOp::Lt | CompareOp::LtEq => Target::Compare(CompareOp::LtEq, lo),
        CompareOp::Gt | CompareOp::GtEq => Target::Compare(CompareOp::GtEq, hi),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use CompareOp::*;

    #[rstest]
    #[case(Eq, 300, Target::Constant(false))]
    #[case(NotEq, 300, Target::Constant(true))]
    #[case(Lt, 300, Target::Constant(true))]
    #[case(LtEq, 300, Target::Constant(true))]
    #[case(Gt, 300, Target::Constant(false))]
    #[case(GtEq, 300, Target::Constant(false))]
    #[case(Lt, -300, Target::Constant(false))]
    #[case(GtEq, -300, Target::Constant(true))]
    #[case(Gt, -128, Target::Compare(Gt, -128i8))]
    #[case(LtEq, 127, Target::Compare(LtEq, 127i8))]
    fn narrows_to_i8(#[case] op: CompareOp, #[case] bound: i128, #[case] expected: Target<i8>) {
        assert_eq!(narrow::<i8>(op, bound), expected);
    }

    #[rstest]
    #[case(Lt, -1, Target::Constant(false))]
    #[case(Gt, -1, Target::Constant(true))]
    #[case(Eq, 0, Target::Compare(Eq, 0u8))]
    fn narrows_to_u8(#[case] op: CompareOp, #[case] bound: i128, #[case] expected: Target<u8>) {
        assert_eq!(narrow::<u8>(op, bound), expected);
    }

    #[rstest]
    #[case(Eq, 2.5, Target::Constant(false))]
    #[case(NotEq, 2.5, Target::Constant(true))]
    #[case(Lt, 2.5, Target::Compare(Lt, 3))]
    #[case(LtEq, 2.5, Target::Compare(LtEq, 2))]
    #[case(Gt, 2.5, Target::Compare(Gt, 2))]
    #[case(GtEq, 2.5, Target::Compare(GtEq, 3))]
    #[case(Lt, -2.5, Target::Compare(Lt, -2))]
    #[case(GtEq, -2.5, Target::Compare(GtEq, -2))]
    #[case(Eq, 4.0, Target::Compare(Eq, 4))]
    #[case(Lt, 4.0, Target::Compare(Lt, 4))]
    #[case(
        Gt,
        1e300,
        Target::Compare(Gt, 1e30 as i128)
    )]
    fn integers_against_floats(
        #[case] op: CompareOp,
        #[case] f: f64,
        #[case] expected: Target<i128>,
    ) {
        assert_eq!(integer_target(op, &Literal::Float(f)), Some(expected));
    }

    #[test]
    fn floats_against_unrepresentable_integer() {
        // 2^53 + 1 lies between the floats 2^53 and 2^53 + 2.
        let v = (1i64 << 53) + 1;
        let lo = (1i64 << 53) as f64;
        let hi = ((1i64 << 53) + 2) as f64;
        let lit = Literal::Int(v);
        assert_eq!(float_target(Eq, &lit), Some(Target::Constant(false)));
        assert_eq!(float_target(NotEq, &lit), Some(Target::Constant(true)));
        assert_eq!(float_target(Lt, &lit), Some(Target::Compare(LtEq, lo)));
        assert_eq!(float_target(GtEq, &lit), Some(Target::Compare(GtEq, hi)));
        let neg = Literal::Int(-v);
        assert_eq!(float_target(Gt, &neg), Some(Target::Compare(GtEq, -lo)));
        assert_eq!(float_target(LtEq, &neg), Some(Target::Compare(LtEq, -hi)));
    }

    #[test]
    fn canonical_float_merges_zeros_and_nans() {
        assert_eq!(canonical_float(-0.0).to_bits(), 0.0f64.to_bits());
        assert_eq!(canonical_float(-f64::NAN).to_bits(), f64::NAN.to_bits());
        assert_eq!(canonical_float(-1.5), -1.5);
        assert_eq!(
            float_target(Eq, &Literal::Int(0)),
            Some(Target::Compare(Eq, 0.0))
        );
    }
}
