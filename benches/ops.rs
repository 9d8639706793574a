//! Op-counting and validation speed on ResNet-50 (run by `scripts/bench/bench-ops`, not a test):
//! both run for every candidate architecture the search proposes, so they must cost well
//! under a millisecond. Prints the median of many timed batches.

use std::hint::black_box;
use std::time::Instant;

use aiperf::arch::{resnet50, Shape};
use aiperf::ops::OpCount;

fn median_us(mut f: impl FnMut()) -> f64 {
    const PER_BATCH: u32 = 200;
    let mut samples: Vec<f64> = (0..25)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..PER_BATCH {
                f();
            }
            t.elapsed().as_secs_f64() * 1e6 / f64::from(PER_BATCH)
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() {
    let g = resnet50(Shape::new(3, 224, 224), 1000);
    let build = median_us(|| {
        black_box(resnet50(Shape::new(3, 224, 224), 1000));
    });
    let validate = median_us(|| black_box(&g).validate().unwrap());
    let count = median_us(|| {
        black_box(OpCount::of(black_box(&g)).unwrap());
    });
    let descriptor = median_us(|| {
        black_box(black_box(&g).descriptor());
    });
    println!(
        "ResNet-50 IR ({} nodes), median of 25 batches of 200 calls:",
        g.nodes.len()
    );
    println!("  build the IR            {build:8.1} us");
    println!("  validate + shapes       {validate:8.1} us");
    println!("  count ops (validates)   {count:8.1} us");
    println!("  search descriptor       {descriptor:8.1} us");
}
