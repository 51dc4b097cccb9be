//! `RowAddrRemap` and `CompactRemap`: lookups, cursors, shifts and the
//! fixtures other modules' tests share.

use super::*;
use crate::address::row_address as ra;
use rstest::rstest;

pub(crate) fn fr(id: u64, rows: u64) -> FragmentRows {
    FragmentRows::new(id, rows)
}

pub(crate) fn tm(addrs: &[(u32, u32)]) -> RoaringTreemap {
    addrs.iter().map(|(f, o)| ra(*f, *o)).collect()
}

/// Group A of the reference scenario F.29.
pub(crate) fn group_a() -> RewriteGroupInput {
    RewriteGroupInput {
        old_fragments: vec![fr(4, 5), fr(3, 2)],
        new_fragments: vec![fr(10, 2), fr(11, 0), fr(12, 3)],
        surviving: tm(&[(4, 0), (4, 2), (4, 4), (3, 0), (3, 1)]),
    }
}

/// Group B: fragment 7 fully deleted.
pub(crate) fn group_b() -> RewriteGroupInput {
    RewriteGroupInput {
        old_fragments: vec![fr(7, 3)],
        new_fragments: vec![],
        surviving: RoaringTreemap::new(),
    }
}

/// The direct map a naive transposer would build for the same groups.
pub(crate) fn direct_of(groups: &[RewriteGroupInput]) -> HashMap<u64, Option<u64>> {
    let mut map = HashMap::new();
    for g in groups {
        let mut new_addrs = g
            .new_fragments
            .iter()
            .flat_map(|f| (0..f.physical_rows).map(move |o| ra(f.id as u32, o as u32)));
        for f in &g.old_fragments {
            for o in 0..f.physical_rows {
                let a = ra(f.id as u32, o as u32);
                let v = if g.surviving.contains(a) {
                    new_addrs.next()
                } else {
                    None
                };
                map.insert(a, v);
            }
        }
    }
    map
}

#[rstest]
#[case((4, 0), Some(Some(ra(10, 0))))]
#[case((4, 2), Some(Some(ra(10, 1))))]
#[case((4, 4), Some(Some(ra(12, 0))))]
#[case((3, 0), Some(Some(ra(12, 1))))]
#[case((3, 1), Some(Some(ra(12, 2))))]
#[case((4, 1), Some(None))]
#[case((4, 3), Some(None))]
#[case((4, 5), None)]
#[case((3, 2), None)]
#[case((7, 0), Some(None))]
#[case((7, 2), Some(None))]
#[case((9, 0), None)]
#[case((10, 0), None)]
fn reference_groups_a_and_b(#[case] addr: (u32, u32), #[case] want: Option<Option<u64>>) {
    let groups = vec![group_a(), group_b()];
    let compact = RowAddrRemap::compact(groups.clone()).unwrap();
    let direct = RowAddrRemap::direct(direct_of(&groups));
    let a = ra(addr.0, addr.1);
    assert_eq!(compact.get(a), want);
    assert_eq!(direct.get(a), want);
}

#[test]
fn reports_fragments() {
    let remap = RowAddrRemap::compact(vec![group_a(), group_b()]).unwrap();
    assert_eq!(
        remap.affected_fragments().iter().collect::<Vec<_>>(),
        vec![3, 4, 7]
    );
    assert_eq!(
        remap
            .fully_deleted_fragments()
            .unwrap()
            .iter()
            .collect::<Vec<_>>(),
        vec![7]
    );
    assert_eq!(
        remap.new_fragments().iter().collect::<Vec<_>>(),
        vec![10, 11, 12]
    );
    assert!(!remap.is_empty());
    let direct = RowAddrRemap::direct(direct_of(&[group_a()]));
    assert_eq!(direct.fully_deleted_fragments(), None);
    assert_eq!(
        direct.new_fragments().iter().collect::<Vec<_>>(),
        vec![10, 12]
    );
    assert_eq!(
        RowAddrRemap::empty().fully_deleted_fragments(),
        Some(RoaringBitmap::new())
    );
}

#[test]
fn sparse_fragment_ids_use_the_searched_index() {
    let g = RewriteGroupInput {
        old_fragments: vec![fr(3_000_000, 2), fr(5, 2), fr(900_000, 1)],
        new_fragments: vec![fr(4_000_000, 4)],
        surviving: tm(&[(3_000_000, 1), (5, 0), (5, 1), (900_000, 0)]),
    };
    let remap = RowAddrRemap::compact(vec![g]).unwrap();
    let RowAddrRemap::Compact(c) = &remap else {
        panic!("compact expected");
    };
    assert!(c.direct_index.is_none());
    let input = [
        ra(900_000, 0),
        ra(5, 1),
        ra(3_000_000, 0),
        ra(6, 0),
        ra(5, 0),
        ra(3_000_000, 1),
        ra(3_000_001, 0),
        ra(4, 0),
    ];
    let want = vec![
        Some(Some(ra(4_000_000, 3))),
        Some(Some(ra(4_000_000, 2))),
        Some(None),
        None,
        Some(Some(ra(4_000_000, 1))),
        Some(Some(ra(4_000_000, 0))),
        None,
        None,
    ];
    let mut out = Vec::new();
    remap.get_batch(&input, &mut out);
    assert_eq!(out, want);
    let singles: Vec<_> = input.iter().map(|a| remap.get(*a)).collect();
    assert_eq!(singles, want);
    let dense = RowAddrRemap::compact(vec![group_a()]).unwrap();
    let RowAddrRemap::Compact(c) = &dense else {
        panic!("compact expected");
    };
    assert!(c.direct_index.is_some());
}

#[test]
fn explicit_fragment_order_is_respected() {
    // Fragment 12 is read before fragment 11.
    let g = RewriteGroupInput {
        old_fragments: vec![fr(12, 1), fr(11, 1)],
        new_fragments: vec![fr(20, 2)],
        surviving: tm(&[(11, 0), (12, 0)]),
    };
    let remap = RowAddrRemap::compact(vec![g]).unwrap();
    assert_eq!(remap.get(ra(12, 0)), Some(Some(ra(20, 0))));
    assert_eq!(remap.get(ra(11, 0)), Some(Some(ra(20, 1))));
}

#[test]
fn zero_row_new_fragments_are_skipped_by_lookup() {
    let g = RewriteGroupInput {
        old_fragments: vec![fr(1, 4)],
        new_fragments: vec![fr(5, 0), fr(6, 2), fr(7, 0), fr(8, 0), fr(9, 2), fr(10, 0)],
        surviving: tm(&[(1, 0), (1, 1), (1, 2), (1, 3)]),
    };
    let remap = RowAddrRemap::compact(vec![g]).unwrap();
    let mut out = Vec::new();
    remap.get_batch(
        &[ra(1, 3), ra(1, 0), ra(1, 2), ra(1, 1), ra(1, 3)],
        &mut out,
    );
    assert_eq!(
        out,
        vec![
            Some(Some(ra(9, 1))),
            Some(Some(ra(6, 0))),
            Some(Some(ra(9, 0))),
            Some(Some(ra(6, 1))),
            Some(Some(ra(9, 1))),
        ]
    );
    assert_eq!(
        remap.new_fragments().iter().collect::<Vec<_>>(),
        vec![5, 6, 7, 8, 9, 10]
    );
}

fn invalid(groups: Vec<RewriteGroupInput>) -> String {
    match RowAddrRemap::compact(groups) {
        Err(Error::InvalidInput { message }) => message,
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

#[test]
fn rejects_old_fragment_listed_twice_in_a_group() {
    let mut g = group_a();
    g.old_fragments.push(fr(4, 5));
    assert!(invalid(vec![g]).contains("old fragment 4 is listed twice"));
}

#[test]
fn rejects_old_fragment_in_two_groups() {
    let other = RewriteGroupInput {
        old_fragments: vec![fr(3, 2)],
        new_fragments: vec![],
        surviving: RoaringTreemap::new(),
    };
    assert!(invalid(vec![group_a(), other]).contains("old fragment 3 is listed twice"));
}

#[test]
fn rejects_offset_beyond_physical_rows() {
    let mut g = group_a();
    g.old_fragments[1] = fr(3, 1); // offset 1 survives but only 1 physical row
    assert!(invalid(vec![g]).contains("surviving offset 1 of old fragment 3"));
}

#[test]
fn rejects_survivors_outside_old_fragments() {
    let mut g = group_a();
    g.surviving.insert(ra(8, 0));
    g.new_fragments.push(fr(13, 1));
    assert!(invalid(vec![g]).contains("fragment 8, which is not an old fragment"));
}

#[test]
fn rejects_survivor_count_mismatch() {
    let mut g = group_a();
    g.new_fragments.push(fr(13, 1));
    assert!(invalid(vec![g]).contains("rewrote 5 surviving old rows but the new fragments hold 6"));
}

#[rstest]
#[case::old_id(fr(1 << 32, 1), fr(10, 1), "old fragment id 4294967296")]
#[case::old_rows(fr(1, 1 << 32), fr(10, 1), "physical rows of old fragment 4294967296")]
#[case::new_id(fr(1, 1), fr(1 << 32, 1), "new fragment id 4294967296")]
#[case::new_rows(fr(1, 1), fr(10, 1 << 32), "physical rows of new fragment")]
fn rejects_values_beyond_u32(
    #[case] old: FragmentRows,
    #[case] new: FragmentRows,
    #[case] msg: &str,
) {
    let g = RewriteGroupInput {
        old_fragments: vec![old],
        new_fragments: vec![new],
        surviving: tm(&[(1, 0)]),
    };
    assert!(invalid(vec![g]).contains(msg));
}

#[test]
fn rejects_new_fragment_listed_twice_or_reusing_an_old_id() {
    let mut g = group_a();
    g.new_fragments.push(fr(10, 0));
    assert!(invalid(vec![g]).contains("new fragment 10 is listed twice"));
    let mut g = group_a();
    g.new_fragments.push(fr(3, 0));
    assert!(invalid(vec![g]).contains("fragment 3 is both an old and a new fragment"));
}

#[test]
fn no_deletions_cost_a_few_bytes_per_fragment() {
    let g = RewriteGroupInput {
        old_fragments: vec![fr(1, 1_000_000), fr(2, 1_000_000)],
        new_fragments: vec![fr(3, 2_000_000)],
        surviving: (ra(1, 0)..ra(1, 1_000_000))
            .chain(ra(2, 0)..ra(2, 1_000_000))
            .collect(),
    };
    let remap = RowAddrRemap::compact(vec![g]).unwrap();
    assert!(
        remap.deep_size_bytes() < 1024,
        "{}",
        remap.deep_size_bytes()
    );
    assert_eq!(remap.get(ra(2, 999_999)), Some(Some(ra(3, 1_999_999))));
}

#[test]
fn shift_of_range_and_lookup_agree_with_get() {
    // Fragment 1 loses offset 4 of 10, then fragment 2 (8 rows, none
    // deleted) follows; destinations of 5 and 12 rows split fragment 1.
    let surviving = (0..10u32)
        .filter(|o| *o != 4)
        .map(|o| (1, o))
        .chain((0..8).map(|o| (2, o)))
        .collect::<Vec<_>>();
    let remap = CompactRemap::new(vec![
        RewriteGroupInput {
            old_fragments: vec![fr(1, 10), fr(2, 8)],
            new_fragments: vec![fr(20, 5), fr(21, 12)],
            surviving: tm(&surviving),
        },
        group_a(),
        group_b(),
    ])
    .unwrap();
    let mut cursor = RemapCursor::default();
    for fragment in [1u32, 2, 3, 4, 7, 9] {
        for min in 0..12u32 {
            assert_eq!(
                remap.lookup(ra(fragment, min), &mut cursor),
                remap.get(ra(fragment, min))
            );
            for max in min..12u32 {
                let results: Vec<Option<Option<u64>>> =
                    (min..=max).map(|o| remap.get(ra(fragment, o))).collect();
                let holds = match results[0] {
                    Some(Some(a)) => results
                        .iter()
                        .zip(0u64..)
                        .all(|(r, i)| *r == Some(Some(a + i)) && (a + i) >> 32 == a >> 32),
                    _ => false,
                };
                let got = remap.shift_of_range(fragment, min, max);
                assert_eq!(got.is_some(), holds, "{fragment}:{min}..={max}");
                if let Some(base) = got {
                    assert_eq!(results[0], Some(Some(base.wrapping_add(u64::from(min)))));
                }
            }
        }
    }
    // 1:5..=9 survived and lands at 20:4 (one row) and 21:0.. — split.
    assert_eq!(remap.shift_of_range(1, 5, 9), None);
    assert_eq!(
        remap.shift_of_range(1, 6, 9),
        Some(ra(21, 0).wrapping_sub(6))
    );
    assert_eq!(remap.shift_of_range(1, 3, 3), Some(ra(20, 0)));
    assert_eq!(remap.shift_of_range(1, 9, 8), None);
}
