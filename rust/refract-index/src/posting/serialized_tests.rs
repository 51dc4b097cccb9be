//! Tests of [`TranslationMemo::remap_serialized`]: postings stored as
//! roaring serializes a treemap (ngram), shifted in place or decoded.

use roaring::RoaringTreemap;

use super::tests::{brute_force, compaction, compaction_where, mixed_posting};
use super::*;
use refract_core::{row_address, Error, FragmentRows, RewriteGroupInput, RowAddrRemap};

/// `posting` as roaring serializes a treemap (how ngram postings are stored).
fn treemap_bytes(posting: &RoaringTreemap) -> Vec<u8> {
    let mut bytes = Vec::new();
    posting.serialize_into(&mut bytes).unwrap();
    bytes
}

/// Fragments 1..=3 of `rows` rows each, compacted whole into fragment 10:
/// every part of every posting moves by one constant.
fn compaction_into_one(rows: u32) -> RowAddrRemap {
    let surviving: RoaringTreemap = (1..=3u32)
        .flat_map(|f| (0..rows).map(move |o| row_address(f, o)))
        .collect();
    RowAddrRemap::compact(vec![RewriteGroupInput {
        old_fragments: (1..=3).map(|f| FragmentRows::new(f, rows.into())).collect(),
        new_fragments: vec![FragmentRows::new(10, 3 * u64::from(rows))],
        surviving,
    }])
    .unwrap()
}

#[test]
fn serialized_postings_remap_like_decoded_ones_on_both_paths() {
    let shifted = compaction_into_one(70_000);
    let split = compaction_where(70_000, |_, _| false);
    let with_deletions = compaction(70_000);
    for posting in [mixed_posting(70_000), RoaringTreemap::new()] {
        for remap in [&shifted, &split, &with_deletions] {
            let got = TranslationMemo::new()
                .remap_serialized(&treemap_bytes(&posting), "test", remap)
                .unwrap();
            assert_eq!(got, brute_force(&posting, remap));
        }
    }
    // When every part moves by one constant nothing is translated address by
    // address; a fragment split between two outputs is.
    let posting = treemap_bytes(&mixed_posting(70_000));
    let mut memo = TranslationMemo::new();
    memo.remap_serialized(&posting, "test", &shifted).unwrap();
    assert_eq!(memo.translated(), 0);
    memo.remap_serialized(&posting, "test", &split).unwrap();
    assert!(memo.translated() > 0);
}

#[test]
fn damaged_serialized_postings_are_corrupt_on_both_paths() {
    let posting = mixed_posting(70_000);
    let bytes = treemap_bytes(&posting);
    for remap in [
        compaction_into_one(70_000),
        compaction_where(70_000, |_, _| false),
    ] {
        let check = |bytes: &[u8], case: &str| match TranslationMemo::new()
            .remap_serialized(bytes, "test", &remap)
        {
            Ok(got) => panic!("{case}: accepted as {got:?}"),
            Err(err) => assert!(matches!(err, Error::Corrupt { .. }), "{case}: {err}"),
        };
        for cut in [1, 7, 8, 11, 12, 20, bytes.len() / 2, bytes.len() - 1] {
            check(&bytes[..cut], "truncated");
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        check(&trailing, "trailing byte");
        // A part count far beyond the bytes.
        let mut counted = bytes.clone();
        counted[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        check(&counted, "huge part count");
        // The memo still works after refusing damaged bytes.
        let mut memo = TranslationMemo::new();
        assert!(memo.remap_serialized(&trailing, "test", &remap).is_err());
        let got = memo.remap_serialized(&bytes, "test", &remap).unwrap();
        assert_eq!(got, brute_force(&posting, &remap));
    }
    // The second part's key equal to the first's (the shift path reads keys itself).
    let first_len = 8 + 4 + posting.bitmaps().next().unwrap().1.serialized_size();
    let mut repeated = bytes.clone();
    repeated[first_len..first_len + 4].copy_from_slice(&1u32.to_le_bytes());
    let err = TranslationMemo::new()
        .remap_serialized(&repeated, "test", &compaction_into_one(70_000))
        .unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}
