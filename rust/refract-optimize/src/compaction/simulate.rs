//! A pure simulator of compaction runs, for tests, benchmarks and the demo.
//!
//! [`simulate_run`] applies a plan to fragment statistics the way the executor
//! applies it to a table: each task's run is replaced in place by outputs of the
//! planned sizes, with fresh ids, no deletions, the sources' coverage key and bytes
//! proportional to rows. [`execute_until_noop`] repeats plan + simulate until the
//! plan is empty, with a cap on rounds.

use refract_core::{Error, Result};

use super::candidates::FragmentStats;
use super::options::CompactionOptions;
use super::task_planner::{plan_tasks, TaskPlan};

/// Applies `plan` to `fragments`. Fresh ids start above the largest id present.
///
/// # Errors
/// InvalidInput when the plan is not a list of contiguous,
/// non-overlapping runs in list order, mixes coverage keys, or does not conserve
/// live rows — the structural half of the order invariant.
pub fn simulate_run(fragments: &[FragmentStats], plan: &[TaskPlan]) -> Result<Vec<FragmentStats>> {
    let mut next_id = fragments
        .iter()
        .map(|f| f.id)
        .max()
        .map_or(0, |max| max + 1);
    let mut result = Vec::with_capacity(fragments.len());
    let mut cursor = 0;
    for (index, task) in plan.iter().enumerate() {
        let first = task
            .fragment_ids
            .first()
            .ok_or_else(|| task_error(index, "has no source fragments"))?;
        let offset = fragments[cursor..]
            .iter()
            .position(|f| f.id == *first)
            .ok_or_else(|| task_error(index, "starts at a fragment not after the previous task"))?;
        result.extend_from_slice(&fragments[cursor..cursor + offset]);
        let start = cursor + offset;
        let end = start + task.fragment_ids.len();
        let sources = fragments
            .get(start..end)
            .filter(|run| {
                run.iter()
                    .map(|f| f.id)
                    .eq(task.fragment_ids.iter().copied())
            })
            .ok_or_else(|| task_error(index, "is not a contiguous run of the fragment list"))?;
        result.extend(outputs(index, sources, task, &mut next_id)?);
        cursor = end;
    }
    result.extend_from_slice(&fragments[cursor..]);
    Ok(result)
}

fn outputs(
    index: usize,
    sources: &[FragmentStats],
    task: &TaskPlan,
    next_id: &mut u64,
) -> Result<Vec<FragmentStats>> {
    let live: u64 = sources.iter().map(|f| f.live_rows).sum();
    if task.output_rows.iter().sum::<u64>() != live {
        return Err(task_error(index, "does not conserve live rows"));
    }
    if task.output_rows.contains(&0) {
        return Err(task_error(index, "writes an empty output"));
    }
    let key = sources.first().map_or(0, |f| f.coverage_key);
    if sources.iter().any(|f| f.coverage_key != key) {
        return Err(task_error(index, "mixes coverage keys"));
    }
    let estimated: u64 = sources
        .iter()
        .map(FragmentStats::estimated_live_bytes)
        .sum();
    Ok(task
        .output_rows
        .iter()
        .map(|&rows| {
            let id = *next_id;
            *next_id += 1;
            FragmentStats {
                id,
                physical_rows: rows,
                live_rows: rows,
                bytes: proportional_bytes(rows, estimated, live),
                coverage_key: key,
            }
        })
        .collect())
}

/// `ceil(rows * estimated / live)`: rounding up keeps byte-split outputs at or
/// above the size the planner estimated for them.
fn proportional_bytes(rows: u64, estimated: u64, live: u64) -> u64 {
    if live == 0 {
        return 0;
    }
    let bytes = (u128::from(rows) * u128::from(estimated)).div_ceil(u128::from(live));
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

fn task_error(index: usize, what: &str) -> Error {
    Error::invalid_input(format!("compaction plan task {index} {what}"))
}

/// Where [`execute_until_noop`] stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Convergence {
    /// The layout after the last round.
    pub fragments: Vec<FragmentStats>,
    /// Rounds with a non-empty plan.
    pub rounds: usize,
    /// True when the last plan was empty (a fixed point); false when the cap hit.
    pub converged: bool,
}

/// Plans and simulates runs until a plan is empty or `max_rounds` non-empty runs
/// have been applied. `check` sees every round's input, plan and output.
///
/// # Errors
/// The planner's errors ([`plan_tasks`]), [`simulate_run`]'s, and the first
/// error `check` returns.
pub fn execute_until_noop(
    start: &[FragmentStats],
    options: &CompactionOptions,
    max_rounds: usize,
    mut check: impl FnMut(&[FragmentStats], &[TaskPlan], &[FragmentStats]) -> Result<()>,
) -> Result<Convergence> {
    let mut fragments = start.to_vec();
    for rounds in 0..=max_rounds {
        let plan = plan_tasks(&fragments, options)?;
        if plan.is_empty() {
            return Ok(Convergence {
                fragments,
                rounds,
                converged: true,
            });
        }
        if rounds == max_rounds {
            break;
        }
        let next = simulate_run(&fragments, &plan)?;
        check(&fragments, &plan, &next)?;
        fragments = next;
    }
    Ok(Convergence {
        fragments,
        rounds: max_rounds,
        converged: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frag(id: u64, live: u64) -> FragmentStats {
        FragmentStats {
            id,
            physical_rows: live,
            live_rows: live,
            bytes: live * 2,
            coverage_key: 3,
        }
    }

    fn task(ids: &[u64], rows: &[u64]) -> TaskPlan {
        TaskPlan {
            fragment_ids: ids.to_vec(),
            output_rows: rows.to_vec(),
            partial: false,
        }
    }

    #[test]
    fn replaces_runs_in_place_with_fresh_ids() {
        let layout = vec![frag(0, 10), frag(1, 20), frag(2, 30), frag(3, 40)];
        let next = simulate_run(&layout, &[task(&[1, 2], &[25, 25])]).unwrap();
        let shape: Vec<_> = next
            .iter()
            .map(|f| (f.id, f.live_rows, f.bytes, f.coverage_key))
            .collect();
        assert_eq!(
            shape,
            vec![
                (0, 10, 20, 3),
                (4, 25, 50, 3),
                (5, 25, 50, 3),
                (3, 40, 80, 3)
            ]
        );
    }

    #[test]
    fn rejects_plans_that_would_reorder_or_lose_rows() {
        let layout = vec![frag(0, 10), frag(1, 20), frag(2, 30)];
        for bad in [
            vec![task(&[0, 2], &[40])],
            vec![task(&[1], &[20]), task(&[0], &[10])],
            vec![task(&[0, 1], &[29])],
            vec![task(&[0, 1], &[30, 0])],
            vec![task(&[0, 1], &[30]), task(&[1, 2], &[50])],
            vec![task(&[], &[])],
        ] {
            assert!(
                matches!(simulate_run(&layout, &bad), Err(Error::InvalidInput { .. })),
                "{bad:?}"
            );
        }
    }
}
