//! Range-checked numeric option values.
//!
//! Every numeric option parses through [`integer`] or [`fraction`], so a value
//! outside its range (a negative count, a fragment id beyond `u32`, a zero
//! budget) is refused while parsing, with one line that names the option (clap
//! adds it) and the valid range.

use std::fmt::Display;

/// A clap value parser accepting integers in `min..=max`; `max = None` means
/// the type's own maximum, printed as "at least {min}".
pub fn integer<T>(
    min: T,
    max: Option<T>,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: TryFrom<i128> + TryInto<i128> + Copy + Display + Send + Sync + 'static,
{
    move |text: &str| {
        let range = match max {
            Some(max) => format!("an integer from {min} to {max}"),
            None => format!("an integer of at least {min}"),
        };
        let refused = || format!("must be {range}");
        let value: i128 = text.trim().parse().map_err(|_| refused())?;
        let low: i128 = min.try_into().map_err(|_| refused())?;
        let high: Option<i128> = match max {
            Some(max) => Some(max.try_into().map_err(|_| refused())?),
            None => None,
        };
        if value < low || high.is_some_and(|high| value > high) {
            return Err(refused());
        }
        T::try_from(value).map_err(|_| refused())
    }
}

/// A clap value parser accepting finite numbers in `[min, max]`.
pub fn fraction(
    min: f64,
    max: f64,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |text: &str| {
        let refused = || format!("must be a number from {min} to {max}");
        let value: f64 = text.trim().parse().map_err(|_| refused())?;
        if !value.is_finite() || value < min || value > max {
            return Err(refused());
        }
        Ok(value)
    }
}

/// The largest fragment id: row addresses keep the id in their high 32 bits.
pub const MAX_FRAGMENT_ID: u64 = u32::MAX as u64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_outside_the_range_name_it() {
        let positive = integer(1u64, None);
        assert_eq!(positive("5"), Ok(5));
        assert_eq!(
            positive("-5"),
            Err("must be an integer of at least 1".into())
        );
        assert_eq!(
            positive("0"),
            Err("must be an integer of at least 1".into())
        );
        assert_eq!(
            positive("x"),
            Err("must be an integer of at least 1".into())
        );
        let id = integer(0u64, Some(MAX_FRAGMENT_ID));
        assert_eq!(id("4294967295"), Ok(4_294_967_295));
        assert_eq!(
            id("99999999999"),
            Err("must be an integer from 0 to 4294967295".into())
        );
        let small = integer(1usize, Some(3));
        assert_eq!(small("4"), Err("must be an integer from 1 to 3".into()));
        assert_eq!(integer(i64::MIN, None)("-7"), Ok(-7));
    }

    #[test]
    fn fractions_outside_the_range_name_it() {
        let unit = fraction(0.0, 1.0);
        assert_eq!(unit("0.25"), Ok(0.25));
        for bad in ["-0.1", "1.5", "NaN", "inf", "half"] {
            assert_eq!(unit(bad), Err("must be a number from 0 to 1".into()));
        }
    }
}
