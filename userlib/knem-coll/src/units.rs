//! What the measuring tools share: sizes as people write them, medians.

/// Parses a size: a number with an optional binary suffix (`K`/`KiB`/`KB`,
/// `M`…, `G`…, all powers of 1024; `B` or none for bytes), or a sum of
/// such terms (`16M+3`); the error says why not.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let mut total = 0u64;
    for term in s.split('+') {
        let n = parse_term(term).map_err(|why| format!("invalid size `{s}`: {why}"))?;
        total = total
            .checked_add(n)
            .ok_or_else(|| format!("invalid size `{s}`: must be below 2^64"))?;
    }
    Ok(total)
}

fn parse_term(term: &str) -> Result<u64, String> {
    let t = term.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    if num.is_empty() {
        return Err("expected a number such as 4K or 1MiB".into());
    }
    let n: u64 = num.parse().map_err(|_| "number too large".to_string())?;
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        other => return Err(format!("unknown suffix `{other}`")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| "must be below 2^64".to_string())
}

/// Median of the samples (mean of the middle two for an even count);
/// `None` when there are none.  NaNs sort last.
pub fn median(samples: &[f64]) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The first CPU's "model name" in the text of /proc/cpuinfo (what names
/// a machine in a rules file and in a benchmark's report).
pub fn cpu_model_in(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "model name").then(|| v.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_sums() {
        assert_eq!(parse_size("16M+3"), Ok((16 << 20) + 3));
        assert_eq!(parse_size("4kib + 1K"), Ok(5120));
        assert_eq!(parse_size("0"), Ok(0));
        assert!(parse_size("").is_err());
        assert!(parse_size("1+").is_err());
        assert!(parse_size("16G+17179869184G").is_err());
    }

    #[test]
    fn cpu_model_of_the_first_cpu() {
        let info = "processor\t: 0\nmodel name\t: Xeon A\n\nprocessor\t: 1\nmodel name\t: Xeon B\n";
        assert_eq!(cpu_model_in(info).as_deref(), Some("Xeon A"));
        assert_eq!(cpu_model_in("model names: x\n"), None);
        assert_eq!(cpu_model_in(""), None);
    }
}
