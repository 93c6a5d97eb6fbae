//! What the `harness = false` benchmarks share: their `--name value` options, the median and
//! 90th percentile of their samples, milliseconds since an instant, and an in-process
//! coordinator whose background ticks stay out of the way of the ticks a benchmark times.

use std::time::Instant;

use crate::Harness;

/// The value of `--name N` on the command line, or `default`.
pub fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The median and the 90th percentile of `samples` (not empty).
pub fn median_p90(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let p90 = samples[((samples.len() as f64) * 0.9).ceil() as usize - 1];
    (samples[samples.len() / 2], p90)
}

/// Milliseconds since `since`.
pub fn ms_since(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// A coordinator whose executor ticks on its own only hourly and debounces events for ten
/// minutes: the benchmark runs the ticks it times.
pub async fn quiet_harness() -> Harness {
    Harness::start_with_config(|_, c| {
        c.rollouts.interval_secs = 3600;
        c.rollouts.debounce_ms = 600_000;
    })
    .await
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_and_p90_of_ten_samples() {
        let v: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        assert_eq!(super::median_p90(v), (6.0, 9.0));
    }
}
