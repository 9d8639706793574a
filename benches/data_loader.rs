//! Loader throughput benchmark (run by `scripts/bench/bench-data`, not a test): images/s of the
//! aiperf loader over one packed split, beside the memory limit of copying the same bytes
//! in the same order. Prints one JSON object per measurement for the script to tabulate.
//! With `--make-synthetic DIR` it instead writes a CIFAR-shaped pack of random images.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use aiperf::data::{epoch_order, open_split, Augment, Loader, LoaderConfig, Output};
use aiperf_data_prep::{split_path, PackWriter, Source};
use clap::Parser;

#[derive(Parser, Debug)]
struct Args {
    /// Folder holding <split>.aipk.
    #[arg(long)]
    data: Option<PathBuf>,
    #[arg(long, default_value = "train")]
    split: String,
    #[arg(long, default_value = "none")]
    augment: Augment,
    #[arg(long, default_value_t = 256)]
    batch: usize,
    #[arg(long, default_value_t = 2)]
    workers: usize,
    #[arg(long, default_value_t = 3)]
    reps: u64,
    /// Write a synthetic pack of N random C×H×W images (see --shape) into this folder.
    #[arg(long)]
    make_synthetic: Option<PathBuf>,
    #[arg(long, default_value_t = 50_000)]
    n: usize,
    #[arg(long, default_value = "3x32x32")]
    shape: String,
    /// Consume at this many images/s (sleeping for each batch's share of a second, as a
    /// training step on a fast accelerator would take) and report the fraction of the time
    /// spent waiting for data, instead of the throughput.
    #[arg(long)]
    consume: Option<f64>,
    /// Ship the stored images and resize taps for augmentation on the device, and time the
    /// workers alone (the consumer takes the batches; a GPU would do the rest).
    #[arg(long)]
    ship_only: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn make_synthetic(dir: &std::path::Path, n: usize, shape: &str) -> anyhow::Result<()> {
    let dims: Vec<u32> = shape.split('x').map(str::parse).collect::<Result<_, _>>()?;
    let [c, h, w] = dims[..] else {
        anyhow::bail!("--shape must be CxHxW, got {shape}")
    };
    let path = split_path(dir, "train");
    let mut writer = PackWriter::create(&path, "train", [c, h, w], 10)?;
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut img = vec![0u8; (c * h * w) as usize];
    for i in 0..n {
        for p in img.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *p = (x >> 56) as u8;
        }
        writer.push(&img, (i % 10) as u32, &path)?;
    }
    let names = (0..10).map(|i| format!("class{i}")).collect();
    let source = Source {
        kind: "synthetic".into(),
        dataset: format!("random-{shape}"),
        inputs: vec![],
        processing: "xorshift random pixels".into(),
        subset: Some(false),
    };
    writer.finish(names, source, 0)?;
    println!("wrote {}", path.display());
    Ok(())
}

/// The data-wait fraction under a consumer of `rate` images/s: per epoch (after one warm-up
/// epoch), the time spent waiting for batches after the first over the time from the first
/// batch's arrival (the steady state of a long epoch), and the first batch's wait (each
/// epoch starts its workers afresh).
fn consume(loader: &Loader, args: &Args, rate: f64) -> anyhow::Result<()> {
    anyhow::ensure!(
        rate > 0.0 && rate.is_finite(),
        "--consume must be a positive rate"
    );
    for rep in 0..=args.reps {
        let (start, mut waited, mut images) = (Instant::now(), 0f64, 0usize);
        let (mut first_wait, mut steady_from) = (0f64, start);
        let mut batches = loader.epoch(rep);
        loop {
            let w = Instant::now();
            let Some(batch) = batches.next() else { break };
            let (x, _y) = batch?.to_tensors(tch::Device::Cpu)?;
            if images == 0 {
                first_wait = w.elapsed().as_secs_f64();
                steady_from = Instant::now();
            } else {
                waited += w.elapsed().as_secs_f64();
            }
            let n = x.size()[0] as usize;
            images += n;
            std::thread::sleep(std::time::Duration::from_secs_f64(n as f64 / rate));
        }
        let steady = steady_from.elapsed().as_secs_f64();
        if rep > 0 {
            println!(
                "{{\"impl\":\"consume\",\"augment\":\"{}\",\"workers\":{},\"batch\":{},\"rep\":{rep},\"rate\":{rate},\"images\":{images},\"first_batch_s\":{first_wait:.6},\"data_wait_fraction\":{:.4},\"images_per_s\":{:.1}}}",
                args.augment,
                args.workers,
                args.batch,
                waited / steady,
                images as f64 / start.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    // As the aiperf binary does.
    aiperf::host::keep_freed_memory();
    let args = Args::parse();
    if let Some(dir) = &args.make_synthetic {
        return make_synthetic(dir, args.n, &args.shape);
    }
    let Some(data) = &args.data else {
        anyhow::bail!("--data DIR is required")
    };
    let pack = open_split(data, &args.split)?;
    let n = pack.len();
    let image_bytes = pack.header().image_bytes();
    let cfg = LoaderConfig {
        global_batch: args.batch,
        augment: args.augment.clone(),
        workers: args.workers,
        output: if args.ship_only {
            Output::Device
        } else {
            Output::Host
        },
        seed: 1,
        ..LoaderConfig::default()
    };
    let loader = Loader::new(Arc::clone(&pack), cfg)?;
    if let Some(rate) = args.consume {
        return consume(&loader, &args, rate);
    }
    let report = |what: &str, rep: u64, secs: f64| {
        println!(
            "{{\"impl\":\"{what}\",\"dataset\":\"{}\",\"split\":\"{}\",\"augment\":\"{}\",\"workers\":{},\"batch\":{},\"rep\":{rep},\"images\":{n},\"seconds\":{secs:.6},\"images_per_s\":{:.1}}}",
            pack.header().source.dataset,
            args.split,
            args.augment,
            args.workers,
            args.batch,
            n as f64 / secs
        );
    };
    // One warm-up epoch of each, so page cache and allocator are settled.
    for rep in 0..=args.reps {
        // The memory limit: gather the same bytes in the same shuffled order, one thread.
        let order = epoch_order(n, 1, rep, true);
        let t = Instant::now();
        let mut buf = vec![0u8; args.batch * image_bytes];
        let mut checksum = 0u64;
        for chunk in order.chunks(args.batch) {
            for (k, &i) in chunk.iter().enumerate() {
                buf[k * image_bytes..(k + 1) * image_bytes].copy_from_slice(pack.image(i));
            }
            checksum = checksum.wrapping_add(u64::from(buf[0]));
        }
        std::hint::black_box(checksum);
        let copy_s = t.elapsed().as_secs_f64();

        let t = Instant::now();
        let mut images = 0usize;
        for batch in loader.epoch(rep) {
            let batch = batch?;
            images += if args.ship_only {
                batch.len()
            } else {
                batch.to_tensors(tch::Device::Cpu)?.0.size()[0] as usize
            };
        }
        assert_eq!(images, n);
        let loader_s = t.elapsed().as_secs_f64();
        if rep > 0 {
            report("copy", rep, copy_s);
            report(
                if args.ship_only {
                    "aiperf-ship"
                } else {
                    "aiperf"
                },
                rep,
                loader_s,
            );
        }
    }
    Ok(())
}
