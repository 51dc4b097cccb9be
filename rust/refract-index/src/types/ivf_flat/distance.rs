//! Vector distances. Smaller is closer for every metric.

use crate::types::Metric;

/// The distance reported for `metric`: squared L2, `1 - cos`, or `-dot`.
/// The query layer uses the same function for fragments no segment covers, so
/// indexed and scanned rows rank on one scale.
pub fn distance(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    match metric {
        Metric::L2 => l2_squared(a, b),
        Metric::Cosine => cosine_distance(a, b),
        Metric::Dot => -dot(a, b),
    }
}

/// The distance used to assign rows to partitions and to rank partitions:
/// cosine for cosine indexes (trained on the unit sphere), squared L2 otherwise
/// (dot-product indexes are partitioned by L2, as usual for IVF).
pub fn partition_distance(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    match metric {
        Metric::Cosine => cosine_distance(a, b),
        Metric::L2 | Metric::Dot => l2_squared(a, b),
    }
}

/// Squared Euclidean distance (the ordering of L2 without the square root).
pub fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// Dot product.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Euclidean norm.
pub fn norm(a: &[f32]) -> f32 {
    dot(a, a).sqrt()
}

/// Cosine distance `1 - cos(a, b)`. A zero vector has no direction, so its
/// distance to anything is defined as 1 (orthogonal) instead of NaN.
pub fn cosine_distance(a: &[f32], b: &[f32]) -> f32 {
    let denom = norm(a) * norm(b);
    if denom == 0.0 || !denom.is_finite() {
        return 1.0;
    }
    1.0 - dot(a, b) / denom
}

/// Scales `v` to unit length in place; zero vectors are left unchanged.
pub fn normalize_in_place(v: &mut [f32]) {
    let n = norm(v);
    if n > 0.0 && n.is_finite() {
        v.iter_mut().for_each(|x| *x /= n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(&[0.0, 0.0], &[3.0, 4.0], 25.0)]
    #[case(&[1.0, 1.0], &[1.0, 1.0], 0.0)]
    fn l2_is_squared(#[case] a: &[f32], #[case] b: &[f32], #[case] expected: f32) {
        assert_eq!(l2_squared(a, b), expected);
    }

    #[rstest]
    #[case(&[1.0, 0.0], &[2.0, 0.0], 0.0)]
    #[case(&[1.0, 0.0], &[0.0, 5.0], 1.0)]
    #[case(&[1.0, 0.0], &[-1.0, 0.0], 2.0)]
    #[case(&[0.0, 0.0], &[1.0, 0.0], 1.0)]
    fn cosine_cases(#[case] a: &[f32], #[case] b: &[f32], #[case] expected: f32) {
        assert!((cosine_distance(a, b) - expected).abs() < 1e-6);
    }

    #[test]
    fn normalizing_gives_unit_length_and_keeps_zero() {
        let mut v = [3.0, 4.0];
        normalize_in_place(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut z = [0.0, 0.0];
        normalize_in_place(&mut z);
        assert_eq!(z, [0.0, 0.0]);
    }
}
