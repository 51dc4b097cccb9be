//! Balanced output sizing: how many fragments a task writes and how many rows each.
//!
//! A task with `L` live rows writes `max(1, floor(L / target))` outputs, raised when
//! needed so that no output's estimated bytes exceed `max_bytes_per_file`. Rows are
//! spread evenly: sizes differ by at most one and the larger outputs come first.
//! A task with no live rows writes nothing (its fragments are simply removed).

/// The output layout of one task: `rows` split into `count` near-equal outputs,
/// larger ones first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Balance {
    rows: u64,
    count: u64,
}

impl Balance {
    /// The layout for `live_rows` rows whose estimated size is `estimated_bytes`.
    pub fn for_task(
        live_rows: u64,
        estimated_bytes: u64,
        target: u64,
        max_bytes_per_file: Option<u64>,
    ) -> Self {
        Self {
            rows: live_rows,
            count: output_count(live_rows, estimated_bytes, target, max_bytes_per_file),
        }
    }

    /// Number of outputs.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Rows in output `index` (0-based).
    pub fn size(&self, index: u64) -> u64 {
        self.end(index + 1) - self.end(index)
    }

    /// Rows in the first `outputs` outputs together (`c_outputs`).
    pub fn end(&self, outputs: u64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let outputs = outputs.min(self.count);
        let (base, extra) = (self.rows / self.count, self.rows % self.count);
        outputs * base + outputs.min(extra)
    }

    /// The number of complete outputs inside the first `rows` rows.
    pub fn complete_within(&self, rows: u64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        // count <= rows whenever count > 0 (see `output_count`), so base >= 1.
        let (base, extra) = (self.rows / self.count, self.rows % self.count);
        let larger = extra * (base + 1);
        let complete = if rows >= larger {
            extra + (rows - larger) / base.max(1)
        } else {
            rows / (base + 1)
        };
        complete.min(self.count)
    }

    /// Output sizes in write order.
    pub fn sizes(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.count).map(|index| self.size(index))
    }
}

/// Outputs for `live_rows` rows: 0 for none, else `max(1, floor(L / target),
/// ceil(L / rows_per_capped_file))`. Never more than `live_rows`.
fn output_count(live_rows: u64, estimated_bytes: u64, target: u64, cap: Option<u64>) -> u64 {
    if live_rows == 0 {
        return 0;
    }
    let by_rows = live_rows / target.max(1);
    let by_bytes = cap.map_or(1, |cap| {
        let rows_per_file = max_rows_within(live_rows, estimated_bytes, cap);
        live_rows.div_ceil(rows_per_file)
    });
    by_rows.max(by_bytes).max(1)
}

/// The most rows whose estimated bytes stay within `cap` (at least one row: a
/// single row wider than the cap cannot be split and is written alone).
pub fn max_rows_within(live_rows: u64, estimated_bytes: u64, cap: u64) -> u64 {
    if estimated_bytes == 0 {
        return live_rows.max(1);
    }
    let rows = u128::from(cap) * u128::from(live_rows) / u128::from(estimated_bytes);
    u64::try_from(rows)
        .unwrap_or(u64::MAX)
        .clamp(1, live_rows.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn sizes(rows: u64, target: u64) -> Vec<u64> {
        Balance::for_task(rows, 0, target, None).sizes().collect()
    }

    #[rstest]
    #[case::below_target(199, 250, vec![199])]
    #[case::exact(500, 250, vec![250, 250])]
    #[case::seed_8506(2000, 500, vec![500; 4])]
    #[case::lance_oversized(4100, 1000, vec![1025; 4])]
    #[case::lance_non_divisible(101, 10, vec![11, 10, 10, 10, 10, 10, 10, 10, 10, 10])]
    #[case::never_a_stranded_tail(1999, 1000, vec![1999])]
    #[case::larger_first(7, 3, vec![4, 3])]
    #[case::nothing(0, 10, vec![])]
    fn balanced_sizes(#[case] rows: u64, #[case] target: u64, #[case] expected: Vec<u64>) {
        assert_eq!(sizes(rows, target), expected);
    }

    #[test]
    fn byte_cap_splits_further_and_no_output_exceeds_it() {
        // 1000 rows of 10 bytes, cap 3000 bytes: at most 300 rows per output.
        let balance = Balance::for_task(1000, 10_000, 1000, Some(3000));
        assert_eq!(balance.sizes().collect::<Vec<_>>(), vec![250; 4]);
        // A row wider than the cap is written alone.
        let wide = Balance::for_task(3, 3000, 1000, Some(10));
        assert_eq!(wide.sizes().collect::<Vec<_>>(), vec![1, 1, 1]);
    }

    #[rstest]
    #[case(0, 0)]
    #[case(3, 0)]
    #[case(4, 1)]
    #[case(7, 1)]
    #[case(8, 2)]
    #[case(10, 2)]
    #[case(11, 3)]
    #[case(100, 3)]
    fn complete_outputs_inside_a_prefix(#[case] rows: u64, #[case] complete: u64) {
        // 11 rows in 3 outputs: [4, 4, 3], ends 4, 8, 11.
        let balance = Balance::for_task(11, 0, 3, None);
        assert_eq!(balance.sizes().collect::<Vec<_>>(), vec![4, 4, 3]);
        assert_eq!(balance.complete_within(rows), complete);
    }

    proptest::proptest! {
        #[test]
        fn sizes_sum_differ_by_one_and_respect_cap(
            rows in 0u64..5000, target in 1u64..700, bytes_per_row in 0u64..50, cap in 1u64..20_000,
        ) {
            let estimated = rows * bytes_per_row;
            let balance = Balance::for_task(rows, estimated, target, Some(cap));
            let sizes: Vec<u64> = balance.sizes().collect();
            proptest::prop_assert_eq!(sizes.iter().sum::<u64>(), rows);
            if let (Some(min), Some(max)) = (sizes.iter().min(), sizes.iter().max()) {
                proptest::prop_assert!(max - min <= 1);
                proptest::prop_assert!(*min >= 1);
                proptest::prop_assert!(sizes.windows(2).all(|w| w[0] >= w[1]));
                if bytes_per_row > 0 && bytes_per_row <= cap {
                    proptest::prop_assert!(max * bytes_per_row <= cap);
                }
                if sizes.len() as u64 > (rows / target).max(1) {
                    // Split by bytes: every output holds at least a quarter of the cap.
                    proptest::prop_assert!(4 * min * bytes_per_row >= cap);
                } else if rows >= target {
                    proptest::prop_assert!(*min >= target);
                }
            }
            for prefix in [0, rows / 3, rows / 2, rows] {
                let complete = balance.complete_within(prefix);
                proptest::prop_assert!(balance.end(complete) <= prefix);
                if complete < balance.count() {
                    proptest::prop_assert!(balance.end(complete + 1) > prefix);
                }
            }
        }
    }
}
