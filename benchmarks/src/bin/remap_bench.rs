//! Row-address remap benchmark: the compact `RowAddrRemap` against a naive
//! `HashMap<u64, Option<u64>>` (what Lance built before #7150).
//!
//! Table: `rows` rows in 1,000 equal fragments, rewritten in groups of 10 adjacent
//! fragments, each group written to new fragments of at most 1,048,576 rows.
//! Scenarios: no deletions, 1 % random deletions, 30 % deletions in clusters.
//! Prints one JSON line per (scenario, rows, structure).
//!
//! `cargo run --release -p refract-benchmarks --bin remap_bench -- [--rows 10000000,100000000] [--quick] [--with-hashmap-100m]`

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Instant;

use clap::Parser;
use refract_core::{
    estimate_hashmap_bytes, row_address, FragmentRows, RankedLayout, RewriteGroupInput,
    RowAddrRemap, Translator, MAX_TRANSLATION_BATCH,
};
use roaring::{RoaringBitmap, RoaringTreemap};
use serde_json::json;

#[derive(Debug, Parser)]
struct Args {
    /// Table sizes to run, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "10000000,100000000")]
    rows: Vec<u64>,
    /// Run 1,000,000 rows only.
    #[arg(long)]
    quick: bool,
    /// Also build the naive HashMap at 100M rows and above (about 6.7 GB).
    #[arg(long)]
    with_hashmap_100m: bool,
    /// Old fragments in the table.
    #[arg(long, default_value_t = 1_000)]
    fragments: u64,
    /// Old fragments per rewrite group.
    #[arg(long, default_value_t = 10)]
    group_size: usize,
    /// Random point lookups per measurement.
    #[arg(long, default_value_t = 2_000_000)]
    point_queries: usize,
}

/// Largest new fragment a group writes.
const TARGET_ROWS_PER_FRAGMENT: u64 = 1_048_576;
/// Rows at and above which the HashMap is skipped unless asked for.
const HASHMAP_LIMIT_ROWS: u64 = 100_000_000;

#[derive(Debug, Clone, Copy)]
enum Scenario {
    NoDeletions,
    RandomOnePercent,
    ClusteredThirtyPercent,
}

impl Scenario {
    const ALL: [Scenario; 3] = [
        Scenario::NoDeletions,
        Scenario::RandomOnePercent,
        Scenario::ClusteredThirtyPercent,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::NoDeletions => "no_deletions",
            Scenario::RandomOnePercent => "random_1pct",
            Scenario::ClusteredThirtyPercent => "clustered_30pct",
        }
    }

    /// Surviving offsets of one fragment.
    fn survivors(self, rows: u32, rng: &mut SplitMix) -> RoaringBitmap {
        match self {
            Scenario::NoDeletions => (0..rows).collect(),
            Scenario::RandomOnePercent => {
                RoaringBitmap::from_sorted_iter((0..rows).filter(|_| rng.below(100) != 0))
                    .unwrap_or_default()
            }
            Scenario::ClusteredThirtyPercent => {
                // Alternate kept and deleted runs (mean lengths 7:3 of a tenth of the
                // fragment, at most 7,000:3,000 rows), starting at a random phase.
                let unit = (rows / 10).clamp(10, 10_000);
                let mut bitmap = RoaringBitmap::new();
                let mut at = rng.below(u64::from(unit)) as u32;
                while at < rows {
                    let keep = 1 + rng.below(u64::from(unit) * 7 / 5) as u32;
                    let end = at.saturating_add(keep).min(rows);
                    bitmap.insert_range(at..end);
                    at = end.saturating_add(1 + rng.below(u64::from(unit) * 3 / 5) as u32);
                }
                bitmap
            }
        }
    }
}

/// splitmix64: deterministic, dependency-free randomness.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The compaction capture of one scenario.
struct Capture {
    groups: Vec<RewriteGroupInput>,
    fragment_rows: u32,
    fragments: u32,
    survivors: u64,
}

fn capture(
    scenario: Scenario,
    rows: u64,
    fragments: u64,
    group_size: usize,
) -> Result<Capture, Box<dyn std::error::Error>> {
    let fragment_rows = u32::try_from(rows / fragments)?;
    let fragments = u32::try_from(fragments)?;
    let mut rng = SplitMix(0x5EED ^ rows);
    let mut groups = Vec::new();
    let mut next_new_id = fragments;
    let mut survivors = 0u64;
    let ids: Vec<u32> = (0..fragments).collect();
    for chunk in ids.chunks(group_size.max(1)) {
        let bitmaps: Vec<(u32, RoaringBitmap)> = chunk
            .iter()
            .map(|id| (*id, scenario.survivors(fragment_rows, &mut rng)))
            .collect();
        let surviving = RoaringTreemap::from_bitmaps(bitmaps);
        let count = surviving.len();
        survivors += count;
        let n_new = count.div_ceil(TARGET_ROWS_PER_FRAGMENT).max(1);
        let new_fragments = (0..n_new)
            .map(|i| {
                let id = u64::from(next_new_id) + i;
                let rows = count / n_new + u64::from(i < count % n_new);
                FragmentRows::new(id, rows)
            })
            .collect();
        next_new_id += u32::try_from(n_new)?;
        groups.push(RewriteGroupInput {
            old_fragments: chunk
                .iter()
                .map(|id| FragmentRows::new(u64::from(*id), u64::from(fragment_rows)))
                .collect(),
            new_fragments,
            surviving,
        });
    }
    Ok(Capture {
        groups,
        fragment_rows,
        fragments,
        survivors,
    })
}

/// The naive map: every old address of every rewritten fragment.
fn build_hashmap(groups: &[RewriteGroupInput], total_rows: u64) -> HashMap<u64, Option<u64>> {
    let mut map = HashMap::with_capacity(total_rows as usize);
    for g in groups {
        let mut new_addrs = g
            .new_fragments
            .iter()
            .flat_map(|f| (0..f.physical_rows as u32).map(move |o| row_address(f.id as u32, o)));
        for f in &g.old_fragments {
            for o in 0..f.physical_rows as u32 {
                let a = row_address(f.id as u32, o);
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

/// Million operations per second.
fn mops(ops: u64, secs: f64) -> f64 {
    (ops as f64 / secs.max(1e-9) / 1e6 * 100.0).round() / 100.0
}

/// Times `lookup` over random addresses of the old table.
fn point_lookups(queries: &[u64], lookup: impl Fn(u64) -> Option<Option<u64>>) -> f64 {
    let started = Instant::now();
    let mut acc = 0u64;
    for q in queries {
        if let Some(Some(a)) = lookup(black_box(*q)) {
            acc = acc.wrapping_add(a);
        }
    }
    black_box(acc);
    mops(queries.len() as u64, started.elapsed().as_secs_f64())
}

/// Times `translate` over every old address in ascending order, in batches of
/// [`MAX_TRANSLATION_BATCH`]; only the translation calls are timed.
fn sorted_batches(cap: &Capture, mut translate: impl FnMut(&[u64], &mut Vec<Option<u64>>)) -> f64 {
    let mut batch = Vec::with_capacity(MAX_TRANSLATION_BATCH);
    let mut out = Vec::with_capacity(MAX_TRANSLATION_BATCH);
    let mut secs = 0.0;
    let mut total = 0u64;
    let mut acc = 0u64;
    let mut addrs =
        (0..cap.fragments).flat_map(|f| (0..cap.fragment_rows).map(move |o| row_address(f, o)));
    loop {
        batch.clear();
        batch.extend(addrs.by_ref().take(MAX_TRANSLATION_BATCH));
        if batch.is_empty() {
            break;
        }
        let started = Instant::now();
        translate(&batch, &mut out);
        secs += started.elapsed().as_secs_f64();
        total += batch.len() as u64;
        acc = acc.wrapping_add(out.iter().flatten().fold(0, |s, a| s ^ a));
    }
    black_box(acc);
    mops(total, secs)
}

fn layout_counts(remap: &RowAddrRemap) -> serde_json::Value {
    let RowAddrRemap::Compact(c) = remap else {
        return json!({});
    };
    let mut counts = [0u64; 4];
    for (_, layout) in c.layouts() {
        let i = match layout {
            RankedLayout::Sparse => 0,
            RankedLayout::Dense => 1,
            RankedLayout::Runs => 2,
            _ => 3,
        };
        counts[i] += 1;
    }
    json!({"sparse": counts[0], "dense": counts[1], "runs": counts[2], "roaring": counts[3]})
}

fn run(args: &Args, scenario: Scenario, rows: u64) -> Result<(), Box<dyn std::error::Error>> {
    let cap = capture(scenario, rows, args.fragments, args.group_size)?;
    let total_rows = u64::from(cap.fragment_rows) * u64::from(cap.fragments);
    let mut rng = SplitMix(42);
    let queries: Vec<u64> = (0..args.point_queries)
        .map(|_| {
            let f = rng.below(u64::from(cap.fragments)) as u32;
            row_address(f, rng.below(u64::from(cap.fragment_rows)) as u32)
        })
        .collect();

    let started = Instant::now();
    let remap = RowAddrRemap::compact(cap.groups.clone())?;
    let build_ms = started.elapsed().as_secs_f64() * 1e3;
    let deep = remap.deep_size_bytes();
    let point = point_lookups(&queries, |a| remap.get(a));
    let sorted = sorted_batches(&cap, |b, out| {
        // Translating a remap never fails.
        let _ = remap.translate(b, out);
    });
    println!(
        "{}",
        json!({
            "benchmark": "remap",
            "structure": "compact",
            "scenario": scenario.name(),
            "rows": total_rows,
            "fragments": cap.fragments,
            "rewritten_rows": cap.survivors,
            "build_ms": (build_ms * 10.0).round() / 10.0,
            "deep_size_bytes": deep,
            "bytes_per_rewritten_row": deep as f64 / cap.survivors.max(1) as f64,
            "bytes_per_fragment": deep / u64::from(cap.fragments),
            "point_lookup_mops": point,
            "sorted_batch_mops": sorted,
            "layouts": layout_counts(&remap),
        })
    );

    if total_rows >= HASHMAP_LIMIT_ROWS && !args.with_hashmap_100m {
        println!(
            "{}",
            json!({
                "benchmark": "remap",
                "structure": "hashmap",
                "scenario": scenario.name(),
                "rows": total_rows,
                "skipped": "pass --with-hashmap-100m",
                "estimated_bytes": estimate_hashmap_bytes(total_rows),
            })
        );
        return Ok(());
    }
    let started = Instant::now();
    let map = build_hashmap(&cap.groups, total_rows);
    let build_ms = started.elapsed().as_secs_f64() * 1e3;
    // The compact remap must answer exactly like the map it replaces.
    if let Some(q) = queries
        .iter()
        .find(|q| remap.get(**q) != map.get(q).copied())
    {
        return Err(format!("compact and HashMap disagree at address {q:#x}").into());
    }
    let deep = estimate_hashmap_bytes(map.capacity() as u64);
    let point = point_lookups(&queries, |a| map.get(&a).copied());
    let sorted = sorted_batches(&cap, |b, out| {
        out.clear();
        out.extend(b.iter().map(|a| map.get(a).copied().unwrap_or(Some(*a))));
    });
    println!(
        "{}",
        json!({
            "benchmark": "remap",
            "structure": "hashmap",
            "scenario": scenario.name(),
            "rows": total_rows,
            "fragments": cap.fragments,
            "rewritten_rows": cap.survivors,
            "build_ms": (build_ms * 10.0).round() / 10.0,
            "deep_size_bytes": deep,
            "bytes_per_rewritten_row": deep as f64 / cap.survivors.max(1) as f64,
            "bytes_per_fragment": deep / u64::from(cap.fragments),
            "point_lookup_mops": point,
            "sorted_batch_mops": sorted,
        })
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let sizes = if args.quick {
        vec![1_000_000]
    } else {
        args.rows.clone()
    };
    for rows in sizes {
        for scenario in Scenario::ALL {
            run(&args, scenario, rows)?;
        }
    }
    Ok(())
}
