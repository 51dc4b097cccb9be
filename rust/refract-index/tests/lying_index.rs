//! An index that points at the wrong rows never makes a query return them:
//! rows an index answered exactly are rechecked against the conjunct on the
//! values the query reads anyway, and a row that does not satisfy it fails
//! the query as `Corrupt` naming the index. Candidate answers (a superset by
//! contract) are filtered silently, as they should be.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::DataType;
use async_trait::async_trait;
use futures::stream::BoxStream;
use refract_core::{Error, Result};
use refract_index::types::{
    IndexContext, IndexParams, IndexQuery, IndexSegmentReader, IndexType, SearchResult, Translator,
};
use refract_index::{create_index_with, IndexRegistry, IndexUse, Query};
use refract_table::io::RelativePath;
use refract_table::testing::{sample_rows, sample_schema};
use refract_table::{Dataset, OpenOptions, WriteOptions};
use roaring::RoaringTreemap;

/// Answers every question with rows 0..10 of fragment 1, exactly or as
/// candidates.
struct Liar {
    exact: bool,
}

#[async_trait]
impl IndexType for Liar {
    fn name(&self) -> &'static str {
        if self.exact {
            "liar_exact"
        } else {
            "liar_candidates"
        }
    }

    fn supports(&self, data_type: &DataType) -> bool {
        data_type == &DataType::Int64
    }

    async fn build(
        &self,
        _ctx: &IndexContext,
        _dir: &RelativePath,
        _input: BoxStream<'_, Result<RecordBatch>>,
        _params: &IndexParams,
    ) -> Result<Vec<u8>> {
        Ok(Vec::new())
    }

    async fn open(
        &self,
        _ctx: &IndexContext,
        _dir: &RelativePath,
        _details: &[u8],
    ) -> Result<Arc<dyn IndexSegmentReader>> {
        Ok(Arc::new(LiarSegment { exact: self.exact }))
    }

    async fn remap(
        &self,
        _ctx: &IndexContext,
        _old_dir: &RelativePath,
        _details: &[u8],
        _new_dir: &RelativePath,
        _translator: &dyn Translator,
    ) -> Result<Vec<u8>> {
        Ok(Vec::new())
    }
}

struct LiarSegment {
    exact: bool,
}

#[async_trait]
impl IndexSegmentReader for LiarSegment {
    fn can_answer(&self, query: &IndexQuery) -> bool {
        matches!(query, IndexQuery::Range { .. } | IndexQuery::Equals(_))
    }

    async fn search(&self, _query: &IndexQuery) -> Result<SearchResult> {
        let rows: RoaringTreemap = (0..10u64).map(|offset| (1 << 32) | offset).collect();
        Ok(if self.exact {
            SearchResult::Exact(rows)
        } else {
            SearchResult::Candidates(rows)
        })
    }

    async fn stored_addresses(&self) -> Result<RoaringTreemap> {
        Ok((0..10u64).map(|offset| (1 << 32) | offset).collect())
    }
}

async fn table(exact: bool) -> (Dataset, Arc<IndexRegistry>) {
    let uri = format!("memory://lying-index-{exact}-{}", uuid::Uuid::new_v4());
    let mut dataset = Dataset::create(&uri, sample_schema(), OpenOptions::default())
        .await
        .unwrap();
    let options = WriteOptions {
        max_rows_per_file: 100,
        ..WriteOptions::default()
    };
    dataset
        .append(vec![sample_rows(0, 300)], &options)
        .await
        .unwrap();
    let mut registry = IndexRegistry::with_builtins();
    registry.register(Arc::new(Liar { exact }));
    let name = Liar { exact }.name();
    let dataset = create_index_with(
        &dataset,
        &registry,
        "ix",
        "id",
        name,
        &IndexParams::default(),
    )
    .await
    .unwrap();
    (dataset, Arc::new(registry))
}

async fn run(dataset: &Dataset, registry: &Arc<IndexRegistry>, filter: &str) -> Result<Vec<i64>> {
    let result = Query::new(dataset)
        .filter(filter)?
        .project(&["id"])
        .with_registry(registry.clone())
        .index_use(IndexUse::Always)
        .execute()
        .await?;
    Ok(result
        .batch
        .column(0)
        .as_any()
        .downcast_ref::<arrow_array::Int64Array>()
        .unwrap()
        .values()
        .to_vec())
}

#[tokio::test]
async fn an_exact_answer_naming_a_row_that_does_not_match_fails_the_query() {
    let (dataset, registry) = table(true).await;
    // Rows 0..10 satisfy the conjunct: the answer stands.
    assert_eq!(
        run(&dataset, &registry, "id < 10").await.unwrap(),
        (0..10).collect::<Vec<i64>>()
    );
    // They do not satisfy these: loud, naming the index.
    for filter in [
        "id >= 150 AND id < 160",
        "id = 200",
        "id > 5 AND name = 'r7'",
    ] {
        let err = run(&dataset, &registry, filter).await.unwrap_err();
        let Error::Corrupt { what, message } = &err else {
            panic!("{filter}: not Corrupt: {err}");
        };
        assert!(what.starts_with("index 'ix' (_indices/"), "{what}");
        assert!(message.contains("as an exact match of"), "{message}");
    }
}

#[tokio::test]
async fn a_candidate_answer_is_rechecked_silently() {
    let (dataset, registry) = table(false).await;
    assert_eq!(
        run(&dataset, &registry, "id >= 150 AND id < 160")
            .await
            .unwrap(),
        Vec::<i64>::new()
    );
    assert_eq!(
        run(&dataset, &registry, "id >= 5 AND id < 200")
            .await
            .unwrap(),
        (5..10).collect::<Vec<i64>>()
    );
}
