//! Medians and ratios.

pub use knem_coll::units::median;

/// Smallest and largest sample.
pub fn min_max(samples: &[f64]) -> Option<(f64, f64)> {
    let mut it = samples.iter().copied();
    let first = it.next()?;
    Some(it.fold((first, first), |(lo, hi), x| (lo.min(x), hi.max(x))))
}

/// `num / den` when both are finite and `den > 0`.
pub fn ratio(num: f64, den: f64) -> Option<f64> {
    (num.is_finite() && den.is_finite() && den > 0.0).then(|| num / den)
}

/// Bandwidth in MiB/s of `bytes` moved in `ns` nanoseconds.
pub fn mib_per_s(bytes: u64, ns: f64) -> f64 {
    if ns <= 0.0 {
        return f64::NAN;
    }
    bytes as f64 / (1024.0 * 1024.0) / (ns * 1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_even_empty() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        // one wild outlier does not move it
        assert_eq!(median(&[1.0, 1.0, 1e9]), Some(1.0));
    }

    #[test]
    fn min_max_and_ratio() {
        assert_eq!(min_max(&[2.0, -1.0, 7.0]), Some((-1.0, 7.0)));
        assert_eq!(min_max(&[]), None);
        assert_eq!(ratio(1.0, 4.0), Some(0.25));
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(f64::NAN, 1.0), None);
    }

    #[test]
    fn bandwidth_units() {
        // 1 MiB in 1 ms is 1000 MiB/s
        let bw = mib_per_s(1 << 20, 1e6);
        assert!((bw - 1000.0).abs() < 1e-9);
        assert!(mib_per_s(1, 0.0).is_nan());
    }
}
