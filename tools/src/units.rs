//! Parsing and printing sizes and durations for the command line: `10GiB`, `1.5TB`, `4096`,
//! `7d`, `168h`, `500ms`.

/// Parses a byte count. Binary suffixes (`KiB`, `MiB`, `GiB`, `TiB`, `PiB`, also `Ki`, `Mi`, ...)
/// are powers of 1024; SI suffixes (`K`/`KB`, `M`/`MB`, `G`/`GB`, `T`/`TB`, `P`/`PB`) are powers
/// of 1000; `B` or nothing means bytes. Case-insensitive, fractions allowed (`1.5GiB`).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let num: String = num.chars().filter(|&c| c != '_').collect();
    if num.is_empty() {
        return Err(format!("{s:?} is not a size (examples: 4096, 64KiB, 10GiB, 1.5TB)"));
    }
    let mult: u64 = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1000,
        "m" | "mb" => 1000u64.pow(2),
        "g" | "gb" => 1000u64.pow(3),
        "t" | "tb" => 1000u64.pow(4),
        "p" | "pb" => 1000u64.pow(5),
        "ki" | "kib" => 1 << 10,
        "mi" | "mib" => 1 << 20,
        "gi" | "gib" => 1 << 30,
        "ti" | "tib" => 1 << 40,
        "pi" | "pib" => 1 << 50,
        other => {
            return Err(format!("{s:?}: unknown size suffix {other:?} (use B, KB/MB/GB/TB/PB or KiB/MiB/GiB/TiB/PiB)"))
        }
    };
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult).ok_or_else(|| format!("{s:?} is too large"));
    }
    let f: f64 = num.parse().map_err(|_| format!("{s:?} is not a size (examples: 4096, 64KiB, 10GiB, 1.5TB)"))?;
    let v = f * mult as f64;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(v.round() as u64)
}

/// Parses a `segment.index.bytes` value: a size from 4 bytes (Kafka's minimum) to `i32::MAX`.
pub fn parse_segment_index_bytes(s: &str) -> Result<u32, String> {
    let v = parse_bytes(s)?;
    u32::try_from(v)
        .ok()
        .filter(|v| (4..=i32::MAX as u32).contains(v))
        .ok_or_else(|| format!("{s}: segment.index.bytes must be from 4 to {} bytes", i32::MAX))
}

/// Parses a duration into milliseconds: a plain number is milliseconds; suffixes `ms`, `s`, `m`
/// (minutes), `h`, `d`, `w`. `-1` means "no limit" (Kafka's convention) and is returned as -1.
pub fn parse_duration_ms(s: &str) -> Result<i64, String> {
    let t = s.trim();
    if t == "-1" {
        return Ok(-1);
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let num: String = num.chars().filter(|&c| c != '_').collect();
    let mult: f64 = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "ms" => 1.0,
        "s" => 1000.0,
        "m" | "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        "w" => 7.0 * 86_400_000.0,
        other => return Err(format!("{s:?}: unknown duration suffix {other:?} (use ms, s, m, h, d, w)")),
    };
    let f: f64 = num.parse().map_err(|_| format!("{s:?} is not a duration (examples: 604800000, 7d, 168h, 30m)"))?;
    let v = f * mult;
    if !v.is_finite() || v > i64::MAX as f64 {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(v.round() as i64)
}

/// `1.0 GiB`-style rendering with the exact byte count kept for small values.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// A duration in ms as days/hours/minutes for humans.
pub fn human_ms(ms: i64) -> String {
    if ms < 0 {
        return "unlimited".into();
    }
    let s = ms as f64 / 1000.0;
    if s >= 86_400.0 {
        format!("{:.1} d", s / 86_400.0)
    } else if s >= 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else if s >= 60.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{s:.1} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("10GiB"), Ok(10 << 30));
        assert_eq!(parse_bytes("10gib"), Ok(10 << 30));
        assert_eq!(parse_bytes("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_bytes("1.5KiB"), Ok(1536));
        assert_eq!(parse_bytes("64 KiB"), Ok(65536));
        assert_eq!(parse_bytes("1_000"), Ok(1000));
        assert!(parse_bytes("10XB").is_err());
        assert!(parse_bytes("GiB").is_err());
        assert!(parse_bytes("99999999999PiB").is_err());
        assert_eq!(parse_segment_index_bytes("10MiB"), Ok(10 << 20));
        assert_eq!(parse_segment_index_bytes("2147483647"), Ok(i32::MAX as u32));
        assert!(parse_segment_index_bytes("2GiB").is_err());
        assert!(parse_segment_index_bytes("3").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("604800000"), Ok(604_800_000));
        assert_eq!(parse_duration_ms("7d"), Ok(604_800_000));
        assert_eq!(parse_duration_ms("168h"), Ok(604_800_000));
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("-1"), Ok(-1));
        assert!(parse_duration_ms("7y").is_err());
    }

    #[test]
    fn human() {
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1 << 30), "1.0 GiB");
        assert_eq!(human_ms(604_800_000), "7.0 d");
    }
}
