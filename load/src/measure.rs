//! What the run measures, as plain functions: latency quantiles and the
//! fairness figure (Kendall's tau between arrival and service order).

use serde::Serialize;

/// Latency of one endpoint over a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// The nearest-rank quantile `q` of sorted samples.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Latency {
    pub fn of(mut samples_ms: Vec<f64>) -> Latency {
        samples_ms.sort_by(f64::total_cmp);
        Latency {
            count: samples_ms.len() as u64,
            p50_ms: quantile(&samples_ms, 0.5),
            p99_ms: quantile(&samples_ms, 0.99),
            p999_ms: quantile(&samples_ms, 0.999),
            max_ms: samples_ms.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// Kendall's tau-a between two rankings of the same items: `pairs[i]` is
/// item i's (arrival rank, service rank). 1 when every buyer who arrived
/// earlier was served earlier, -1 when the order is reversed, about 0 for a
/// lottery. `None` for fewer than two items. O(n log n): the discordant
/// pairs are the inversions of the service ranks in arrival order, counted
/// by a merge sort.
pub fn kendall_tau(pairs: &[(u64, u64)]) -> Option<f64> {
    let n = pairs.len();
    if n < 2 {
        return None;
    }
    let mut by_arrival = pairs.to_vec();
    by_arrival.sort_unstable();
    let mut ranks: Vec<u64> = by_arrival.iter().map(|&(_, s)| s).collect();
    let mut scratch = vec![0; n];
    let discordant = inversions(&mut ranks, &mut scratch);
    let total = (n as u64) * (n as u64 - 1) / 2;
    Some((total as f64 - 2.0 * discordant as f64) / total as f64)
}

/// Sorts `v` and returns how many pairs were out of order.
fn inversions(v: &mut [u64], scratch: &mut [u64]) -> u64 {
    let n = v.len();
    if n < 2 {
        return 0;
    }
    let mid = n / 2;
    let mut count = inversions(&mut v[..mid], &mut scratch[..mid])
        + inversions(&mut v[mid..], &mut scratch[mid..]);
    let (mut i, mut j, mut k) = (0, mid, 0);
    while i < mid && j < n {
        if v[i] <= v[j] {
            scratch[k] = v[i];
            i += 1;
        } else {
            scratch[k] = v[j];
            count += (mid - i) as u64;
            j += 1;
        }
        k += 1;
    }
    scratch[k..k + mid - i].copy_from_slice(&v[i..mid]);
    k += mid - i;
    scratch[k..k + n - j].copy_from_slice(&v[j..n]);
    v.copy_from_slice(&scratch[..n]);
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The definition, pair by pair.
    fn tau_by_pairs(pairs: &[(u64, u64)]) -> f64 {
        let n = pairs.len();
        let mut score = 0i64;
        for i in 0..n {
            for j in i + 1..n {
                let a = pairs[i].0.cmp(&pairs[j].0) as i64;
                let b = pairs[i].1.cmp(&pairs[j].1) as i64;
                score += a * b;
            }
        }
        score as f64 / (n * (n - 1) / 2) as f64
    }

    #[test]
    fn the_extremes() {
        let same: Vec<_> = (0..100).map(|i| (i, i)).collect();
        assert_eq!(kendall_tau(&same), Some(1.0));
        let reversed: Vec<_> = (0..100).map(|i| (i, 99 - i)).collect();
        assert_eq!(kendall_tau(&reversed), Some(-1.0));
        assert_eq!(kendall_tau(&[(1, 1)]), None);
    }

    proptest! {
        #[test]
        fn matches_the_definition(perm in Just((0u64..200).collect::<Vec<_>>()).prop_shuffle(), n in 2usize..200) {
            let pairs: Vec<_> = perm.iter().take(n).enumerate().map(|(i, &s)| (i as u64 * 3, s)).collect();
            let fast = kendall_tau(&pairs).unwrap();
            let slow = tau_by_pairs(&pairs);
            prop_assert!((fast - slow).abs() < 1e-12, "{fast} != {slow} for {pairs:?}");
        }
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let l = Latency::of((1..=1000).map(f64::from).collect());
        assert_eq!(
            (l.count, l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms),
            (1000, 500.0, 990.0, 999.0, 1000.0)
        );
        assert!(Latency::of(vec![]).p50_ms.is_nan());
    }
}
