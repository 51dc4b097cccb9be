//! Durations on the command line: a whole number and a unit, `90s`, `30m`,
//! `12h`, `7d` or `2w`.

use std::time::Duration;

/// Seconds in each unit [`duration`] accepts.
const UNITS: [(&str, u64); 5] = [
    ("s", 1),
    ("m", 60),
    ("h", 3_600),
    ("d", 86_400),
    ("w", 604_800),
];

/// The longest duration accepted: 100 years (36,500 days). Longer ones mean
/// nothing for retention and would overflow date arithmetic.
pub const MAX_DURATION: Duration = Duration::from_secs(36_500 * 86_400);

/// A clap value parser for durations: a whole number followed by `s`, `m`,
/// `h`, `d` or `w`, from `0s` to `36500d`. Anything else (`7x`, `-1d`, `d`,
/// `1.5h`, an empty value) is refused with one line saying what is accepted.
///
/// # Errors
/// A one-line message when `text` is not a count and unit, or is longer than
/// [`MAX_DURATION`].
pub fn duration(text: &str) -> Result<Duration, String> {
    let refused = || {
        "must be a whole number followed by s, m, h, d or w (e.g. 90s, 30m, 12h, 7d, 2w)"
            .to_string()
    };
    let text = text.trim();
    let unit_at = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (count, unit) = text.split_at(unit_at);
    if count.is_empty() {
        return Err(refused());
    }
    let Some(&(_, unit_seconds)) = UNITS.iter().find(|(name, _)| *name == unit) else {
        return Err(refused());
    };
    let too_long = || "must be at most 36500d (100 years)".to_string();
    let count: u64 = count.parse().map_err(|_| too_long())?;
    let seconds = count.checked_mul(unit_seconds).ok_or_else(too_long)?;
    let duration = Duration::from_secs(seconds);
    if duration > MAX_DURATION {
        return Err(too_long());
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_parses() {
        assert_eq!(duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("30m"), Ok(Duration::from_secs(1_800)));
        assert_eq!(duration("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(duration("7d"), Ok(Duration::from_secs(604_800)));
        assert_eq!(duration("2w"), Ok(Duration::from_secs(1_209_600)));
        assert_eq!(duration("0s"), Ok(Duration::ZERO));
        assert_eq!(duration(" 5m "), Ok(Duration::from_secs(300)));
        assert_eq!(duration("36500d"), Ok(MAX_DURATION));
    }

    #[test]
    fn malformed_durations_say_what_is_accepted() {
        let expected =
            "must be a whole number followed by s, m, h, d or w (e.g. 90s, 30m, 12h, 7d, 2w)";
        for bad in [
            "", " ", "7x", "-1d", "d", "7", "1.5h", "7 d", "7dd", "+7d", "7D", "1h30m",
        ] {
            assert_eq!(duration(bad), Err(expected.to_string()), "{bad:?}");
        }
    }

    #[test]
    fn durations_beyond_a_century_are_refused() {
        let expected = "must be at most 36500d (100 years)".to_string();
        assert_eq!(duration("36501d"), Err(expected.clone()));
        assert_eq!(duration("5215w"), Err(expected.clone()));
        assert_eq!(duration("18446744073709551615s"), Err(expected.clone()));
        assert_eq!(duration("18446744073709551615w"), Err(expected.clone()));
        assert_eq!(duration("99999999999999999999999s"), Err(expected));
    }
}
