//! The human-readable per-layer table of `aiperf ops`.

use std::fmt::Write;

use super::OpCount;

/// `1234567` → `1,234,567`.
pub fn group_digits(n: u128) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() * 4 / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

impl OpCount {
    /// One row per layer (name, kind, output shape, parameters, FP and BP per image), then
    /// the totals.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let name_w = self
            .layers
            .iter()
            .map(|l| l.name.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let _ = writeln!(
            t,
            "{:>4}  {:<name_w$}  {:<15}  {:>12}  {:>12}  {:>16}  {:>16}",
            "#", "name", "layer", "output", "params", "FP/image", "BP/image"
        );
        for l in &self.layers {
            let _ = writeln!(
                t,
                "{:>4}  {:<name_w$}  {:<15}  {:>12}  {:>12}  {:>16}  {:>16}",
                l.index,
                l.name,
                l.kind,
                l.output.to_string(),
                group_digits(l.params.into()),
                group_digits(l.fp.into()),
                group_digits(l.bp.into())
            );
        }
        let g = |v: u64| group_digits(v.into());
        let _ = writeln!(t, "softmax FP/image            {:>20}", g(self.softmax_fp));
        let _ = writeln!(t, "parameters                  {:>20}", g(self.params));
        let _ = writeln!(
            t,
            "FP per image (evaluation)   {:>20}",
            g(self.fp_per_image)
        );
        let _ = writeln!(
            t,
            "BP per image                {:>20}",
            g(self.bp_per_image)
        );
        let _ = writeln!(
            t,
            "FP+BP per image (training)  {:>20}",
            g(self.train_per_image())
        );
        let _ = writeln!(
            t,
            "update per optimizer step   {:>20}",
            g(self.update_per_step())
        );
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::{Graph, Layer, Shape};

    #[test]
    fn digits_are_grouped_in_threes() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1000), "1,000");
        assert_eq!(group_digits(7_806_583_495), "7,806,583,495");
    }

    #[test]
    fn table_snapshot_of_a_small_graph() {
        let mut g = Graph::default();
        g.push(
            "input",
            Layer::Input {
                shape: Shape::new(1, 4, 4),
            },
            &[],
        );
        g.push(
            "conv",
            Layer::Conv2d {
                out_channels: 2,
                kernel: 3,
                stride: 1,
                padding: 1,
            },
            &[0],
        );
        g.push("pool", Layer::GlobalAvgPool, &[1]);
        g.push("fc", Layer::Dense { out_features: 3 }, &[2]);
        // `\x20` keeps the first line's indentation through the string continuation.
        let want = "\
\x20\x20\x20#  name   layer                  output        params          FP/image          BP/image
   0  input  input                   1x4x4             0                 0                 0
   1  conv   conv2d                  2x4x4            18               576               576
   2  pool   global_avg_pool         2x1x1             0                38                 0
   3  fc     dense                   3x1x1             9                12                24
softmax FP/image                              38
parameters                                    27
FP per image (evaluation)                    664
BP per image                                 600
FP+BP per image (training)                 1,264
update per optimizer step                     54
";
        assert_eq!(OpCount::of(&g).unwrap().table(), want);
    }
}
