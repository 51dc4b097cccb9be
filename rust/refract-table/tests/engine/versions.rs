//! Versions, checkout, restore, sessions and orphan files.

use std::sync::Arc;
use std::time::Duration;

use refract_table::{Dataset, OpenOptions, Session};

use crate::common::*;

#[tokio::test]
async fn versions_checkout_and_restore() {
    let location = location(Backend::Memory);
    let mut dataset = create(&location.uri).await;
    dataset.append(vec![rows(0, 10)], &opts(5)).await.unwrap();
    dataset.append(vec![rows(10, 10)], &opts(5)).await.unwrap();
    dataset.delete("id < 3").await.unwrap();
    let history: Vec<(u64, String)> = dataset
        .versions()
        .await
        .unwrap()
        .into_iter()
        .map(|info| (info.version, info.operation))
        .collect();
    assert_eq!(
        history,
        vec![
            (1, "Create".to_string()),
            (2, "Append".to_string()),
            (3, "Append".to_string()),
            (4, "Delete".to_string())
        ]
    );
    let mut old = dataset.checkout_version(2).await.unwrap();
    assert_eq!(scan_ids(&old).await, (0..10).collect::<Vec<_>>());
    old.restore().await.unwrap();
    assert_eq!(old.version(), 5);
    assert_eq!(fragment_ids(&old), vec![1, 2]);
    assert_eq!(scan_ids(&old).await, (0..10).collect::<Vec<_>>());
    // max_fragment_id stays at the high-water mark; deletion flags stay set.
    assert_eq!(old.manifest().max_fragment_id, Some(4));
    assert_eq!(old.manifest().reader_flags, dataset.manifest().reader_flags);
    old.append(vec![rows(100, 2)], &opts(5)).await.unwrap();
    assert_eq!(fragment_ids(&old), vec![1, 2, 5]);
    let latest = Dataset::open(&location.uri).await.unwrap();
    assert_eq!(latest.version(), 6);
    assert!(dataset.checkout_version(42).await.is_err());
}

#[tokio::test]
async fn open_at_version_and_shared_session() {
    let location = location(Backend::Memory);
    let session = Arc::new(Session::new(8 << 20));
    let mut dataset = Dataset::create(
        &location.uri,
        schema(),
        OpenOptions {
            session: Some(session.clone()),
            ..OpenOptions::default()
        },
    )
    .await
    .unwrap();
    dataset.append(vec![rows(0, 4)], &opts(10)).await.unwrap();
    dataset.append(vec![rows(4, 4)], &opts(10)).await.unwrap();
    let loads_before = session.cache().stats().loads;
    let v2 = Dataset::open_with(
        &location.uri,
        OpenOptions {
            session: Some(session.clone()),
            version: Some(2),
            ..OpenOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(scan_ids(&v2).await, vec![0, 1, 2, 3]);
    // Version 2 was published through this session: no manifest load needed.
    assert_eq!(session.cache().stats().loads, loads_before);
    assert!(Arc::ptr_eq(v2.session(), dataset.session()));
}

#[tokio::test]
async fn uncommitted_files_are_orphans_and_live_files_never_are() {
    let location = location(Backend::Memory);
    let mut dataset = create_with_rows(&location.uri, 20, 10).await;
    dataset.delete("id = 3").await.unwrap();
    let stray = dataset
        .write_fragments(futures::stream::iter(vec![Ok(rows(50, 5))]), &opts(10))
        .await
        .unwrap();
    let orphans = dataset.list_orphan_files(Duration::ZERO).await.unwrap();
    assert_eq!(orphans, vec![stray[0].files[0].path.clone()]);
    let recent_only = dataset
        .list_orphan_files(Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(recent_only.is_empty());
}
