//! The command line's units, one spelling each: sizes of
//! memory (`512m`, `2g`), CPU counts (`1.5`) and durations (`500ms`,
//! `30s`, `2m`, `1h`). Every parser checks its range and says what it
//! expects; `--help` shows the same spelling everywhere.

use std::time::Duration;

/// Parses `512m`, `2g`, `1.5g`, `65536k` or plain bytes.
pub fn parse_bytes(s: &str) -> Result<i64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1024.0),
        Some('m') => (&t[..t.len() - 1], 1024.0 * 1024.0),
        Some('g') => (&t[..t.len() - 1], 1024.0 * 1024.0 * 1024.0),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size like 512m or 2g"))?;
    let bytes = v * mult;
    if !(bytes.is_finite() && (4.0 * 1024.0 * 1024.0..1e15).contains(&bytes)) {
        return Err(format!("`{s}`: a size between 4m and 900t, please"));
    }
    Ok(bytes as i64)
}

/// Parses a CPU count such as `1.5` into nano-CPUs.
pub fn parse_cpus(s: &str) -> Result<i64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a CPU count like 1 or 1.5"))?;
    if !(v.is_finite() && (0.01..=1024.0).contains(&v)) {
        return Err(format!("`{s}`: between 0.01 and 1024 CPUs, please"));
    }
    Ok((v * 1e9) as i64)
}

/// Parses a duration: a number and its unit, `ms`, `s`, `m` or `h`
/// (`500ms`, `30s`, `1.5s`, `2m`, `1h`). A bare number is refused: a
/// duration always says its unit.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit.trim() {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "" => {
            return Err(format!(
                "`{s}` has no unit: write a duration like 30s, 2m or 500ms"
            ));
        }
        other => {
            return Err(format!(
                "`{s}`: `{other}` is not a unit (ms, s, m or h, as in 30s or 2m)"
            ));
        }
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration like 30s, 2m or 500ms"))?;
    let secs = v * scale;
    if !(secs.is_finite() && (0.0..1e9).contains(&secs)) {
        return Err(format!("`{s}` is not a duration like 30s, 2m or 500ms"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A value parser for a duration between `min` and `max` (inclusive).
pub fn duration_between(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s| {
        let d = parse_duration(s)?;
        if d < min || d > max {
            return Err(format!(
                "`{s}`: between {} and {}, please",
                show_duration(min),
                show_duration(max)
            ));
        }
        Ok(d)
    }
}

/// Like [`duration_between`], and a bare number is read as seconds: the
/// spelling of a flag that took seconds before durations had units
/// (`--ready-timeout 30`), kept for one release (CHANGELOG).
pub fn duration_or_seconds_between(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    let checked = duration_between(min, max);
    move |s| match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..1e9).contains(&v) => checked(&format!("{v}s")),
        _ => checked(s),
    }
}

/// A duration as the command line spells it (`30s`, `2m`, `1.5s`, `250ms`).
pub fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(3_600_000) && ms > 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else if ms >= 1000 {
        format!("{}s", d.as_secs_f64())
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: i64 = 1024 * 1024;

    #[test]
    fn sizes_and_cpus() {
        assert_eq!(parse_bytes("512m").unwrap(), 512 * MIB);
        assert_eq!(parse_bytes("2g").unwrap(), 2048 * MIB);
        assert_eq!(parse_bytes("2GB").unwrap(), 2048 * MIB);
        assert_eq!(parse_bytes("1.5g").unwrap(), 1536 * MIB);
        assert!(parse_bytes("1k").is_err(), "below the floor");
        assert!(parse_bytes("lots").is_err());
        assert_eq!(parse_cpus("1.5").unwrap(), 1_500_000_000);
        assert!(parse_cpus("0").is_err());
        assert!(parse_cpus("nan").is_err());
    }

    #[test]
    fn durations_have_one_spelling_with_a_unit() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration(" 0s ").unwrap(), Duration::ZERO);
        for bad in [
            "30",
            "",
            "s",
            "2 minutes",
            "-1s",
            "1e3s",
            "3d",
            "1.2.3s",
            "inf",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains('`'), "{bad}: {e}");
        }
        assert!(parse_duration("30").unwrap_err().contains("no unit"));
    }

    #[test]
    fn ranges_are_checked_and_named() {
        let p = duration_between(Duration::from_secs(1), Duration::from_secs(600));
        assert_eq!(p("10m").unwrap(), Duration::from_secs(600));
        let e = p("11m").unwrap_err();
        assert!(e.contains("between 1s and 10m"), "{e}");
        assert!(p("500ms").is_err());
        let legacy = duration_or_seconds_between(Duration::ZERO, Duration::from_secs(600));
        assert_eq!(legacy("30").unwrap(), Duration::from_secs(30));
        assert_eq!(legacy("2.5").unwrap(), Duration::from_millis(2500));
        assert_eq!(legacy("1m").unwrap(), Duration::from_secs(60));
        assert!(legacy("601").is_err());
        assert!(legacy("-1").is_err());
    }

    #[test]
    fn durations_show_as_they_are_spelt() {
        for (d, s) in [
            (Duration::from_secs(30), "30s"),
            (Duration::from_secs(120), "2m"),
            (Duration::from_secs(7200), "2h"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(show_duration(d), s);
            assert_eq!(parse_duration(s).unwrap(), d);
        }
    }
}
