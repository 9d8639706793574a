//! The report as reviewers see it: the OPS curve through every epoch completion (checked
//! by hand), and the HTML page rendered by a real browser (headless Chromium), each plot
//! image visibly there.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use aiperf_records::plots::{accuracy_color, epoch_curve};
use aiperf_records::{read_run, score};
use common::{close, missing_prerequisite, serial, write_run};

#[test]
fn the_ops_curve_passes_through_every_epoch_completion() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    let run = read_run(tmp.path()).unwrap();
    let s = score(&run, 360.0).unwrap();
    let c = epoch_curve(&run, &s);
    // Five counted completions (the one at 1100 s is after the end), before and after
    // each, then the end.
    let t: Vec<f64> = c.iter().map(|p| p.0).collect();
    assert_eq!(
        t,
        [100.0, 100.0, 350.0, 350.0, 400.0, 400.0, 720.0, 720.0, 900.0, 900.0, 1000.0]
    );
    let expect = [
        0.0,
        1100.0 / 100.0,
        1100.0 / 350.0,
        1650.0 / 350.0,
        1650.0 / 400.0,
        3850.0 / 400.0,
        3850.0 / 720.0,
        7150.0 / 720.0,
        7150.0 / 900.0,
        11550.0 / 900.0,
        11.55,
    ];
    for (p, want) in c.iter().zip(expect) {
        assert!(close(p.1, want), "{p:?} vs {want}");
    }
    assert!(close(c[9].2, 11550.0 / 900.0 * -(0.2f64).ln()));
    assert_eq!(c[0].2, 0.0);
    assert!(close(c[10].1, s.ops_per_s) && close(c[10].2, s.regulated));
    // Accuracy colours: red, yellow-ish, green.
    assert_eq!(accuracy_color(0.0).0, 220);
    assert!(accuracy_color(1.0).1 > accuracy_color(1.0).0);
    assert_eq!(accuracy_color(f64::NAN), accuracy_color(0.0));
}

/// Headless Chromium from Debian (`chromium-headless-shell`), if installed.
fn chromium() -> Option<PathBuf> {
    [
        "/usr/lib/chromium/chromium-headless-shell",
        "/usr/bin/chromium-headless-shell",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

/// Screenshot of `page` (1000 × 3000 px): non-white pixels and strongly blue ones.
fn render(browser: &Path, page: &Path, shot: &Path) -> (u32, u32, usize, usize) {
    let out = Command::new("timeout")
        .arg("60")
        .arg(browser)
        .args(["--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .args(["--window-size=1000,3000", "--virtual-time-budget=5000"])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let img = image::open(shot).unwrap().to_rgb8();
    let ink = img
        .pixels()
        .filter(|p| p.0.iter().any(|&c| c < 235))
        .count();
    let blue = img
        .pixels()
        .filter(|p| p.0[2] > 200 && p.0[0] < 80 && p.0[1] < 80)
        .count();
    (img.width(), img.height(), ink, blue)
}

#[test]
fn the_report_renders_in_a_browser_with_every_plot() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    let dir = tmp.path().join("report");
    let out = Command::new(env!("CARGO_BIN_EXE_aiperf-score"))
        .arg(tmp.path())
        .arg("--report")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.code() == Some(4), // scored, INVALID (docs/reviewer.md, "Exit status")
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    if html.contains("No plots") {
        return missing_prerequisite("a TrueType font for the plots", "fonts-dejavu-core");
    }
    let Some(browser) = chromium() else {
        return missing_prerequisite("headless Chromium", "chromium-headless-shell");
    };
    assert!(
        html.contains("<h2>Trials</h2>") && html.contains("background:rgb("),
        "{html}"
    );
    // The page without its images, then with one image at a time: each adds its ink.
    let plots = ["ops", "error", "trials", "utilisation"];
    let strip = |keep: Option<&str>| {
        html.lines()
            .filter(|l| {
                !l.contains("<img") || keep.is_some_and(|k| l.contains(&format!("\"{k}.svg\"")))
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    std::fs::write(dir.join("bare.html"), strip(None)).unwrap();
    let (w, h, bare, _) = render(&browser, &dir.join("bare.html"), &dir.join("bare.png"));
    assert_eq!((w, h), (1000, 3000), "screenshot size");
    assert!(
        bare > 2000,
        "the text itself renders: {bare} non-white pixels"
    );
    for name in plots {
        let page = dir.join(format!("only-{name}.html"));
        std::fs::write(&page, strip(Some(name))).unwrap();
        let (_, _, ink, blue) = render(&browser, &page, &dir.join(format!("{name}.shot.png")));
        // A broken image is an icon of a few hundred pixels; a plot is thousands.
        assert!(
            ink > bare + 5000,
            "{name}.svg: {ink} non-white pixels vs {bare} without it"
        );
        if name == "ops" {
            assert!(blue > 500, "the blue OPS curve: {blue} pixels");
        }
    }
    let (_, _, all, _) = render(&browser, &dir.join("index.html"), &dir.join("index.png"));
    assert!(all > bare + 4 * 5000, "{all} vs {bare}");
}
