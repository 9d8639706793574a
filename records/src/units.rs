//! How quantities are written for people: engineering notation with SI prefixes.

/// Engineering notation with SI prefixes: `1.234 P`.
pub fn si(v: f64) -> String {
    const PREFIXES: [(f64, &str); 6] = [
        (1e18, "E"),
        (1e15, "P"),
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
    ];
    PREFIXES
        .iter()
        .find(|(scale, _)| v.abs() >= *scale)
        .map_or(format!("{v:.3} "), |(scale, p)| {
            format!("{:.3} {p}", v / scale)
        })
}
